"""The topic-summary side of the session store (a part of ``VectorDatabase``)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike

from .blobs import chunks, from_blob, now_iso, to_blob
from .exchange_input import checked_texts
from .keywords import SCORED_FROM
from .textutil import query_terms
from .vectors import VectorIndex


def check_top_k(top_k: object) -> None:
    """A result count: -1 returned all hits but one (a slice), silently (a trial)."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k must be a whole number ≥ 0, not {top_k!r}")

class TopicSummaries:
    """Topic summaries: rows, their vector index, BM25 over names and summaries (the FTS
    rows follow the table by schema 7's triggers)."""

    _topic_index: VectorIndex | None  # built on first search; None after a rollback

    def delete_topic_summaries(self, node_ids: Iterable[str]) -> None:
        """Many at once (a reorganisation removes thousands)."""
        ids = list(node_ids)
        with self._lock:
            for chunk, q in chunks(ids):
                self.con.execute(f"DELETE FROM topic_summaries WHERE node_id IN ({q})", chunk)
            if self._topic_index is not None:
                for nid in ids:
                    self._topic_index.remove(nid)

    def indexed_topics(self) -> dict[str, tuple]:
        """``node_id -> (name, summary, start, end)`` as indexed."""
        with self._lock:
            return {r[0]: tuple(r[1:]) for r in self.con.execute(
                "SELECT node_id, topic_name, summary, start_index, end_index FROM topic_summaries")}

    # --- topic summaries ---------------------------------------------------------------

    def upsert_topic_summary(self, node_id: str, topic_name: str, summary: str, embedding: ArrayLike,
                             start_index: int = -1, end_index: int = -1) -> None:
        self.refuse_if_read_only("store a topic summary")
        texts = checked_texts(f"topic {node_id!r}", node_id=node_id, topic_name=topic_name, summary=summary)
        node_id, topic_name, summary = texts["node_id"], texts["topic_name"], texts["summary"]
        with self._lock:
            emb = self._checked_vector(f"topic {node_id!r}", embedding)
            row = self.con.execute("SELECT rowid FROM topic_summaries WHERE node_id=?", (node_id,)).fetchone()
            if row:
                rowid = row[0]
                self.con.execute(
                    "UPDATE topic_summaries SET topic_name=?, summary=?, embedding=?, start_index=?, end_index=?,"
                    " updated_at=? WHERE rowid=?",
                    (topic_name, summary, to_blob(emb), start_index, end_index, now_iso(), rowid),
                )
            else:
                self.con.execute(
                    "INSERT INTO topic_summaries VALUES(?,?,?,?,?,?,?)",
                    (node_id, topic_name, summary, to_blob(emb), start_index, end_index, now_iso()),
                )
            if self._topic_index is not None:
                self._topic_index.add(node_id, emb)

    def upsert_topic_summaries(self, rows: list[tuple]) -> None:
        """Many ``(node_id, topic_name, summary, embedding, start, end)`` at once."""
        if len(rows) < 20:
            for r in rows:
                self.upsert_topic_summary(*r)
            return
        with self._lock:
            ids = [r[0] for r in rows]
            old: dict[str, int] = {}
            for chunk, q in chunks(ids):
                old.update(self.con.execute(f"SELECT node_id, rowid FROM topic_summaries WHERE node_id IN ({q})", chunk))
            stamp = now_iso()
            self.con.executemany(
                "UPDATE topic_summaries SET topic_name=?, summary=?, embedding=?, start_index=?, end_index=?,"
                " updated_at=? WHERE rowid=?",
                [(n, s, to_blob(e), a, b, stamp, old[i]) for i, n, s, e, a, b in rows if i in old])
            self.con.executemany(
                "INSERT INTO topic_summaries VALUES(?,?,?,?,?,?,?)",
                [(i, n, s, to_blob(e), a, b, stamp) for i, n, s, e, a, b in rows if i not in old])
            if self._topic_index is not None:
                for i, _n, _s, e, _a, _b in rows:
                    self._topic_index.add(i, np.asarray(e, dtype=np.float32))

    def delete_topic_summary(self, node_id: str) -> None:
        self.refuse_if_read_only("delete a topic summary")
        with self._lock:
            row = self.con.execute("SELECT rowid FROM topic_summaries WHERE node_id=?", (node_id,)).fetchone()
            if row is None:
                return
            self.con.execute("DELETE FROM topic_summaries WHERE rowid=?", (row[0],))
            if self._topic_index is not None:
                self._topic_index.remove(node_id)

    def _topics(self) -> VectorIndex:
        with self._lock:
            if self._topic_index is None:
                idx = VectorIndex()
                for nid, blob in self.con.execute("SELECT node_id, embedding FROM topic_summaries"):
                    idx.add(nid, from_blob(blob))
                self._topic_index = idx
            return self._topic_index

    def topic_summary_ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self.con.execute("SELECT node_id FROM topic_summaries")}

    def search_topic_summaries(self, query_vector: ArrayLike, top_k: int = 3,
                               min_similarity: float = 0.40) -> list[dict]:
        check_top_k(top_k)
        hits = self._topics().search(np.asarray(query_vector, dtype=np.float32), top_k, min_similarity)
        if not hits:
            return []
        with self._lock:
            q = ",".join("?" * len(hits))
            rows = {
                r[0]: r
                for r in self.con.execute(
                    f"SELECT node_id, topic_name, summary, start_index, end_index FROM topic_summaries"
                    f" WHERE node_id IN ({q})",
                    [h[0] for h in hits],
                )
            }
        return [
            {"node_id": nid, "topic_name": rows[nid][1], "summary": rows[nid][2], "similarity": sim,
             "start_index": rows[nid][3], "end_index": rows[nid][4]}
            for nid, sim in hits
            if nid in rows
        ]

    def keyword_search_topics(self, text: str, limit: int = 50, max_share: float = 1.0) -> list[tuple[str, float]]:
        """BM25 over topic names and summaries. From ``SCORED_FROM`` topics, a word whose
        stem is in more than ``max_share`` of them is left out (FTS5's rank reads every
        matching row; "plans" also matches each summary with "plan")."""
        n = len(self._topics())
        if n >= SCORED_FROM and max_share < 1.0:
            text = " ".join(self.rare_stems("topics_fts", query_terms(text), max_share, n))
        return self._bm25("topics_fts", "node_id", text, limit)

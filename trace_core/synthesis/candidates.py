"""Stage 1, candidates: which past messages are worth scoring for a query.

The best messages by cosine (the query read twice: as asked, and without the words
found in most exchanges) and by BM25, the relevant conversation neighbours of the
strongest of them, each scored by its best sentence part too. Scoring runs on these
candidates only, which keeps a query at 100,000 stored exchanges in milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from ..dates import dates_in
from ..nodes import MessageNode
from ..store import parse_message_id
from ..textutil import DocumentFrequency, query_terms
from ..vectors import VectorIndex
from .params import SynthesisParams


@dataclass
class Candidates:
    """The candidate messages of one query, and the signals the later stages score."""

    units: list[tuple[int, str]]  # (exchange index, role) of each candidate
    keys: list[int]  # their rows in the message table (``UnitTable``)
    dense: np.ndarray  # best cosine of each (message or part)
    keyword: np.ndarray  # BM25 of each (0: no shared word)
    topic_dense: dict[str, float]  # topic id -> summary cosine
    topic_keyword: dict[str, float]  # topic id -> BM25 of its name and summary
    vectors: np.ndarray | None = None  # each candidate's unit vector (when the stage read them)
    dense_spread: float = 0.0  # standard deviation of the query's cosine over every live message (0: unknown)


class UnitTable:
    """Which exchange and role each row of the message vectors holds; derived from the
    conversation index once per version of it."""

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.exchange_of = np.zeros(0, dtype=np.int64)
        self.role_of: list[str] = []
        self.row_of_id: dict[str, int] = {}  # message id -> row
        self.row_of_unit: dict[tuple[int, str], int] = {}  # (exchange, role) -> row

    def follow(self, index: VectorIndex) -> None:
        key = (id(index), index.version)
        if self.key == key:
            return
        parsed = [parse_message_id(i) for i in index.ids]
        self.exchange_of = np.array([p[0] for p in parsed], dtype=np.int64)
        self.role_of = [p[1] for p in parsed]
        self.row_of_id = {mid: k for k, mid in enumerate(index.ids)}
        self.row_of_unit = {p: k for k, p in enumerate(parsed)}
        self.key = key

    def from_exchanges(self, exchanges: Sequence[MessageNode]) -> None:
        """Without a store: a row per message of each live exchange."""
        ex, roles = [], []
        for i, x in enumerate(exchanges):
            if x.archived:
                continue
            for msg in x.messages:
                ex.append(i)
                roles.append(msg["role"])
        self.exchange_of = np.array(ex, dtype=np.int64)
        self.role_of = roles
        self.row_of_unit = {(i, r): k for k, (i, r) in enumerate(zip(ex, roles))}
        self.row_of_id = {}
        self.key = None


def unit_query(qvec, embed: Callable[[str], np.ndarray], query: str) -> np.ndarray:
    """The query vector, unit length (embedded when not given). A given vector of zeros
    or with NaN is refused: it ranked every message alike, silently (a developer's trial)."""
    q = np.asarray(qvec if qvec is not None else embed(query), dtype=np.float32)
    norm = float(np.linalg.norm(q))
    if qvec is not None and (not np.isfinite(norm) or norm == 0.0):
        raise ValueError("query_vector must be a vector with a length (not all zeros, no NaN or infinity)")
    return q / (norm or 1.0)


def focused_query_vector(query: str, words: DocumentFrequency, embed: Callable[[str], np.ndarray],
                         enabled: bool = True) -> np.ndarray | None:
    """The query embedded again without the words found in most exchanges (in a
    transcript, the speakers' names, and the commonest words such as "the"): the names
    alone make every message by the person asked about look relevant. ``None`` when no
    such word is in the query."""
    if not enabled or words.docs < 20:
        return None
    tokens = query.split()
    kept = [w for w in tokens if not words.is_common(w.strip(".,!?;:\"()'").lower().removesuffix("'s"))]
    if len(kept) == len(tokens) or not kept:
        return None
    try:
        v = np.asarray(embed(" ".join(kept)), dtype=np.float32)
    except Exception:  # an optional second reading: a failing embedder costs only it
        return None
    return v / (np.linalg.norm(v) or 1.0)


def keyword_query(query: str, words: DocumentFrequency, common_word_share: float) -> str:
    """The query's rarer words for BM25. A word found in more than ``common_word_share``
    of all exchanges adds little to BM25 yet makes SQLite score every message holding it
    (60 ms a query at 100,000 exchanges); the rarest words are kept, at most 8."""
    terms = query_terms(query)
    if words.docs < 200 or not terms:
        return " ".join(terms)
    limit = max(common_word_share * words.docs, 50)
    ranked = sorted(terms, key=lambda w: words.counts.get(w, 0))
    kept = [w for w in ranked if words.counts.get(w, 0) <= limit] or ranked[:2]
    return " ".join(kept[:8])


def topic_dense(index: VectorIndex | None, qvec: np.ndarray, limit: int) -> dict[str, float]:
    """Summary cosine of the best ``limit`` topics (the rest score 0: far below the best).
    Every topic exactly: the best 500 are a fifth of 25,000, too many for a shortlist."""
    if index is None:
        return {}
    rows, sims = index.top(qvec, limit)
    ids = index.ids
    return {ids[k]: float(s) for k, s in zip(rows.tolist(), sims.tolist())}


SPREAD_SAMPLE = 4_000  # rows a large table's cosine spread is estimated on


class MessageCosines:
    """The query's cosine to the live messages, by row of the ``UnitTable``: every row's
    at once for a small table, or, from ``approximate_from`` rows of the store's index,
    the best rows from its projected pass (``VectorIndex.top``) and any other on demand."""

    def __init__(self, qvec: np.ndarray, full: np.ndarray | None = None, index: VectorIndex | None = None,
                 approximate_from: int | None = None) -> None:
        q = np.asarray(qvec, dtype=np.float32)
        self.qvec = q / (np.linalg.norm(q) or 1.0)
        self.full = full
        self.index = index
        self.approximate_from = approximate_from

    def top(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the ``k`` best cosines, in no order, and their cosines."""
        if self.full is None:
            rows, cos = self.index.top(self.qvec, k, self.approximate_from)
            return rows, cos.astype(np.float64)
        m = len(self.full)
        rows = np.argpartition(self.full, m - k)[m - k:] if k < m else np.arange(m)
        return rows, self.full[rows].astype(np.float64)

    def spread(self) -> float:
        """The standard deviation of the query's cosine over every row: exact for a small
        table, from an even sample of ``SPREAD_SAMPLE`` rows for a large one."""
        if self.full is not None:
            return float(self.full.std()) if len(self.full) else 0.0
        return self.index.spread(self.qvec, SPREAD_SAMPLE)

    def of(self, rows) -> np.ndarray:
        """The cosines of these rows (exact either way)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.full is not None:
            return self.full[rows].astype(np.float64)
        if not len(rows):
            return np.zeros(0)
        return (self.index.rows(rows) @ self.qvec).astype(np.float64)


class CandidateFinder:
    """Stage 1. Handed the store (or ``None``), the word statistics of the conversation,
    the parameters, and an executor for BM25 beside the vector products at scale."""

    def __init__(self, vdb, words: DocumentFrequency, params: SynthesisParams, executor: Executor | None) -> None:
        self.vdb = vdb
        self.words = words
        self.params = params
        self.executor = executor
        self.table = UnitTable()

    def keyword_searches(self, query: str, p: SynthesisParams) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """BM25 over messages and over topic summaries (SQLite and numpy both release the
        GIL, and there are two cores to use)."""
        words = keyword_query(query, self.words, p.common_word_share)
        return (self.vdb.keyword_search_messages(words, p.keyword_candidates, p.common_word_share),
                dict(self.vdb.keyword_search_topics(words, 50, p.common_word_share)))

    def _dense(self, qvec: np.ndarray, index: VectorIndex | None, exchanges: Sequence[MessageNode],
               vector_of: Callable[[int], np.ndarray], p: SynthesisParams) -> MessageCosines:
        """The query's cosines to the live messages, in ``self.table`` row order."""
        if index is not None:
            self.table.follow(index)
            if len(index) >= p.approximate_from:
                return MessageCosines(qvec, index=index, approximate_from=p.approximate_from)
            return MessageCosines(qvec, full=index.similarities(qvec))  # float32: candidates are widened
        # no store: each message scored by its exchange's vector
        self.table.from_exchanges(exchanges)
        sims = []
        last, s = -1, 0.0
        for i in self.table.exchange_of:
            if i != last:
                s, last = float(vector_of(int(i)) @ qvec), i
            sims.append(s)
        return MessageCosines(qvec, full=np.array(sims))

    def find(self, query: str, qvec: np.ndarray, exchanges: Sequence[MessageNode], recent_texts: set[str],
             embed: Callable[[str], np.ndarray], vector_of: Callable[[int], np.ndarray],
             timings: dict[str, float], exclude: frozenset[int] = frozenset(),
             params: SynthesisParams | None = None) -> Candidates | None:
        """The candidates of ``query`` (``qvec``: its unit vector), or ``None``; the
        exchanges of ``exclude`` are never candidates. ``params``: the settings of this
        block (the finder's own by default)."""
        p = self.params if params is None else params
        n = len(exchanges)

        def live(i: int) -> bool:
            x = exchanges[i]
            if x.archived or i in exclude:
                return False
            # the caller's context holds the user's words already: injecting the exchange again
            # repeats them (a proxy's client keeps its own copy of the replies, often not the stored one)
            return not (recent_texts and x.user in recent_texts)

        t_embed = time.perf_counter()
        qvec2 = focused_query_vector(query, self.words, embed, p.focus_query)
        timings["embed_seconds"] = time.perf_counter() - t_embed
        vdb = self.vdb
        # the indexes are taken before the keyword job holds the store's lock
        conv_index = vdb.conversation_index() if vdb is not None else None
        topic_index = vdb.topic_index() if vdb is not None else None
        # in a thread beside the vector products only where those take milliseconds: a
        # handoff can wait for the GIL's switch interval (5 ms), more than small sessions gain
        # (not beside the embedding: torch and SQLite then slow each other down)
        parallel = conv_index is not None and len(conv_index) >= p.parallel_from and self.executor is not None
        # both readings count, with the names (who said it) and without (what was said):
        # the mean of two cosines is the product with the mean vector, one pass
        all_dense = self._dense(qvec if qvec2 is None else 0.5 * (qvec + qvec2), conv_index, exchanges, vector_of, p)
        ex_of, role_of = self.table.exchange_of, self.table.role_of
        m = len(ex_of)
        if m == 0:
            return None
        # the Python set-up is done before the job starts, and the vector passes (which
        # release the GIL) run while it does
        job = self.executor.submit(self.keyword_searches, query, p) if parallel else None
        try:
            cand_idx, cand_dense = all_dense.top(min(p.candidates, m))
            t_dense = topic_dense(topic_index, qvec, p.topic_candidates)
        finally:
            if job is not None:
                msg_hits, t_key = job.result()
        if job is None:
            msg_hits, t_key = self.keyword_searches(query, p) if vdb is not None else ([], {})
        keyword_hits: dict[int, float] = {}
        for mid, score in msg_hits:
            k = self.table.row_of_id.get(mid)
            if k is not None:
                keyword_hits[k] = max(keyword_hits.get(k, 0.0), score)
        # evidence of relevance: close in meaning, sharing a content word with the query, or
        # (among the closest by cosine) said on a day the question names
        seeds = {int(k) for k, c in zip(cand_idx, cand_dense) if c >= p.min_relevance} | set(keyword_hits)
        days = [sp for sp in dates_in(query) if sp.day is not None] if p.date_weight else []
        if days:
            seeds |= {int(k) for k in cand_idx if any(sp.matches(exchanges[int(ex_of[k])].timestamp) for sp in days)}
        seeds = {k for k in seeds if live(int(ex_of[k]))}
        if not seeds:
            return None
        units = {k: (int(ex_of[k]), role_of[k]) for k in seeds}
        if p.neighbour_weight:
            self._add_neighbours(units, seeds, keyword_hits, all_dense, exchanges, n, live, p)
        keys = list(units)
        dense = self._with_parts(keys, all_dense.of(keys), qvec, qvec2, p)
        if p.prf_weight and conv_index is not None:
            dense = self._feedback(keys, dense, conv_index, p)
        keyword = np.array([keyword_hits.get(k, 0.0) for k in keys])
        vectors = conv_index.rows(keys) if p.diversity and conv_index is not None else None
        spread = all_dense.spread() if p.dense_scale == "conversation" else 0.0
        return Candidates([units[k] for k in keys], keys, dense, keyword, t_dense, t_key, vectors, spread)

    def _add_neighbours(self, units, seeds, keyword_hits, all_dense, exchanges, n, live, p: SynthesisParams) -> None:
        """Relevant conversation neighbours of the candidates join them (a question's
        answer is often the next message, below the candidate cut), around the strongest
        seeds only (keyword hits, then by cosine): neighbours of weak candidates rarely
        reach the block, and each costs time at scale."""
        ex_of, by_unit = self.table.exchange_of, self.table.row_of_unit
        seed_list = list(seeds)
        seed_dense = dict(zip(seed_list, all_dense.of(seed_list)))
        strongest = sorted(seed_list, key=lambda k: (k not in keyword_hits, -seed_dense[k]))
        floor = p.min_relevance if p.neighbour_relevance is None else p.neighbour_relevance
        near: dict[int, tuple[int, str]] = {}
        for k in strongest[: p.neighbour_seeds]:
            i = int(ex_of[k])
            for j in (i - 1, i, i + 1):
                if 0 <= j < n and live(j):
                    for msg in exchanges[j].messages:
                        kk = by_unit.get((j, msg["role"]))
                        if kk is not None and kk not in units:
                            near[kk] = (j, msg["role"])
        rows = list(near)
        for kk, c in zip(rows, all_dense.of(rows)):
            if c >= floor or kk in keyword_hits:
                units[kk] = near[kk]

    def _feedback(self, keys: list[int], dense: np.ndarray, index: VectorIndex, p: SynthesisParams) -> np.ndarray:
        """Rocchio feedback: the best candidates say what the question is about in the
        conversation's own words; each candidate's score is mixed with its cosine to their
        centroid. Only candidates are re-scored (the evidence floor stays the query's)."""
        rows = index.rows(keys)
        top = np.argsort(-dense, kind="stable")[: p.prf_docs]
        centroid = rows[top].mean(axis=0)
        centroid /= np.linalg.norm(centroid) or 1.0
        return (1.0 - p.prf_weight) * dense + p.prf_weight * (rows @ centroid).astype(np.float64)

    def _with_parts(self, keys: list[int], dense: np.ndarray, qvec: np.ndarray, qvec2, p: SynthesisParams) -> np.ndarray:
        """The best ``part_candidates`` candidates scored by their best part too (their
        sentences, and each read after its cue: ``CTree.index_pending``). Part vectors are
        read from the store for those candidates only, so memory stays flat."""
        if self.vdb is None or not p.use_parts or not keys:
            return dense
        top = np.argsort(-dense, kind="stable")[: p.part_candidates]
        index = self.vdb.conversation_index()
        row_of = {index.ids[keys[p]]: r for r, p in enumerate(top)}  # message id -> row of ``best``
        owners, mat = self.vdb.message_part_vectors(list(row_of))
        if not owners:
            return dense
        qs = np.array([qvec] if qvec2 is None else [qvec, qvec2], dtype=np.float32)
        # each query's score of a message: its best vector, the message's own or a part's
        best = index.rows([keys[p] for p in top]) @ qs.T
        np.maximum.at(best, np.array([row_of[o] for o in owners]), mat @ qs.T)
        out = dense.copy()
        out[top] = best.mean(axis=1)
        return out

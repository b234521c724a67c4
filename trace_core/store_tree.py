"""The conversation and tree side of the session store (a part of ``VectorDatabase``):
messages, node rows and the reorganisation journal."""

from __future__ import annotations

import json

import numpy as np

from .blobs import from_blob, now_iso
from .rows import NodeRow


class TreeTables:
    # --- conversation and tree (used by CTree) ---------------------------------------------

    def append_messages(self, exchange_index: int, first_idx: int, messages: list[dict], timestamp: str) -> None:
        with self._lock:
            self.con.executemany(
                "INSERT OR REPLACE INTO messages(idx, exchange_index, role, content, timestamp) VALUES(?,?,?,?,?)",
                [(first_idx + i, exchange_index, m["role"], m["content"], timestamp) for i, m in enumerate(messages)],
            )

    def load_messages(self) -> list[tuple[int, int, str, str, str]]:
        with self._lock:
            return self.con.execute(
                "SELECT idx, exchange_index, role, content, timestamp FROM messages ORDER BY idx"
            ).fetchall()

    def save_nodes(self, rows: list[NodeRow]) -> None:
        with self._lock:
            self.con.executemany("INSERT OR REPLACE INTO nodes VALUES(?,?,?,?,?,?,?,?,?,?,?)", [r.as_sql() for r in rows])

    def delete_nodes(self, node_ids: list[str]) -> None:
        with self._lock:
            self.con.executemany("DELETE FROM nodes WHERE node_id=?", [(n,) for n in node_ids])

    def replace_all_nodes(self, rows: list[NodeRow]) -> None:
        with self._lock:
            self.con.execute("DELETE FROM nodes")
            self.save_nodes(rows)

    def load_nodes(self) -> list[NodeRow]:
        with self._lock:
            return [NodeRow.from_sql(r) for r in self.con.execute(
                f"SELECT {', '.join(NodeRow.COLUMNS)} FROM nodes")]

    def message_vectors(self) -> list[tuple[int, str, np.ndarray]]:
        """``(exchange_index, role, vector)`` of every stored message."""
        with self._lock:
            rows = self.con.execute("SELECT exchange_index, role, embedding FROM conversation_vectors").fetchall()
        return [(x, role, from_blob(blob)) for x, role, blob in rows]

    # --- journal (reorganisation undo) ------------------------------------------------------

    def journal_extend(self, op_id: str, entries: list[tuple[str, dict]]) -> None:
        """Several ``(kind, payload)`` entries of one operation, in order."""
        stamp = now_iso()
        with self._lock:
            self.con.executemany(
                "INSERT INTO journal(op_id, kind, payload, created_at) VALUES(?,?,?,?)",
                [(op_id, kind, json.dumps(payload), stamp) for kind, payload in entries],
            )

    def journal_last_op(self) -> str | None:
        with self._lock:
            row = self.con.execute("SELECT op_id FROM journal ORDER BY id DESC LIMIT 1").fetchone()
        return row[0] if row else None

    def journal_entries(self, op_id: str) -> list[tuple[str, dict]]:
        with self._lock:
            rows = self.con.execute("SELECT kind, payload FROM journal WHERE op_id=? ORDER BY id", (op_id,)).fetchall()
        return [(k, json.loads(p)) for k, p in rows]

    def journal_delete(self, op_id: str) -> None:
        with self._lock:
            self.con.execute("DELETE FROM journal WHERE op_id=?", (op_id,))

    def journal_clear(self) -> bool:
        """Drop every reorganisation's record; True when there was one."""
        with self._lock:
            had = self.con.execute("SELECT 1 FROM journal LIMIT 1").fetchone() is not None
            self.con.execute("DELETE FROM journal")
        return had

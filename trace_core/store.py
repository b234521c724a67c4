"""One SQLite file per session: conversation, tree nodes, vectors, FTS5 index, journal.

WAL mode with ``synchronous=FULL``: when a transaction commits (one per ``add()``),
the exchange is on disk and survives a kill. ``PRAGMA user_version`` carries the
schema version; migrations are numbered. Cosine search runs on numpy matrices
cached in memory and loaded from the file on first use.

A file that is not ours (corrupt, truncated, another program's database, a newer
schema) raises ``SessionFileError`` naming the file and the problem, and is never
written to.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from numpy.typing import ArrayLike

from .locking import LockBusy, WriterLock
from .rows import NodeRow
from .textutil import query_terms
from .vectors import VectorIndex

APP_ID = "trace-session"
SCHEMA_VERSION = 7
SQLITE_HEADER = b"SQLite format 3\x00"

# realpath -> the VectorDatabase holding its writer lock in this process
_WRITERS: dict[str, weakref.ref] = {}


class SessionFileError(RuntimeError):
    """A session file cannot be used. The message names the file and the problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class SessionLockedError(SessionFileError):
    """Another process (or another open ``VectorDatabase`` in this one) has the session
    open for writing. Nothing was written; open it with ``read_only=True`` to read it."""

    def __init__(self, path: str, pid: int | None = None):
        holder = "another process" if pid is None else (
            "this process" if pid == os.getpid() else f"another process (pid {pid})")
        super().__init__(path, f"is open for writing in {holder}; open it read-only, or use another session")
        self.pid = pid


class ReadOnlySessionError(SessionFileError):
    """A session opened read-only was asked to change."""

    def __init__(self, path: str, action: str = "add an exchange"):
        super().__init__(path, f"is open read-only: cannot {action} (nothing was written)")


class EmbedderMismatchError(RuntimeError):
    pass


@dataclass
class ConversationVector:
    message_id: str
    message_index: int
    role: str
    text: str
    embedding: list[float] | np.ndarray
    timestamp: str
    thread_path: str
    similarity: float = 0.0
    node_id: str = ""  # the exchange (MessageNode) it belongs to, when known
    exchange_index: int = -1


def _fts_triggers() -> list[str]:
    """Schema 7: SQLite keeps each FTS5 index in step with its table (until 6 the store
    did it by hand in four places), then both indexes are rebuilt once from the tables."""
    out = []
    for table, fts, cols in (("conversation_vectors", "messages_fts", ("text", "message_id")),
                             ("topic_summaries", "topics_fts", ("topic_name", "summary", "node_id"))):
        names = ", ".join(cols)
        new = ", ".join(f"new.{c}" for c in cols)
        add = f"INSERT INTO {fts}(rowid, {names}) VALUES (new.rowid, {new});"
        drop = f"DELETE FROM {fts} WHERE rowid = old.rowid;"
        out += [
            f"CREATE TRIGGER IF NOT EXISTS {table}_fts_insert AFTER INSERT ON {table} BEGIN {add} END",
            f"CREATE TRIGGER IF NOT EXISTS {table}_fts_delete AFTER DELETE ON {table} BEGIN {drop} END",
            f"CREATE TRIGGER IF NOT EXISTS {table}_fts_update AFTER UPDATE OF {names} ON {table}"
            f" BEGIN {drop} {add} END",
            f"DELETE FROM {fts}",
            f"INSERT INTO {fts}(rowid, {names}) SELECT rowid, {names} FROM {table}",
        ]
    return out


MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)",
        """CREATE TABLE IF NOT EXISTS messages(
            idx INTEGER PRIMARY KEY, exchange_index INTEGER NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, timestamp TEXT)""",
        "CREATE INDEX IF NOT EXISTS messages_exchange ON messages(exchange_index)",
        """CREATE TABLE IF NOT EXISTS nodes(
            node_id TEXT PRIMARY KEY, parent_id TEXT, kind TEXT NOT NULL,
            topic_name TEXT, summary TEXT, start_index INTEGER, end_index INTEGER,
            exchange_index INTEGER, created_index INTEGER, timestamp TEXT,
            archived INTEGER NOT NULL DEFAULT 0)""",
        """CREATE TABLE IF NOT EXISTS conversation_vectors(
            message_id TEXT PRIMARY KEY, message_index INTEGER, role TEXT, text TEXT,
            embedding BLOB, timestamp TEXT, thread_path TEXT, node_id TEXT,
            exchange_index INTEGER, archived INTEGER NOT NULL DEFAULT 0)""",
        """CREATE TABLE IF NOT EXISTS topic_summaries(
            node_id TEXT PRIMARY KEY, topic_name TEXT, summary TEXT, embedding BLOB,
            start_index INTEGER, end_index INTEGER, updated_at TEXT)""",
        """CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
            text, message_id UNINDEXED, tokenize='porter unicode61')""",
        """CREATE VIRTUAL TABLE IF NOT EXISTS topics_fts USING fts5(
            topic_name, summary, node_id UNINDEXED, tokenize='porter unicode61')""",
    ],
    2: [
        """CREATE TABLE IF NOT EXISTS journal(
            id INTEGER PRIMARY KEY AUTOINCREMENT, op_id TEXT NOT NULL, kind TEXT NOT NULL,
            payload TEXT NOT NULL, created_at TEXT NOT NULL)""",
    ],
    3: [  # thread paths and archive flags are updated by exchange node
        "CREATE INDEX IF NOT EXISTS conversation_vectors_node ON conversation_vectors(node_id)",
    ],
    4: [  # FTS rows addressed by rowid (a message's index, a topic row's rowid): a
          # replace or delete no longer scans the whole FTS table
        "DELETE FROM messages_fts",
        "INSERT INTO messages_fts(rowid, text, message_id) SELECT rowid, text, message_id"
        " FROM conversation_vectors",
        "DELETE FROM topics_fts",
        "INSERT INTO topics_fts(rowid, topic_name, summary, node_id) SELECT rowid, topic_name, summary, node_id"
        " FROM topic_summaries",
    ],
    5: [  # thread paths in their own small table: a reorganisation that moves every
          # exchange rewrote every vector row (and its 1.5 KB embedding) to change a path
        "CREATE TABLE IF NOT EXISTS thread_paths(node_id TEXT PRIMARY KEY, path TEXT NOT NULL) WITHOUT ROWID",
        "INSERT OR REPLACE INTO thread_paths SELECT node_id, thread_path FROM conversation_vectors"
        " WHERE node_id IS NOT NULL AND node_id != '' AND thread_path IS NOT NULL",
    ],
    6: [  # sentence vectors of longer messages, written at idle time (CTree.index_pending)
        """CREATE TABLE IF NOT EXISTS message_parts(
            message_id TEXT NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL, embedding BLOB NOT NULL,
            PRIMARY KEY(message_id, part))""",
    ],
    7: _fts_triggers(),
}

# a message's thread path: its exchange's row in thread_paths, else the one it was stored with
_CV_COLUMNS = ("cv.message_id, cv.message_index, cv.role, cv.text, cv.embedding, cv.timestamp,"
               " COALESCE(tp.path, cv.thread_path), cv.node_id, cv.exchange_index"
               " FROM conversation_vectors cv LEFT JOIN thread_paths tp ON tp.node_id = cv.node_id")



def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _blob(vec: ArrayLike) -> bytes:
    return np.asarray(vec, dtype=np.float32).ravel().tobytes()


def _vec(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def message_id(exchange_index: int, role: str) -> str:
    """A conversation vector's id: its exchange and role ("x12-user")."""
    return f"x{exchange_index}-{role}"


def parse_message_id(mid: str) -> tuple[int, str]:
    """"x12-user" -> (12, "user")."""
    head, role = mid[1:].split("-", 1)
    return int(head), role


def _chunks(ids: list[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """``(chunk, "?,?,…")`` pairs: SQLite caps the parameters of one statement."""
    for k in range(0, len(ids), size):
        chunk = ids[k : k + size]
        yield chunk, ",".join("?" * len(chunk))


def fts_query(text: str) -> str:
    """An FTS5 OR-query of the words in ``text`` (quoted: user text is never syntax;
    function words dropped, so a match means a shared content word)."""
    return " OR ".join(f'"{w}"' for w in sorted(query_terms(text)))


def _inspect(path: str) -> None:
    """Refuse, without writing, a file that is not a usable TRACE session.

    Even a read-only look at a WAL-mode file makes SQLite create ``-wal``/``-shm``
    companions; when we refuse the file we remove the ones we created.
    """
    companions = [p for p in (path + "-wal", path + "-shm") if not os.path.exists(p)]
    try:
        _inspect_file(path)
    except SessionFileError:
        for p in companions:
            if os.path.exists(p):
                os.unlink(p)
        raise


def _inspect_file(path: str) -> None:
    size = os.path.getsize(path)
    if size == 0:
        return
    with open(path, "rb") as fh:
        header = fh.read(16)
    if header != SQLITE_HEADER:
        raise SessionFileError(path, "is not a TRACE session: not a SQLite database (corrupt, or another kind of file)")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        raise SessionFileError(path, f"cannot be opened: {exc}") from exc
    try:
        check = con.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise SessionFileError(path, f"is damaged (SQLite integrity check: {check})")
        version = con.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return
        if "meta" not in tables:
            raise SessionFileError(path, "is a SQLite database of another program, not a TRACE session")
        app = con.execute("SELECT value FROM meta WHERE key='app'").fetchone()
        if not app or app[0] != APP_ID:
            raise SessionFileError(path, "is a SQLite database of another program, not a TRACE session")
        if version > SCHEMA_VERSION:
            raise SessionFileError(
                path, f"was written by a newer TRACE (schema {version}; this one reads up to {SCHEMA_VERSION})"
            )
    except sqlite3.DatabaseError as exc:
        raise SessionFileError(path, f"is damaged or truncated ({exc})") from exc
    finally:
        con.close()


class VectorDatabase:
    """The session store. ``VectorDatabase(path)`` creates the file if missing (mode 0600:
    conversations are private) and holds the session's writer lock until ``close()``; a
    second writer gets ``SessionLockedError``.

    ``VectorDatabase(path, read_only=True)`` takes no lock and never writes the file: it
    reads one consistent snapshot (the state when it was opened) while a writer goes on.
    """

    def __init__(self, path: str = "trace_vectors.db", synchronous: str = "FULL", *, read_only: bool = False) -> None:
        self.path = os.fspath(path)
        self.read_only = read_only
        if os.path.isdir(self.path):
            raise SessionFileError(self.path, "is a folder, not a session file")
        self._writer: WriterLock | None = None
        self._lock = threading.RLock()
        self._depth = 0
        self._conv_index: VectorIndex | None = None
        self._topic_index: VectorIndex | None = None
        if read_only:
            self._open_read_only()
            return
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self._take_writer_lock()
        try:
            if os.path.exists(self.path):
                _inspect(self.path)
            else:  # created private before SQLite sees it; its -wal and -shm copy the mode
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            try:
                self.con = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
                self.con.execute("PRAGMA busy_timeout=10000")
                self.con.execute("PRAGMA journal_mode=WAL")
                self.con.execute(f"PRAGMA synchronous={synchronous}")
                self._migrate()
            except sqlite3.DatabaseError as exc:
                raise SessionFileError(self.path, f"cannot be used as a session: {exc}") from exc
        except BaseException:
            self._release_writer_lock()
            raise

    def _take_writer_lock(self) -> None:
        key = os.path.realpath(self.path)
        holder = _WRITERS.get(key)
        if holder is not None and holder() is not None:
            import gc

            gc.collect()  # an unreachable, unclosed database still holds it: let it go
            if holder() is not None:
                raise SessionLockedError(self.path, os.getpid())
        self._writer = WriterLock(self.path + ".lock")
        try:
            self._writer.acquire()
        except LockBusy as busy:
            self._writer = None
            raise SessionLockedError(self.path, busy.pid) from None
        _WRITERS[key] = weakref.ref(self)

    def _release_writer_lock(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
            key = os.path.realpath(self.path)
            if _WRITERS.get(key) is not None and _WRITERS[key]() in (self, None):
                del _WRITERS[key]

    def _open_read_only(self) -> None:
        if not os.path.exists(self.path):
            raise SessionFileError(self.path, "does not exist")
        _inspect(self.path)
        try:
            self.con = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10, check_same_thread=False,
                                       isolation_level=None)
            self.con.execute("PRAGMA busy_timeout=10000")
            self.con.execute("PRAGMA query_only=ON")
            version = self.con.execute("PRAGMA user_version").fetchone()[0]
            # one read transaction for the object's life: the tree, the vectors and the
            # indexes all come from the same commit, whatever the writer does meanwhile
            self.con.execute("BEGIN")
            self.con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            raise SessionFileError(self.path, f"cannot be read: {exc}") from exc
        if 0 < version < SCHEMA_VERSION:
            self.con.close()
            raise SessionFileError(self.path, f"uses an older schema ({version}): open it once for writing "
                                   "to upgrade it")

    # --- schema -------------------------------------------------------------------

    def _migrate(self) -> None:
        version = self.con.execute("PRAGMA user_version").fetchone()[0]
        for target in sorted(MIGRATIONS):
            if target <= version:
                continue
            with self.transaction():
                for stmt in MIGRATIONS[target]:
                    self.con.execute(stmt)
                self.con.execute("INSERT OR REPLACE INTO meta VALUES('app', ?)", (APP_ID,))
                self.con.execute(f"PRAGMA user_version={target}")

    @property
    def schema_version(self) -> int:
        return self.con.execute("PRAGMA user_version").fetchone()[0]

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic, durable unit of work. Nested uses join the outer one."""
        if self.read_only:
            raise ReadOnlySessionError(self.path, "write to it")
        with self._lock:
            if self._depth == 0:
                self.con.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self.con
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self.con.execute("ROLLBACK")
                    self._conv_index = None  # caches may hold rolled-back rows
                    self._topic_index = None
                raise
            self._depth -= 1
            if self._depth == 0:
                self.con.execute("COMMIT")

    def close(self) -> None:
        """Close the file and release the writer lock (closing twice is harmless)."""
        with self._lock:
            con = getattr(self, "con", None)
            if con is not None:
                con.close()
            self._release_writer_lock()

    # --- meta ---------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        with self._lock:
            row = self.con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        if self.read_only:
            raise ReadOnlySessionError(self.path, "write to it")
        with self._lock:
            self.con.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (key, value))

    def check_embedder(self, name: str, dim: int) -> None:
        """Record the session's embedder, or refuse a different one."""
        stored_name, stored_dim = self.get_meta("embed_model"), self.get_meta("embed_dim")
        if stored_name is None and self.read_only:
            return  # nothing stored yet, and nothing may be recorded
        if stored_name is None:
            with self.transaction():
                self.set_meta("embed_model", name)
                self.set_meta("embed_dim", str(dim))
            return
        if stored_name != name or int(stored_dim or 0) != dim:
            raise EmbedderMismatchError(
                f"{self.path} was built with the embedder {stored_name} ({stored_dim} dimensions); "
                f"the embedder now configured is {name} ({dim} dimensions). Vectors of different "
                "models cannot be compared: open the session with its own embedder, or start a new session."
            )

    # --- conversation vectors -------------------------------------------------------

    def add_conversation_message(self, cv: ConversationVector) -> None:
        emb = np.asarray(cv.embedding, dtype=np.float32)
        with self._lock:
            old = self.con.execute("SELECT rowid FROM conversation_vectors WHERE message_id=?",
                                   (cv.message_id,)).fetchone()
            if old:  # by rowid, never a scan (the FTS row goes with it: schema 7's triggers)
                self.con.execute("DELETE FROM conversation_vectors WHERE rowid=?", (old[0],))
            self.con.execute(
                "INSERT INTO conversation_vectors(message_id, message_index, role, text, embedding,"
                " timestamp, thread_path, node_id, exchange_index, archived) VALUES(?,?,?,?,?,?,?,?,?,0)",
                (cv.message_id, cv.message_index, cv.role, cv.text, _blob(emb), cv.timestamp,
                 cv.thread_path, cv.node_id, cv.exchange_index),
            )
            if cv.node_id:
                self.con.execute("INSERT OR REPLACE INTO thread_paths(node_id, path) VALUES(?, ?)",
                                 (cv.node_id, cv.thread_path or ""))
            if self._conv_index is not None:
                self._conv_index.add(cv.message_id, emb)

    def _conv(self) -> VectorIndex:
        with self._lock:
            if self._conv_index is None:
                idx = VectorIndex()
                for mid, blob in self.con.execute(
                    "SELECT message_id, embedding FROM conversation_vectors WHERE archived=0"
                ):
                    idx.add(mid, _vec(blob))
                self._conv_index = idx
            return self._conv_index

    def _row_to_cv(self, row: tuple, similarity: float = 0.0) -> ConversationVector:
        mid, midx, role, text, blob, ts, path, node_id, xidx = row
        return ConversationVector(mid, midx, role, text, _vec(blob), ts, path, similarity, node_id or "", xidx)

    def get_conversation_messages(self, message_ids: list[str]) -> dict[str, ConversationVector]:
        if not message_ids:
            return {}
        out = {}
        with self._lock:
            for chunk, q in _chunks(message_ids):
                for row in self.con.execute(f"SELECT {_CV_COLUMNS} WHERE cv.message_id IN ({q})", chunk):
                    out[row[0]] = self._row_to_cv(row)
        return out

    def search_conversation(self, query_vector: ArrayLike, top_k: int = 2,
                            min_similarity: float = 0.5) -> list[ConversationVector]:
        hits = self._conv().search(np.asarray(query_vector, dtype=np.float32), top_k, min_similarity)
        rows = self.get_conversation_messages([h[0] for h in hits])
        out = []
        for mid, sim in hits:
            cv = rows.get(mid)
            if cv is not None:
                cv.similarity = sim
                out.append(cv)
        return out

    # --- sentence parts of messages ---------------------------------------------------

    def add_message_parts(self, rows: list[tuple[str, int, str, np.ndarray]]) -> None:
        """``(message_id, part, text, embedding)`` rows (a message's sentences)."""
        with self._lock:
            self.con.executemany("INSERT OR REPLACE INTO message_parts VALUES(?,?,?,?)",
                                 [(m, k, t, _blob(e)) for m, k, t, e in rows])

    def message_parts(self, message_ids: list[str]) -> dict[str, tuple[list[str], np.ndarray]]:
        """The parts of these messages (those that have any): texts and a matrix of vectors."""
        out: dict[str, tuple[list[str], list[np.ndarray]]] = {}
        with self._lock:
            for chunk, q in _chunks(message_ids):
                for mid, text, blob in self.con.execute(
                        f"SELECT message_id, text, embedding FROM message_parts WHERE message_id IN ({q})"
                        " ORDER BY message_id, part", chunk):
                    texts, vecs = out.setdefault(mid, ([], []))
                    texts.append(text)
                    vecs.append(_vec(blob))
        return {m: (t, np.array(v, dtype=np.float32)) for m, (t, v) in out.items()}

    def message_part_vectors(self, message_ids: list[str]) -> tuple[list[str], np.ndarray]:
        """The part vectors of these messages as one matrix, with the message of each row
        (the fast path of retrieval: no per-row objects)."""
        owners: list[str] = []
        blobs: list[bytes] = []
        with self._lock:
            for chunk, q in _chunks(message_ids):
                for mid, blob in self.con.execute(
                        f"SELECT message_id, embedding FROM message_parts WHERE message_id IN ({q})", chunk):
                    owners.append(mid)
                    blobs.append(blob)
        if not blobs:
            return [], np.zeros((0, 0), dtype=np.float32)
        return owners, np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)

    def conversation_index(self) -> VectorIndex:
        """The live messages' vector index (ids and a version for caches)."""
        return self._conv()

    def topic_index(self) -> VectorIndex:
        """The indexed topic summaries' vector index."""
        return self._topics()

    def _bm25(self, table: str, id_column: str, text: str, limit: int) -> list[tuple[str, float]]:
        """``(id, score)`` by BM25, higher is better. FTS5's rank with LIMIT takes its
        top-N path; archived messages are filtered by callers against the live vector
        index, not by a join here."""
        q = fts_query(text)
        if not q:
            return []
        with self._lock:
            rows = self.con.execute(
                f"SELECT {id_column}, rank FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT ?", (q, limit)
            ).fetchall()
        return [(i, -score) for i, score in rows]

    def keyword_search_messages(self, text: str, limit: int = 50) -> list[tuple[str, float]]:
        """BM25 over message text: ``(message_id, score)``, higher is better."""
        return self._bm25("messages_fts", "message_id", text, limit)

    def delete_exchange_rows(self, exchange_index: int, message_ids: list[str]) -> None:
        """Remove one exchange's messages, message vectors (their FTS rows follow) and
        sentence parts: the exchange is about to be written again (``CTree.replace_last``)."""
        with self._lock:
            self.con.execute("DELETE FROM messages WHERE exchange_index=?", (exchange_index,))
            for chunk, q in _chunks(message_ids):
                rows = [r[0] for r in self.con.execute(
                    f"SELECT rowid FROM conversation_vectors WHERE message_id IN ({q})", chunk)]
                self.con.executemany("DELETE FROM conversation_vectors WHERE rowid=?", [(r,) for r in rows])
                self.con.execute(f"DELETE FROM message_parts WHERE message_id IN ({q})", chunk)
            self._conv_index = None

    def set_exchange_archived(self, node_id: str, archived: bool) -> None:
        with self._lock:
            self.con.execute(
                "UPDATE conversation_vectors SET archived=? WHERE node_id=?", (1 if archived else 0, node_id)
            )
            self._conv_index = None

    def update_thread_paths(self, paths: dict[str, str]) -> None:
        """``node_id -> thread path`` after the tree changed shape (only rows that change)."""
        with self._lock:
            current = dict(self.con.execute("SELECT node_id, path FROM thread_paths"))
            self.con.executemany(
                "INSERT OR REPLACE INTO thread_paths(node_id, path) VALUES(?, ?)",
                [(nid, p) for nid, p in paths.items() if current.get(nid) != p],
            )

    def delete_topic_summaries(self, node_ids: Iterable[str]) -> None:
        """Many at once (a reorganisation removes thousands)."""
        ids = list(node_ids)
        with self._lock:
            for chunk, q in _chunks(ids):
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
        emb = np.asarray(embedding, dtype=np.float32)
        with self._lock:
            row = self.con.execute("SELECT rowid FROM topic_summaries WHERE node_id=?", (node_id,)).fetchone()
            if row:
                rowid = row[0]
                self.con.execute(
                    "UPDATE topic_summaries SET topic_name=?, summary=?, embedding=?, start_index=?, end_index=?,"
                    " updated_at=? WHERE rowid=?",
                    (topic_name, summary, _blob(emb), start_index, end_index, now_iso(), rowid),
                )
            else:
                self.con.execute(
                    "INSERT INTO topic_summaries VALUES(?,?,?,?,?,?,?)",
                    (node_id, topic_name, summary, _blob(emb), start_index, end_index, now_iso()),
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
            for chunk, q in _chunks(ids):
                old.update(self.con.execute(f"SELECT node_id, rowid FROM topic_summaries WHERE node_id IN ({q})", chunk))
            stamp = now_iso()
            self.con.executemany(
                "UPDATE topic_summaries SET topic_name=?, summary=?, embedding=?, start_index=?, end_index=?,"
                " updated_at=? WHERE rowid=?",
                [(n, s, _blob(e), a, b, stamp, old[i]) for i, n, s, e, a, b in rows if i in old])
            self.con.executemany(
                "INSERT INTO topic_summaries VALUES(?,?,?,?,?,?,?)",
                [(i, n, s, _blob(e), a, b, stamp) for i, n, s, e, a, b in rows if i not in old])
            if self._topic_index is not None:
                for i, _n, _s, e, _a, _b in rows:
                    self._topic_index.add(i, np.asarray(e, dtype=np.float32))

    def delete_topic_summary(self, node_id: str) -> None:
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
                    idx.add(nid, _vec(blob))
                self._topic_index = idx
            return self._topic_index

    def topic_summary_ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self.con.execute("SELECT node_id FROM topic_summaries")}

    def search_topic_summaries(self, query_vector: ArrayLike, top_k: int = 3,
                               min_similarity: float = 0.40) -> list[dict]:
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

    def keyword_search_topics(self, text: str, limit: int = 50) -> list[tuple[str, float]]:
        return self._bm25("topics_fts", "node_id", text, limit)

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
        return [(x, role, _vec(blob)) for x, role, blob in rows]

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

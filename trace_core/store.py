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

import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from .blobs import chunks as _chunks
from .blobs import from_blob as _vec
from .blobs import now_iso
from .blobs import to_blob as _blob
from .errors import (
    EmbedderMismatchError,
    ReadOnlySessionError,
    SessionFileError,
    SessionLockedError,
    SessionMovedError,
    SessionNotWritableError,
    SessionWriteError,
    read_only_uri,
    refused_write,
    unwritable_reason,
)
from .exchange_input import checked_texts, storable
from .keywords import SCORED_FROM, MessagePostings
from .locking import LockBusy, WriterLock
from .schema import APP_ID, MIGRATIONS, SCHEMA_VERSION, SQLITE_HEADER, inspect_session_file
from .store_topics import TopicSummaries, check_top_k
from .store_tree import TreeTables
from .textutil import query_terms
from .vectors import VectorIndex

# realpath -> the VectorDatabase holding its writer lock in this process
_WRITERS: dict[str, weakref.ref] = {}


def _refuse_orphaned_log(path: str) -> None:
    """A write-ahead log with no database beside it (its file was moved or deleted while
    open, and the process died before closing it) belongs to another file: SQLite would
    read its pages into the new file made at this name (a new session opened with another
    one's tables)."""
    wal = path + "-wal"
    try:
        if os.path.getsize(wal) == 0:
            return
    except OSError:
        return
    raise SessionFileError(path, f"does not exist, but a write-ahead log of another file does beside it "
                           f"({os.path.basename(wal)}: its file was moved or deleted while open); SQLite would read "
                           "it into a new file of this name. Move it away, or choose another name")


def _file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file ``path`` names now; None when nothing is there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


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


# a message's thread path: its exchange's row in thread_paths, else the one it was stored with
_CV_COLUMNS = ("cv.message_id, cv.message_index, cv.role, cv.text, cv.embedding, cv.timestamp,"
               " COALESCE(tp.path, cv.thread_path), cv.node_id, cv.exchange_index"
               " FROM conversation_vectors cv LEFT JOIN thread_paths tp ON tp.node_id = cv.node_id")



def message_id(exchange_index: int, role: str) -> str:
    """A conversation vector's id: its exchange and role ("x12-user")."""
    return f"x{exchange_index}-{role}"


def parse_message_id(mid: str) -> tuple[int, str]:
    """"x12-user" -> (12, "user")."""
    head, role = mid[1:].split("-", 1)
    return int(head), role


def fts_query(text: str) -> str:
    """An FTS5 OR-query of the words in ``text`` (quoted: user text is never syntax;
    function words dropped, so a match means a shared content word)."""
    return " OR ".join(f'"{w}"' for w in sorted(query_terms(text)))


@dataclass
class Purge:
    complete: bool = False  # the write-ahead log was emptied (no other connection was reading)


class _ClosedConnection:
    """A closed store's connection: any use says so in words (it was sqlite3's
    ProgrammingError "Cannot operate on a closed database")."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> object:
        raise SessionFileError(self._path, "is closed (tree.close() or VectorDatabase.close()): CTree.open(path) or "
                               "VectorDatabase(path) opens it again")


class VectorDatabase(TopicSummaries, TreeTables):
    """The session store. ``VectorDatabase(path)`` creates the file if missing (mode 0600:
    conversations are private) and holds the session's writer lock until ``close()``; a
    second writer gets ``SessionLockedError``.

    ``VectorDatabase(path, read_only=True)`` takes no lock and never writes the file: it
    reads one consistent snapshot (the state when it was opened) while a writer goes on.
    """

    def __init__(self, path: str = "trace_vectors.db", synchronous: str = "FULL", *, read_only: bool = False) -> None:
        self.path = os.fsdecode(path)  # bytes too: b"s.db" failed later, "can't concat str to bytes"
        self.read_only = read_only
        if os.path.isdir(self.path) or self.path.endswith(("/", os.sep)):
            raise SessionFileError(self.path, "is a folder, not a session file")
        if not self.path:  # it said FileNotFoundError "No such file or directory: ''"
            raise SessionFileError('""', "is no file name: name the session file, e.g. session.db")
        self._writer: WriterLock | None = None
        self._lost_to: int | None = None  # the pid (0: unknown) that took the lock after its file was removed
        self._lock = threading.RLock()
        self._depth = 0
        self._purge_pending = False  # ``purging`` could not empty the log (another connection read)
        self._conv_index: VectorIndex | None = None
        self._postings: MessagePostings | None = None  # BM25's row sizes, loaded with the index
        self._topic_index: VectorIndex | None = None
        if read_only:
            self._open_read_only()
            return
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        why = unwritable_reason(self.path, parent)
        if why:
            raise SessionNotWritableError(self.path, why)
        self._take_writer_lock()
        try:
            if os.path.exists(self.path):
                inspect_session_file(self.path)
            else:  # created private before SQLite sees it; its -wal and -shm copy the mode
                _refuse_orphaned_log(self.path)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            # a move is found by these (``moved``); the path made absolute now, as SQLite makes its
            # own: a chdir later is no move
            self._where = os.path.abspath(self.path)
            self._identity = _file_identity(self._where)
            leftover_log = os.path.exists(self.path + "-wal") and os.path.getsize(self.path + "-wal") > 0
            try:
                self.con = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
                self.con.execute("PRAGMA busy_timeout=10000")
                self.con.execute("PRAGMA journal_mode=WAL")
                self.con.execute(f"PRAGMA synchronous={synchronous}")
                self._migrate()
                if leftover_log:  # one a reader kept from being emptied (``purging``) is emptied now
                    self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
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
        self._writer = WriterLock(key + ".lock")  # the real file's: a symlink to it had a lock of its own
        try:
            self._writer.acquire()
        except LockBusy as busy:
            self._writer = None
            raise SessionLockedError(self.path, busy.pid) from None
        except OSError as exc:  # e.g. another user's lock file
            self._writer = None
            raise SessionNotWritableError(self.path, f"its lock file cannot be opened: {exc.strerror}") from None
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
        inspect_session_file(self.path)
        try:
            self.con = sqlite3.connect(read_only_uri(self.path), uri=True, timeout=10, check_same_thread=False,
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
                self._refuse_if_moved()
                self._keep_writer_lock()
                try:
                    self.con.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:  # "database is locked"
                    if refused_write(exc):
                        raise SessionWriteError(self.path, exc) from exc
                    raise
            self._depth += 1
            try:
                yield self.con
            except BaseException as exc:
                self._depth -= 1
                if self._depth == 0:
                    self._roll_back()
                    if refused_write(exc) and not isinstance(exc, SessionFileError):
                        raise SessionWriteError(self.path, exc) from exc
                raise
            self._depth -= 1
            if self._depth == 0:
                try:
                    self.con.execute("COMMIT")
                except sqlite3.OperationalError as exc:  # "database or disk is full"
                    self._roll_back()
                    if refused_write(exc):
                        raise SessionWriteError(self.path, exc) from exc
                    raise
                if self._purge_pending:  # a reader kept a purge's old log pages: gone once it has left
                    self._purge_pending = bool(self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])

    def _roll_back(self) -> None:
        if self.con.in_transaction:  # a failed COMMIT may have ended it already
            self.con.execute("ROLLBACK")
        self._drop_message_caches()  # caches may hold rolled-back rows
        self._topic_index = None

    @property
    def moved(self) -> bool:
        """The file was renamed, moved or deleted, or another put in its place, since this
        writer opened it (another program did it: a file manager, a sync tool)."""
        identity = getattr(self, "_identity", None)
        return (identity is not None and not self.read_only and not self.closed
                and _file_identity(self._where) != identity)

    def _keep_writer_lock(self) -> None:
        """``SessionLockedError`` before a write when the lock file was removed while held
        and another process has taken the new one: it writes the session now, and this
        store writes it no more (what it holds in memory may lack that writer's rows)."""
        if self._lost_to is not None:
            raise SessionLockedError(self.path, self._lost_to or None)
        if self._writer is None:
            return
        try:
            self._writer.keep()
        except LockBusy as busy:
            self._lost_to = busy.pid or 0
            self._release_writer_lock()  # it holds nothing now: no one's lock is removed on closing
            raise SessionLockedError(self.path, busy.pid) from None

    def _refuse_if_moved(self) -> None:
        """No write once the file has moved: SQLite would put it in the log beside the old
        name, which no open of the moved file reads (an exchange said remembered was not in
        the renamed file). What is in the log already goes into the file first."""
        if self.moved:
            self._keep_log_with_file()
            raise SessionMovedError(self.path)

    def _keep_log_with_file(self) -> None:
        """Copy the write-ahead log into the file wherever it is now: SQLite does not on
        closing a moved file, and left every exchange since the last checkpoint in a log
        under the old name (a session renamed in a file manager lost its last hour)."""
        try:
            self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass

    def close(self) -> None:
        """Close the file and release the writer lock (closing twice is harmless)."""
        with self._lock:
            con = getattr(self, "con", None)
            moved = con is not None and self.moved
            if con is not None and not self.closed:
                if moved:
                    self._keep_log_with_file()
                con.close()
            if moved:
                self._drop_emptied_log()
            self.con = cast(sqlite3.Connection, _ClosedConnection(self.path))
            self._drop_message_caches()  # a search from the caches would answer as if open
            self._topic_index = None
            self._closed = True
            self._release_writer_lock()

    def _drop_emptied_log(self) -> None:
        """The old name's emptied -wal and its -shm, once nothing else is at that name."""
        wal = self._where + "-wal"
        try:
            if os.path.exists(self._where) or os.path.getsize(wal) > 0:
                return
            for f in (wal, self._where + "-shm"):
                os.unlink(f)
        except OSError:
            pass

    def __enter__(self) -> VectorDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def refuse_if_read_only(self, action: str) -> None:
        """``ReadOnlySessionError`` before a write (SQLite's own was "attempt to write a
        readonly database", an ``sqlite3.OperationalError``)."""
        if self.read_only:
            raise ReadOnlySessionError(self.path, action)

    # --- meta ---------------------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        with self._lock:
            row = self.con.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.refuse_if_read_only("write to it")
        with self._lock:  # a lone surrogate raised UnicodeEncodeError: U+FFFD, as add() stores it
            if self._depth == 0:
                self._refuse_if_moved()
                self._keep_writer_lock()
            self.con.execute("INSERT OR REPLACE INTO meta VALUES(?, ?)", (storable(key), storable(value)))

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

    def _vector_dim(self) -> int | None:
        """The dimension this store's vectors have (None: no vector yet)."""
        dim = self.get_meta("embed_dim")
        if dim:
            return int(dim)
        for table in ("conversation_vectors", "topic_summaries"):
            row = self.con.execute(f"SELECT embedding FROM {table} LIMIT 1").fetchone()
            if row:
                return len(_vec(row[0]))
        return None

    def _checked_vector(self, what: str, embedding: ArrayLike) -> np.ndarray:
        """``embedding`` as float32, or ``ValueError`` before anything is written: one
        vector of another size was stored, and every search and synthesis of the session
        failed from then on (a trial: a message's; then a topic summary's)."""
        emb = np.asarray(embedding, dtype=np.float32)
        dim = self._vector_dim()
        if emb.ndim != 1 or emb.size == 0 or (dim is not None and emb.shape[0] != dim):
            size = "x".join(map(str, emb.shape)) or "0"
            raise ValueError(f"{what}: its vector has shape {size}, this store's vectors "
                             f"have {dim} dimensions; nothing was stored")
        return emb

    def add_conversation_message(self, cv: ConversationVector) -> None:
        self.refuse_if_read_only("add a message")
        texts = checked_texts(f"message {cv.message_id!r}", message_id=cv.message_id, role=cv.role, text=cv.text,
                       timestamp=cv.timestamp, thread_path=cv.thread_path, node_id=cv.node_id)
        with self._lock:
            emb = self._checked_vector(f"message {cv.message_id!r}", cv.embedding)
            old = self.con.execute("SELECT rowid FROM conversation_vectors WHERE message_id=?",
                                   (cv.message_id,)).fetchone()
            if old:  # by rowid, never a scan (the FTS row goes with it: schema 7's triggers)
                self.con.execute("DELETE FROM conversation_vectors WHERE rowid=?", (old[0],))
                if self._postings is not None:
                    self._postings.remove(old[0])
            rowid = self.con.execute(
                "INSERT INTO conversation_vectors(message_id, message_index, role, text, embedding,"
                " timestamp, thread_path, node_id, exchange_index, archived) VALUES(?,?,?,?,?,?,?,?,?,0)",
                (texts["message_id"], cv.message_index, texts["role"], texts["text"], _blob(emb),
                 texts["timestamp"], texts["thread_path"], texts["node_id"], cv.exchange_index),
            ).lastrowid
            if self._postings is not None and rowid is not None:
                size = self.con.execute("SELECT sz FROM messages_fts_docsize WHERE id=?", (rowid,)).fetchone()
                self._postings.add(rowid, cv.message_id, size[0] if size else b"\x00")
            if cv.node_id:
                self.con.execute("INSERT OR REPLACE INTO thread_paths(node_id, path) VALUES(?, ?)",
                                 (cv.node_id, cv.thread_path or ""))
            if self._conv_index is not None:
                self._conv_index.add(cv.message_id, emb)

    def _conv(self) -> VectorIndex:
        with self._lock:
            if self._conv_index is None:
                idx = VectorIndex()
                live = []
                for rowid, mid, blob in self.con.execute(
                    "SELECT rowid, message_id, embedding FROM conversation_vectors WHERE archived=0"
                ):
                    idx.add(mid, _vec(blob))
                    live.append((rowid, mid))
                self._postings = self._load_postings(live)
                self._conv_index = idx
            return self._conv_index

    def _load_postings(self, live: list[tuple[int, str]]) -> MessagePostings | None:
        """BM25's row sizes; ``None`` (FTS5 then ranks) where the file has no size table:
        the cosine index must not fail with it."""
        try:
            return MessagePostings(self.con.execute("SELECT id, sz FROM messages_fts_docsize"), live)
        except sqlite3.DatabaseError:
            return None

    def _drop_message_caches(self) -> None:
        """The message index and BM25's row sizes are read again on next use."""
        self._conv_index = None
        self._postings = None

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
        check_top_k(top_k)
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

    def keyword_search_messages(self, text: str, limit: int = 50, max_share: float = 1.0) -> list[tuple[str, float]]:
        """BM25 over message text: ``(message_id, score)``, higher is better. FTS5 ranks
        them below ``SCORED_FROM`` rows (``fts_ranked_messages``); from there,
        ``postings_search`` (``max_share``: see there)."""
        with self._lock:
            self._conv()
            if self._postings is None or self._postings.docs < SCORED_FROM:
                return self.fts_ranked_messages(text, limit)
            return self.postings_search(text, limit, max_share)

    def messages_containing(self, terms: list[str], limit: int = 50) -> list[tuple[str, float]]:
        """The live messages whose text holds the ``terms`` as written, inside longer words too:
        ``(message_id, how many of them)``, most first. For words the keyword index cannot
        find: it reads an unspaced run of CJK as one word ("ポチは毎朝公園を散歩します"),
        so "ポチ" matched nothing there."""
        terms = [t for t in dict.fromkeys(terms) if t]
        if not terms or limit <= 0:
            return []
        held = " + ".join("(instr(text, ?) > 0)" for _ in terms)
        with self._lock:
            rows = self.con.execute(
                f"SELECT message_id, {held} AS n FROM conversation_vectors WHERE archived = 0 AND n > 0 "
                "ORDER BY n DESC, message_index LIMIT ?", (*terms, limit)).fetchall()
        return [(m, float(n)) for m, n in rows]

    def fts_ranked_messages(self, text: str, limit: int = 50) -> list[tuple[str, float]]:
        """BM25 over message text ranked by FTS5 itself (repeated words count)."""
        return self._bm25("messages_fts", "message_id", text, limit)

    def postings_search(self, text: str, limit: int = 50, max_share: float = 1.0) -> list[tuple[str, float]]:
        """BM25 over the live messages' text scored by ``MessagePostings``: FTS5 finds the
        rows of each word, numpy scores them. A word whose stem is in more than
        ``max_share`` of the rows is left out (counted first, which costs a fifth of
        fetching them): callers drop common words by their own counts, but FTS5 matches
        stems, and "plans" also finds every "plan"."""
        terms = query_terms(text)
        if not terms:
            return []
        with self._lock:
            self._conv()
            postings = self._postings
            if postings is None:
                return []
            rows = [self._match_rows("messages_fts", w)
                    for w in self.rare_stems("messages_fts", terms, max_share, postings.docs)]
        return postings.best(rows, limit)

    def _match_rows(self, table: str, word: str) -> np.ndarray:
        """The rowids holding ``word``, fetched as one text in one SQLite step: a row at a
        time, each step gives up the GIL and waits to take it back (up to a switch
        interval while the vector pass's thread holds it), and builds a Python tuple
        (thousands of rows for a common word: 6x slower alone)."""
        text = self.con.execute(f"SELECT group_concat(rowid) FROM {table} WHERE {table} MATCH ?",
                                (f'"{word}"',)).fetchone()[0]
        return np.fromstring(text, dtype=np.int64, sep=",") if text else np.zeros(0, dtype=np.int64)

    def rare_stems(self, table: str, terms: list[str], max_share: float, rows: int) -> list[str]:
        """The ``terms`` whose stem FTS5 finds in at most ``max_share`` of ``rows`` rows (at
        least 50). Counting a word's rows costs a fifth of fetching them."""
        if max_share >= 1.0:
            return terms
        most = max(max_share * rows, 50)
        with self._lock:
            return [w for w in terms if self.con.execute(
                f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (f'"{w}"',)).fetchone()[0] <= most]

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
            self._drop_message_caches()

    @contextmanager
    def purging(self) -> Iterator[Purge]:
        """What is deleted inside made unreadable in the file: freed pages and cells zeroed
        (``secure_delete``), then the full-text indexes merged (a deleted row's words stay
        in their old segments until a merge) and the write-ahead log emptied. The log
        keeps its old pages while another connection reads (a read-only window):
        ``Purge.complete`` is then False, and the next open empties it."""
        purge = Purge()
        with self._lock:
            before = self.con.execute("PRAGMA secure_delete").fetchone()[0]  # some builds have it on
            self.con.execute("PRAGMA secure_delete=ON")
            try:
                yield purge
                for table in ("messages_fts", "topics_fts"):
                    self.con.execute(f"INSERT INTO {table}({table}) VALUES('optimize')")
                busy = self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                purge.complete = not busy
                self._purge_pending = bool(busy)
            finally:
                self.con.execute(f"PRAGMA secure_delete={int(before)}")

    def delete_meta(self, key: str) -> None:
        with self._lock:
            if self._depth == 0:
                self._refuse_if_moved()
                self._keep_writer_lock()
            self.con.execute("DELETE FROM meta WHERE key=?", (key,))

    def delete_message_parts(self, message_ids: list[str]) -> None:
        with self._lock:
            for chunk, q in _chunks(message_ids):
                self.con.execute(f"DELETE FROM message_parts WHERE message_id IN ({q})", chunk)

    def replace_stored_paths(self, names: list[str]) -> None:
        """The path each message was first stored with (``thread_paths`` overrides it)
        made the current one where it names one of ``names`` (topics named again)."""
        with self._lock:
            for name in names:
                self.con.execute(
                    "UPDATE conversation_vectors SET thread_path = COALESCE((SELECT path FROM thread_paths tp"
                    " WHERE tp.node_id = conversation_vectors.node_id), '') WHERE instr(thread_path, ?) > 0", (name,))

    def set_exchange_archived(self, node_id: str, archived: bool) -> None:
        with self._lock:
            self.con.execute(
                "UPDATE conversation_vectors SET archived=? WHERE node_id=?", (1 if archived else 0, node_id)
            )
            self._drop_message_caches()

    def update_thread_paths(self, paths: dict[str, str]) -> None:
        """``node_id -> thread path`` after the tree changed shape (only rows that change)."""
        ids = list(paths)
        with self._lock:
            current: dict[str, str] = {}
            for k in range(0, len(ids), 500):  # only the rows asked about (a long session holds 100,000)
                chunk = ids[k:k + 500]
                current.update(self.con.execute(
                    f"SELECT node_id, path FROM thread_paths WHERE node_id IN ({','.join('?' * len(chunk))})", chunk))
            self.con.executemany(
                "INSERT OR REPLACE INTO thread_paths(node_id, path) VALUES(?, ?)",
                [(nid, p) for nid, p in paths.items() if current.get(nid) != p],
            )


__all__ = ["APP_ID", "MIGRATIONS", "SCHEMA_VERSION", "SQLITE_HEADER", "ConversationVector", "EmbedderMismatchError",
           "ReadOnlySessionError", "SessionFileError", "SessionLockedError", "SessionNotWritableError", "VectorDatabase", "fts_query",
           "message_id", "now_iso", "parse_message_id"]

"""The session file's schema: numbered migrations (``PRAGMA user_version``) and the check
that refuses, without writing, a file that is not a usable TRACE session."""

from __future__ import annotations

import os
import sqlite3

from .errors import SessionDamagedError, SessionFileError, read_only_uri

APP_ID = "trace-session"
# the engine's own rows of the meta table: an application's rows (``save``/``forget``'s
# ``meta``, a loaded export's) may not use these keys — writing "app" made the file
# refuse to open ever after (a developer's trial)
RESERVED_META = frozenset({"app", "embed_model", "embed_dim", "current_node", "max_children", "parts_indexed",
                           "reorganize.kept_apart"})


def meta_problem(meta: object, none_deletes: bool = False) -> str:
    """What is wrong with an application's meta rows ("" when nothing). ``none_deletes``:
    a None value is allowed (it deletes the row)."""
    from collections.abc import Mapping

    if not isinstance(meta, Mapping) or not all(isinstance(k, str) for k in meta):
        return "meta must map texts to texts (VectorDatabase.get_meta's rows)"
    if not all(isinstance(v, str) or (none_deletes and v is None) for v in meta.values()):
        # an int was stored as one, and read back by get_meta as an int
        return ("meta must map texts to texts or None (None deletes the row)" if none_deletes
                else "meta must map texts to texts (VectorDatabase.get_meta's rows)")
    taken = sorted(k for k in meta if k in RESERVED_META)
    if taken:
        return (f"meta key {taken[0]!r} is one of the engine's own rows ({', '.join(sorted(RESERVED_META))}): "
                "name the application's rows otherwise (e.g. 'myapp.x')")
    return ""
SCHEMA_VERSION = 7
SQLITE_HEADER = b"SQLite format 3\x00"



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


def inspect_session_file(path: str, embedder: str | None = None) -> None:
    """Refuse, without writing, a file that is not a usable TRACE session (``embedder``:
    or one built with an embedder of another name).

    Even a read-only look at a WAL-mode file makes SQLite create ``-wal``/``-shm``
    companions; we remove the ones we created (an empty log: nothing was written to it,
    so no other connection opened the file meanwhile).
    """
    companions = [p for p in (path + "-wal", path + "-shm") if not os.path.exists(p)]
    try:
        _check_file(path, embedder)
    finally:
        wal = path + "-wal"
        if wal not in companions or not os.path.exists(wal) or os.path.getsize(wal) == 0:
            for p in companions:
                if os.path.exists(p):
                    os.unlink(p)


def _check_file(path: str, embedder: str | None = None) -> None:
    size = os.path.getsize(path)
    if size == 0:
        return
    with open(path, "rb") as fh:
        header = fh.read(16)
    if header != SQLITE_HEADER:
        raise SessionFileError(path, "is not a TRACE session: not a SQLite database (corrupt, or another kind of file)")
    try:
        con = sqlite3.connect(read_only_uri(path), uri=True, timeout=5)
    except sqlite3.Error as exc:
        raise SessionFileError(path, f"cannot be opened: {exc}") from exc
    try:
        check = con.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise SessionDamagedError(path, f"is damaged (SQLite integrity check: {check})")
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
        built = con.execute("SELECT value FROM meta WHERE key='embed_model'").fetchone()
        if embedder is not None and built and built[0] != embedder:
            raise SessionFileError(
                path, f"was built with the embedder {built[0]}; the embedder now configured is {embedder}. Vectors "
                "of different models cannot be compared: open the session with its own embedder, or start a new session"
            )
    except sqlite3.DatabaseError as exc:
        if _held(exc):  # a lock is no damage: "damaged (database is locked)" offered /repair (a review)
            raise SessionFileError(path, f"could not be read: another program holds it locked ({exc})") from exc
        raise SessionDamagedError(path, f"is damaged or truncated ({exc})") from exc
    finally:
        con.close()


def _held(exc: BaseException) -> bool:
    """SQLite's busy or locked result: another connection holds the file, which may be sound."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

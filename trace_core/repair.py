"""Salvage a damaged session file: copy what it holds into a new file, rebuild what is
derived from it.

A session file whose damage lies in what SQLite or TRACE derive from the conversation
(the full-text indexes, an index's pages, the idle-time sentence index) refused to open
though every message could still be read. ``salvage`` copies the tables that hold the
conversation (they must read whole: nothing is half-copied), the derived ones it can
read, rebuilds the keyword indexes from the copied rows, checks the result, and only
then puts it in place of the damaged file, which is kept beside it as
``NAME.damaged-YYYYMMDD-HHMMSS`` (with its -wal). A writer's lock is taken as for
opening: no Nexus may hold the session meanwhile.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field

from .errors import SessionFileError, read_only_uri
from .locking import LockBusy, WriterLock
from .schema import APP_ID, MIGRATIONS, SCHEMA_VERSION, SQLITE_HEADER

# the conversation, its tree and its vectors: a salvage that cannot read one whole fails
ESSENTIAL = ("meta", "messages", "nodes", "conversation_vectors", "topic_summaries")
# worth keeping, but made again without them: undo history, paths, sentence parts
OPTIONAL = ("journal", "thread_paths", "message_parts")
# derived from the tables above: always rebuilt, never read
FTS_REBUILD = (
    ("messages_fts", "conversation_vectors", ("text", "message_id")),
    ("topics_fts", "topic_summaries", ("topic_name", "summary", "node_id")),
)


@dataclass
class SalvageReport:
    path: str
    kept_as: str  # where the damaged file went
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    lost: dict[str, str] = field(default_factory=dict)  # optional table -> why it was not copied
    exchanges: int = 0

    def summary(self) -> str:
        """What was done, in words (the file named by its name: the caller says where)."""
        n = f"{self.exchanges:,} exchange" + ("" if self.exchanges == 1 else "s")
        out = (f"{n} copied into a new file, search indexes rebuilt; the damaged file is kept as "
               f"{os.path.basename(self.kept_as)}")
        if self.lost:
            out += "; not copied: " + ", ".join(f"{t} ({why})" for t, why in self.lost.items())
        return out


def _columns(con: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA {schema}.table_info({table})")]


def _has_hidden_rowid(con: sqlite3.Connection, table: str) -> bool:
    """A rowid table whose rowid is no column of its own (no INTEGER PRIMARY KEY)."""
    sql = con.execute("SELECT sql FROM main.sqlite_master WHERE name = ?", (table,)).fetchone()[0] or ""
    if "WITHOUT ROWID" in sql.upper():
        return False
    info = list(con.execute(f"PRAGMA main.table_info({table})"))
    pks = [r for r in info if r[5]]
    return not (len(pks) == 1 and pks[0][2].upper() == "INTEGER")


def salvage(path: str) -> SalvageReport:
    """Repair the session file at ``path`` (see the module's doc). Raises
    ``SessionFileError`` saying why when it cannot: not a TRACE session, held by a
    writer, or its conversation itself unreadable (the file is then left as it was)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(16) != SQLITE_HEADER:
                raise SessionFileError(path, "cannot be repaired: it is not a SQLite database")
    except OSError as exc:
        raise SessionFileError(path, f"cannot be read ({exc.strerror})") from exc
    lock = WriterLock(path + ".lock")
    try:
        lock.acquire()
    except LockBusy as busy:
        raise SessionFileError(path, f"is open in another process (pid {busy.pid}): close it first") from None
    new = path + ".repairing"
    try:
        report = _copy_into(path, new)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = f"{path}.damaged-{stamp}"
        os.replace(path, kept)
        if os.path.exists(path + "-wal") and os.path.getsize(path + "-wal"):
            os.replace(path + "-wal", kept + "-wal")  # writes the damaged file still holds, kept with it
        for ext in ("-wal", "-shm"):  # an empty log and the shared-memory index are nobody's data
            if os.path.exists(path + ext):
                os.unlink(path + ext)
        os.replace(new, path)
        report.kept_as = kept
        return report
    finally:
        for ext in ("", "-wal", "-shm", "-journal"):
            if os.path.exists(new + ext):
                os.unlink(new + ext)
        lock.release()


def _copy_into(path: str, new: str) -> SalvageReport:
    old = sqlite3.connect(read_only_uri(path), uri=True, timeout=5)
    try:
        try:
            version = old.execute("PRAGMA user_version").fetchone()[0]
            app = old.execute("SELECT value FROM meta WHERE key='app'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise SessionFileError(path, f"cannot be repaired: its first pages are damaged ({exc})") from exc
        if not app or app[0] != APP_ID:
            raise SessionFileError(path, "cannot be repaired: it is not a TRACE session")
        if version > SCHEMA_VERSION:
            raise SessionFileError(path, f"was written by a newer TRACE (schema {version})")
    finally:
        old.close()
    if os.path.exists(new):
        os.unlink(new)
    os.close(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    con = sqlite3.connect(new, isolation_level=None)
    report = SalvageReport(path, "")
    try:
        # the schema the damaged file had: opening the repaired one migrates it as usual
        for target in sorted(t for t in MIGRATIONS if t <= version):
            for stmt in MIGRATIONS[target]:
                con.execute(stmt)
        con.execute(f"PRAGMA user_version={version}")
        con.execute("ATTACH DATABASE ? AS old", (read_only_uri(path),))
        con.execute("BEGIN")
        have = {r[0] for r in con.execute("SELECT name FROM old.sqlite_master WHERE type='table'")}
        for table in (*ESSENTIAL, *OPTIONAL):
            if table not in have:
                continue
            cols = [c for c in _columns(con, "old", table) if c in set(_columns(con, "main", table))]
            if _has_hidden_rowid(con, table):  # the keyword index addresses rows by rowid: kept as they were
                cols = ["rowid", *cols]
            names = ", ".join(cols)
            con.execute("SAVEPOINT t")
            try:
                n = con.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM old.{table}").rowcount
                con.execute("RELEASE t")
                report.rows[table] = n
            except sqlite3.DatabaseError as exc:
                con.execute("ROLLBACK TO t")
                con.execute("RELEASE t")
                if table in ESSENTIAL:
                    raise SessionFileError(path, f"cannot be repaired: its {table} table is damaged too ({exc})") \
                        from exc
                report.lost[table] = str(exc)
        for fts, table, cols in FTS_REBUILD:
            names = ", ".join(cols)
            con.execute(f"DELETE FROM main.{fts}")
            con.execute(f"INSERT INTO main.{fts}(rowid, {names}) SELECT rowid, {names} FROM main.{table}")
        report.exchanges = con.execute("SELECT COUNT(DISTINCT exchange_index) FROM main.messages").fetchone()[0]
        con.execute("COMMIT")
        con.execute("DETACH DATABASE old")
        check = con.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise SessionFileError(path, f"cannot be repaired: the copy is not sound either ({check})")
    except sqlite3.DatabaseError as exc:
        raise SessionFileError(path, f"cannot be repaired ({exc})") from exc
    finally:
        con.close()
    return report

"""Salvage a damaged session file: copy what it holds into a new file, rebuild what is
derived from it.

``salvage`` copies every table row by row where a page of it is damaged (a damaged page
costs the rows on it, not the table). The conversation has three copies: the messages
table, the search vectors (``conversation_vectors``) and the keyword index's own copy of
the text (``messages_fts_content``); a damaged messages table is rebuilt from what
survives of the three, message by message, and a message none of them holds becomes a
marked placeholder, so its exchange keeps its place. A damaged topic tree is rebuilt from
the exchanges' thread paths (their topics' names from ROOT down), with the ids and
summaries the topic summaries still hold. The keyword indexes are rebuilt from the copied
rows; the copy must load as a tree and pass SQLite's check before it takes the damaged
file's place, which is kept beside it as ``NAME.damaged-YYYYMMDD-HHMMSS`` (with its
-wal). Refused (no copy of the conversation reads), the file is left as it was and the
error says what is still readable. A writer's lock is taken as for opening: no Nexus may
hold the session meanwhile.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from .embedders import Embedder
from .errors import SessionFileError, read_only_uri
from .locking import LockBusy, WriterLock
from .model import ARROW, ROOT_ID, TreeModel
from .nodes import GROUP_PREFIX, MessageNode, TopicNode, new_id
from .rows import BrokenRowsError, NodeRow, node_rows
from .schema import APP_ID, MIGRATIONS, SCHEMA_VERSION, SQLITE_HEADER
from .store import message_id

# every table that holds something of its own, copied row by row where it is damaged
TABLES = ("meta", "messages", "nodes", "conversation_vectors", "topic_summaries", "journal", "thread_paths",
          "message_parts")
# what a table holds, in a user's words
LABELS = {"meta": "settings", "messages": "messages", "nodes": "tree nodes", "conversation_vectors": "search vectors",
          "topic_summaries": "topic summaries", "journal": "undo entries", "thread_paths": "thread paths",
          "message_parts": "sentences of longer messages"}
# the copies of the conversation's text, best first: a message is taken from the first that holds it
SOURCES = {"messages": "the messages table", "conversation_vectors": "the search vectors",
           "messages_fts_content": "the keyword index"}
LOST_TEXT = "[lost: this message could not be read from the damaged session file]"
ROLES = ("system", "user", "assistant")  # an exchange's order where no copy says it
NO_PATH = "Recovered Exchanges"  # the topic of an exchange whose thread path is lost too
# derived from the tables above: always rebuilt, never read
FTS_REBUILD = (
    ("messages_fts", "conversation_vectors", ("text", "message_id")),
    ("topics_fts", "topic_summaries", ("topic_name", "summary", "node_id")),
)
_FIRST = -(2**63)  # below every rowid
_LAST = 2**63 - 1


@dataclass
class SalvageReport:
    path: str
    kept_as: str  # where the damaged file went
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    lost: dict[str, str] = field(default_factory=dict)  # table -> what of it could not be read
    exchanges: int = 0
    recovered: dict[str, int] = field(default_factory=dict)  # source -> messages taken from it (messages damaged)
    messages_lost: int = 0  # messages no copy held: placeholders in their exchanges
    unsearchable: int = 0  # recovered messages whose search vector was lost
    tree_rebuilt: bool = False

    def summary(self) -> str:
        """What was done, in words (the file named by its name: the caller says where)."""
        parts = [f"{_count(self.exchanges, 'exchange')} copied into a new file, search indexes rebuilt", *self._recovery()]
        if self.lost:
            parts.append("partly unreadable: " + ", ".join(f"{LABELS.get(t, t)} ({why})" for t, why in self.lost.items()))
        parts.append(f"the damaged file is kept as {os.path.basename(self.kept_as)}")
        return "; ".join(parts)

    def _recovery(self) -> list[str]:
        out = []
        if self.recovered or self.messages_lost:
            got = sum(self.recovered.values())
            several = len(self.recovered) > 1
            where = " and ".join(SOURCES[s] + (f" ({k})" if several else "") for s, k in self.recovered.items())
            out.append(f"the messages table was damaged: {got} of {got + self.messages_lost} messages recovered"
                       + (f" from {where}" if where else ""))
            if self.messages_lost:
                out.append(f"{self.messages_lost} lost (shown as “{LOST_TEXT}”)")
        if self.tree_rebuilt:
            out.append("the topic tree was damaged and was rebuilt from the exchanges' thread paths")
        if self.unsearchable:
            k = self.unsearchable
            out.append(f"search by meaning will not find {_count(k, 'message')}: "
                       + ("its vector was lost" if k == 1 else "their vectors were lost"))
        return out


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


@dataclass
class _Message:
    """One message as a surviving copy gives it."""

    exchange: int
    role: str
    content: str
    source: str  # the table it was read from
    idx: int | None = None  # its place in the conversation, where a copy says it
    timestamp: str | None = None


def salvage(path: str) -> SalvageReport:
    """Repair the session file at ``path`` (see the module's doc). Raises
    ``SessionFileError`` saying why when it cannot: not a TRACE session, held by a
    writer, or no copy of its conversation readable (the file is then left as it was)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            if fh.read(16) != SQLITE_HEADER:
                raise SessionFileError(path, "cannot be repaired: it is not a SQLite database")
    except OSError as exc:
        raise SessionFileError(path, f"cannot be read ({exc.strerror})") from exc
    lock = WriterLock(os.path.realpath(path) + ".lock")  # the writer's lock, whichever name reached the file
    try:
        lock.acquire()
    except LockBusy as busy:
        raise SessionFileError(path, f"is open in another process (pid {busy.pid}): close it first") from None
    new = path + ".repairing"
    # reading the damaged file makes SQLite put a -wal and -shm beside it: a file that
    # cannot be repaired is left as it was found (it gained both: a trial)
    made = [path + ext for ext in ("-wal", "-shm") if not os.path.exists(path + ext)]
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
        for side in made:
            if os.path.exists(side) and (side.endswith("-shm") or not os.path.getsize(side)):
                os.unlink(side)
        lock.release()


def _session_version(path: str) -> int:
    """The damaged file's schema version, once it shows itself a TRACE session we can read."""
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
        return version
    finally:
        old.close()


def _new_file(new: str) -> sqlite3.Connection:
    """The new file, private before SQLite sees it."""
    if os.path.exists(new):
        os.unlink(new)
    os.close(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return sqlite3.connect(new, isolation_level=None)


def _prepare(con: sqlite3.Connection, path: str, version: int) -> None:
    """The schema the damaged file had (opening the repaired file migrates it as usual),
    the damaged file attached read-only as ``old`` (to copy a table that reads whole)."""
    for target in sorted(t for t in MIGRATIONS if t <= version):
        for stmt in MIGRATIONS[target]:
            con.execute(stmt)
    con.execute(f"PRAGMA user_version={version}")
    con.execute("ATTACH DATABASE ? AS old", (read_only_uri(path),))


def _copy_into(path: str, new: str) -> SalvageReport:
    version = _session_version(path)
    report = SalvageReport(path, "")
    con = _new_file(new)
    # damaged pages are read on a connection of their own: one read in a write
    # transaction makes SQLite fail the transaction's every later statement
    old = sqlite3.connect(read_only_uri(path), uri=True, timeout=5, isolation_level=None)
    try:
        _prepare(con, path, version)
        damaged = _copy_tables(con, old, report)
        con.execute("BEGIN")
        _mend(con, old, path, damaged, report)
        con.execute("COMMIT")
        con.execute("DETACH DATABASE old")
        check = con.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise SessionFileError(path, f"cannot be repaired: the copy is not sound either ({check})")
    except sqlite3.DatabaseError as exc:
        raise SessionFileError(path, f"cannot be repaired ({exc})") from exc
    finally:
        old.close()
        con.close()
    return report


def _mend(con: sqlite3.Connection, old: sqlite3.Connection, path: str, damaged: set[str],
          report: SalvageReport) -> None:
    """What the damage took, made again from what was copied; what is derived, rebuilt;
    the result checked to load."""
    messages = _recover_messages(con, old, path, damaged, report)
    if "nodes" in damaged:
        _rebuild_tree(con, messages)
        report.tree_rebuilt = True
    if "message_parts" in damaged:  # the sentence index is made again at idle time
        con.execute("UPDATE main.meta SET value = '0' WHERE key = 'parts_indexed'")
    report.unsearchable = _without_vector(con, messages)
    report.lost = {t: f"only {report.rows.get(t, 0):,} rows could be read" for t in damaged
                   if t not in ("messages", "nodes", "conversation_vectors")}  # told in their own words
    _rebuild_keyword_indexes(con)
    report.exchanges = con.execute("SELECT COUNT(DISTINCT exchange_index) FROM main.messages").fetchone()[0]
    _check_tree(con, path)


# --- reading what a damaged file still holds ---------------------------------------------


def _columns(con: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA {schema}.table_info({table})")]


def _table_sql(con: sqlite3.Connection, schema: str, table: str) -> str:
    row = con.execute(f"SELECT sql FROM {schema}.sqlite_master WHERE name = ?", (table,)).fetchone()
    return (row[0] or "") if row else ""


def _has_hidden_rowid(con: sqlite3.Connection, table: str) -> bool:
    """A rowid table whose rowid is no column of its own (no INTEGER PRIMARY KEY)."""
    if "WITHOUT ROWID" in _table_sql(con, "main", table).upper():
        return False
    info = list(con.execute(f"PRAGMA main.table_info({table})"))
    pks = [r for r in info if r[5]]
    return not (len(pks) == 1 and pks[0][2].upper() == "INTEGER")


class _Readable:
    """The rows of ``table`` that can still be read on ``old`` (a connection to the damaged
    file), in rowid order; ``damaged`` once some could not. Where a batch fails, rows are
    read one seek at a time, and past a damaged page reading goes on from the lowest rowid
    a seek reaches: the page costs only its own rows."""

    BATCH = 256

    def __init__(self, old: sqlite3.Connection, table: str, cols: list[str]) -> None:
        self.old, self.table, self.cols = old, table, cols
        self.damaged = False

    def __iter__(self) -> Iterator[tuple]:
        if "WITHOUT ROWID" in _table_sql(self.old, "main", self.table).upper():
            yield from self._scan()  # no rowid to seek past the damage: what precedes it
            return
        # LIMIT, not an open scan: Python's cursor reads a row ahead, and a failing read
        # ahead would take the row before the damage with it
        sql = f"SELECT rowid, {', '.join(self.cols)} FROM {self.table} WHERE rowid >= ? ORDER BY rowid LIMIT ?"
        start: int | None = _FIRST
        singly = 0  # rows still to read one at a time: a failed batch does not say where its damage lies
        while start is not None:
            try:
                rows = self.old.execute(sql, (start, 1 if singly else self.BATCH)).fetchall()
            except sqlite3.DatabaseError:
                if singly:
                    self.damaged = True
                    start = self._past(start)
                else:
                    singly = self.BATCH
                continue
            yield from (r[1:] for r in rows)
            start = rows[-1][0] + 1 if rows and rows[-1][0] < _LAST else None
            singly = max(singly - 1, 0)

    def _scan(self) -> Iterator[tuple]:
        try:
            yield from self.old.execute(f"SELECT {', '.join(self.cols)} FROM {self.table}")
        except sqlite3.DatabaseError:
            self.damaged = True

    def _first_key(self, key: int) -> int | None:
        """The first rowid from ``key`` on (a seek: it reads no row's content)."""
        row = self.old.execute(f"SELECT rowid FROM {self.table} WHERE rowid >= ? ORDER BY rowid LIMIT 1",
                               (key,)).fetchone()
        return row[0] if row else None

    def _seeks(self, key: int) -> bool:
        try:
            self._first_key(key)
            return True
        except sqlite3.DatabaseError:
            return False

    def _past(self, start: int) -> int | None:
        """Where to read on after the row from ``start`` on failed to read."""
        try:
            key = self._first_key(start)
        except sqlite3.DatabaseError:
            return self._next_readable(start)  # its page is damaged
        return key + 1 if key is not None and key < _LAST else None  # its own content is (an overflow page)

    def _next_readable(self, bad: int) -> int | None:
        """The lowest key above ``bad`` (whose seek fails) a seek reaches: doubling steps,
        then halving back (a damaged page holds contiguous rowids); None when none does."""
        lo = base = max(bad, 0)  # TRACE's rowids are positive
        hi, step = None, 1
        while base + step <= _LAST:
            if self._seeks(base + step):
                hi = base + step
                break
            lo, step = base + step, step * 2
        if hi is None:
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._seeks(mid) else (mid, hi)
        return hi


def _copy_tables(con: sqlite3.Connection, old: sqlite3.Connection, report: SalvageReport) -> set[str]:
    """Every table of ``TABLES`` the damaged file has, whole where it reads whole, else
    row by row; returns the tables some rows of which could not be read."""
    have = {r[0] for r in old.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    damaged = set()
    for table in (t for t in TABLES if t in have):
        cols = [c for c in _columns(old, "main", table) if c in set(_columns(con, "main", table))]
        if _has_hidden_rowid(con, table):  # the keyword index addresses rows by rowid: kept as they were
            cols = ["rowid", *cols]
        names = ", ".join(cols)
        try:  # a transaction of its own: a damaged page fails it whole, and nothing else
            con.execute("BEGIN")
            report.rows[table] = con.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM old.{table}"
                                             ).rowcount
            con.execute("COMMIT")
            continue
        except sqlite3.DatabaseError:
            con.execute("ROLLBACK")
        rows = _Readable(old, table, cols)
        con.execute("BEGIN")
        report.rows[table] = _insert(con, table, cols, rows)
        con.execute("COMMIT")
        if rows.damaged:
            damaged.add(table)
    return damaged


def _insert(con: sqlite3.Connection, table: str, cols: list[str], rows: _Readable) -> int:
    """Insert ``rows`` a batch at a time (a table of sentence vectors is not held whole)."""
    sql = f"INSERT OR IGNORE INTO main.{table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    n, batch = 0, []
    for row in rows:
        batch.append(row)
        if len(batch) >= 500:
            n += con.executemany(sql, batch).rowcount
            batch = []
    return n + (con.executemany(sql, batch).rowcount if batch else 0)


# --- the conversation, merged from its copies --------------------------------------------


def _valid(exchange: object, role: object, content: object) -> bool:
    """A row a damaged page did not garble (random bytes can pass for a row)."""
    return (isinstance(exchange, int) and exchange >= 0 and role in ROLES
            and isinstance(content, str) and content != "")


def _from_messages(con: sqlite3.Connection) -> Iterator[_Message]:
    for idx, x, role, content, ts in con.execute(
            "SELECT idx, exchange_index, role, content, timestamp FROM main.messages"):
        if _valid(x, role, content):
            yield _Message(x, role, content, "messages", idx, ts)


def _from_vectors(con: sqlite3.Connection) -> Iterator[_Message]:
    for idx, x, role, text, ts in con.execute(
            "SELECT message_index, exchange_index, role, text, timestamp FROM main.conversation_vectors"):
        if _valid(x, role, text):
            yield _Message(x, role, text, "conversation_vectors", idx, ts)


def _from_keyword_index(old: sqlite3.Connection) -> Iterator[_Message]:
    """The FTS5 table's own copy of each message's text: its id says exchange and role."""
    if not old.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_content'").fetchone():
        return
    for text, mid in _Readable(old, "messages_fts_content", ["c0", "c1"]):
        head, _, role = str(mid or "").partition("-")
        if head[1:].isdigit() and _valid(int(head[1:]), role, text):
            yield _Message(int(head[1:]), role, text, "messages_fts_content")


def _merge(copies: list[Iterator[_Message]]) -> dict[tuple[int, str], _Message]:
    """One message per exchange and role (an exchange holds at most one of each), its text
    from the first copy that holds it, its place and time from any copy that says them."""
    out: dict[tuple[int, str], _Message] = {}
    for copy in copies:
        for m in copy:
            have = out.setdefault((m.exchange, m.role), m)
            have.idx = have.idx if have.idx is not None else m.idx
            have.timestamp = have.timestamp or m.timestamp
    return out


def _recover_messages(con: sqlite3.Connection, old: sqlite3.Connection, path: str, damaged: set[str],
                      report: SalvageReport) -> list[_Message]:
    """The conversation in order; where the messages table is damaged, rewritten from
    every copy of it (``SessionFileError`` when none reads)."""
    if "messages" not in damaged:
        return list(_from_messages(con))
    merged = _merge([_from_messages(con), _from_vectors(con), _from_keyword_index(old)])
    if not merged:
        raise SessionFileError(path, _refusal(report))
    counts = Counter(m.source for m in merged.values())
    report.recovered = {s: counts[s] for s in SOURCES if counts[s]}
    messages = _ordered(merged, _node_times(con), report)
    con.execute("DELETE FROM main.messages")
    con.executemany("INSERT INTO main.messages(idx, exchange_index, role, content, timestamp) VALUES(?,?,?,?,?)",
                    [(m.idx, m.exchange, m.role, m.content, m.timestamp) for m in messages])
    return messages


def _without_vector(con: sqlite3.Connection, messages: list[_Message]) -> int:
    """Messages kept whose search vector could not be read (search by meaning misses them)."""
    vectors = {r[0] for r in con.execute("SELECT message_id FROM main.conversation_vectors")}
    return sum(1 for m in messages if m.source != "lost" and message_id(m.exchange, m.role) not in vectors)


def _node_times(con: sqlite3.Connection) -> dict[int, str]:
    """Each exchange's time as its tree node holds it."""
    return {x: ts for x, ts in con.execute(
        "SELECT exchange_index, timestamp FROM main.nodes WHERE kind = 'message' AND timestamp IS NOT NULL")}


def _ordered(merged: dict[tuple[int, str], _Message], times: dict[int, str],
             report: SalvageReport) -> list[_Message]:
    """Every exchange from the first to the last any copy or node knows, in order, each
    with its user and assistant message (a placeholder where no copy holds one), and
    numbered afresh: a message's place is its rank in the conversation."""
    by_exchange: dict[int, list[_Message]] = {}
    for m in merged.values():
        by_exchange.setdefault(m.exchange, []).append(m)
    out: list[_Message] = []
    for x in range(max([*by_exchange, *times], default=-1) + 1):
        mine = by_exchange.get(x, [])
        for role in {"user", "assistant"} - {m.role for m in mine}:
            mine.append(_Message(x, role, LOST_TEXT, "lost"))
            report.messages_lost += 1
        placed = all(m.idx is not None for m in mine)  # else ROLES' order, the order add() is given
        mine.sort(key=lambda m: (m.idx or 0) if placed else ROLES.index(m.role))
        stamp = next((m.timestamp for m in mine if m.timestamp), None) or times.get(x)
        for m in mine:
            m.idx, m.timestamp = len(out), m.timestamp or stamp
            out.append(m)
    return out


def _refusal(report: SalvageReport) -> str:
    readable = [f"{n:,} {LABELS[t]}" for t, n in report.rows.items() if n and t != "messages"]
    return ("cannot be repaired: none of the copies of its conversation (" + ", ".join(SOURCES.values())
            + ") holds a readable message; still readable: " + (", ".join(readable) or "nothing else")
            + ". The file is left as it was")


# --- the topic tree, rebuilt from thread paths --------------------------------------------


@dataclass
class _Exchange:
    """What the surviving rows say of one exchange's place in the tree."""

    index: int
    node_id: str
    path: list[str]  # its topics' names below ROOT
    archived: bool
    timestamp: str


def _exchange_places(con: sqlite3.Connection, messages: list[_Message]) -> list[_Exchange]:
    """Each exchange's node id and path: from its search vectors and the thread paths,
    else from a surviving node row, else made anew under ``NO_PATH``."""
    vec = {x: (nid, path, arch) for x, nid, path, arch in con.execute(
        "SELECT cv.exchange_index, cv.node_id, COALESCE(tp.path, cv.thread_path), cv.archived"
        " FROM main.conversation_vectors cv LEFT JOIN main.thread_paths tp ON tp.node_id = cv.node_id")}
    rows = {x: (nid, arch) for x, nid, arch in con.execute(
        "SELECT exchange_index, node_id, archived FROM main.nodes WHERE kind = 'message'")}
    times = {m.exchange: m.timestamp or "" for m in messages}
    out = []
    for x in sorted(times):
        nid, arch = rows.get(x, (None, 0))
        path = None
        if x in vec:
            nid, path, arch = vec[x]
        names = path.split(ARROW)[1:] if path else [NO_PATH]  # "ROOT" alone: an exchange right under ROOT
        out.append(_Exchange(x, nid or new_id("m"), names, bool(arch), times[x]))
    return out


def _topic_at(topics: dict[tuple[str, ...], TopicNode], names: list[str]) -> TopicNode:
    """The topic at the end of ``names`` below ROOT, made (with its parents) if new."""
    key: tuple[str, ...] = ()
    for name in names:
        parent, key = topics[key], (*key, name)
        if key not in topics:
            topics[key] = TopicNode(name)
            parent.add_child(topics[key])
    return topics[key]


def _known_topics(con: sqlite3.Connection) -> dict[tuple, tuple[str, str]]:
    """``(name, start, end) -> (id, summary)`` of the topics surviving rows still describe."""
    known = {(n, s, e): (nid, summ or "") for nid, n, summ, s, e in con.execute(
        "SELECT node_id, topic_name, summary, start_index, end_index FROM main.nodes WHERE kind = 'topic'")}
    for nid, n, summ, s, e in con.execute(
            "SELECT node_id, topic_name, summary, start_index, end_index FROM main.topic_summaries"):
        known.setdefault((n, s, e), (nid, summ or ""))
    return known


def _name_topics(model: TreeModel, known: dict[tuple, tuple[str, str]], current_id: str | None) -> TopicNode:
    """Ids and summaries of the rebuilt topics: those surviving rows describe keep theirs
    (the topic summaries point to them); the newest exchange's topic keeps the stored
    current id; others get new ones (a grouping id where a topic holds only topics).
    Returns the current topic."""
    live = model.root.iter_messages()
    newest = max(live, key=lambda m: m.index, default=None)
    current = newest.parent if newest is not None and newest.parent is not None else model.root
    used = {ROOT_ID}
    for t in model.root.iter_topics():
        if t is model.root:
            continue
        nid, t.summary = known.get((t.topic_name, t.start_index, t.end_index), ("", ""))
        if not nid and t is current:
            nid = current_id or ""
        if not nid or nid in used:
            nid = new_id("t" if t.message_children else GROUP_PREFIX)
        t.node_id, t.created_index = nid, t.start_index
        used.add(nid)
    return current


def _no_embedder() -> Embedder:
    raise AssertionError("a salvage links rows: it never embeds")


def _rebuild_tree(con: sqlite3.Connection, messages: list[_Message]) -> None:
    """The tree's rows made again from where each exchange sat (its thread path)."""
    places = _exchange_places(con, messages)
    model = TreeModel(_no_embedder)
    topics: dict[tuple[str, ...], TopicNode] = {(): model.root}
    for p in places:
        if not p.archived:
            _topic_at(topics, p.path).add_child(MessageNode(p.index, [], p.timestamp, node_id=p.node_id))
    model.recompute_ranges()
    row = con.execute("SELECT value FROM main.meta WHERE key = 'current_node'").fetchone()
    current = _name_topics(model, _known_topics(con), row[0] if row else None)
    archived = [MessageNode(p.index, [], p.timestamp, node_id=p.node_id, archived=True,
                            home_id=topics[tuple(p.path)].node_id if tuple(p.path) in topics else "")
                for p in places if p.archived]
    con.execute("DELETE FROM main.nodes")
    con.executemany("INSERT INTO main.nodes VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                    [r.as_sql() for r in node_rows(model.root, archived)])
    con.execute("INSERT OR REPLACE INTO main.meta VALUES('current_node', ?)", (current.node_id,))


# --- what is derived, and the check before the copy takes the file's place ------------------


def _rebuild_keyword_indexes(con: sqlite3.Connection) -> None:
    for fts, table, cols in FTS_REBUILD:
        names = ", ".join(cols)
        con.execute(f"DELETE FROM main.{fts}")
        con.execute(f"INSERT INTO main.{fts}(rowid, {names}) SELECT rowid, {names} FROM main.{table}")


def _check_tree(con: sqlite3.Connection, path: str) -> None:
    """The copy loads as a session opens (``TreeStore.load``): a repair that could not
    open is refused here, with the damaged file still in place."""
    by_exchange: dict[int, list[dict]] = {}
    for x, role, content in con.execute("SELECT exchange_index, role, content FROM main.messages ORDER BY idx"):
        by_exchange.setdefault(x, []).append({"role": role, "content": content})

    def make(r: NodeRow) -> MessageNode:
        if r.exchange_index not in by_exchange:
            raise BrokenRowsError(f"exchange {r.exchange_index} has a tree node but no messages")
        return MessageNode(r.exchange_index, by_exchange[r.exchange_index], r.timestamp or "")

    rows = [NodeRow.from_sql(r) for r in con.execute(f"SELECT {', '.join(NodeRow.COLUMNS)} FROM main.nodes")]
    try:
        TreeModel(_no_embedder).replace_structure(rows, None, make)
    except BrokenRowsError as exc:
        raise SessionFileError(path, f"cannot be repaired: what could be read does not make a tree ({exc})") from None

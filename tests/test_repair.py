"""A session file damaged only in what is derived from the conversation (its keyword
index) is repaired from its own rows; one whose messages table is damaged is rebuilt
from the conversation's other copies (search vectors, keyword index); one where no copy
reads is refused, saying what is still readable, and left as it was. Real session
files, real MiniLM, pages overwritten as a disk would."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest

from trace_core import CTree, SessionFileError
from trace_core.repair import LOST_TEXT, salvage
from trace_core.store import parse_message_id

TALK = [("My sister Alma lives in Lisbon.", "Lisbon is lovely in spring."),
        ("She works as a marine biologist.", "Marine biology suits a coastal city."),
        ("Our grandmother's recipe uses cardamom.", "Cardamom gives bread a warm scent."),
        ("I ride a blue Gazelle bicycle.", "Gazelle makes sturdy Dutch bikes.")]


STAMPS = [f"2025-03-0{d}T09:1{d}:00+00:00" for d in range(1, 5)]  # one a day: order and times tell


def make_session(path, minilm, stamps=(None,) * len(TALK)) -> None:
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    for (u, a), ts in zip(TALK, stamps):
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}], timestamp=ts)
    tree.index_pending()
    tree.vdb.close()


def snapshot(path, minilm) -> dict:
    """The tree node for node: exchanges (texts, order, times), topics, ids, current."""
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    try:
        return tree.structure.snapshot()
    finally:
        tree.vdb.close()


def conversation(tree) -> list[tuple]:
    return [(x.index, x.user, x.assistant, x.timestamp) for x in tree.exchanges]


def pages(path, table: str, kind: str = "") -> list[int]:
    """The pages of ``table`` (only its ``kind`` pages: "leaf", "internal"), in file order."""
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype LIKE ? ORDER BY pageno",
                                     (table, kind or "%"))]
    con.close()
    return out


def smash_pages(path, pagenos) -> None:
    """Pages overwritten with a pattern no page starts with (random bytes pass for a page
    header once in 64 draws: a test would read garbage rows now and then)."""
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:
        for p in pagenos:
            fh.seek((p - 1) * size)
            fh.write(b"\xde\xad\xbe\xef" * (size // 4))


def unreadable(path, table: str) -> bool:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        con.execute(f"SELECT * FROM {table}").fetchall()
        return False
    except sqlite3.DatabaseError:
        return True
    finally:
        con.close()


def smash_root_page(path, table: str) -> None:
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    smash_pages(path, [root])


def sha(path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_a_damaged_keyword_index_is_rebuilt_from_the_messages(tmp_path, minilm):
    path = tmp_path / "s.db"
    make_session(path, minilm)
    smash_root_page(path, "messages_fts_data")
    with pytest.raises(SessionFileError, match="damaged"):
        CTree.open(str(path), embed_fn=minilm, judge="embedding")
    damaged = sha(path)
    report = salvage(str(path))
    assert sha(tmp_path / os.path.basename(report.kept_as)) == damaged  # the damaged file is kept as it was
    assert not list(tmp_path.glob("*.damaged-*-shm"))  # nobody's data beside it
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    try:
        assert [(x.user, x.assistant) for x in tree.exchanges] == TALK
        hits = tree.vdb.keyword_search_messages("cardamom")  # the rebuilt keyword index
        assert {parse_message_id(mid)[0] for mid, _ in hits} == {2}
        assert not tree.pending_parts()  # the sentence index came along
        tree.add([{"role": "user", "content": "Alma visits in May."}, {"role": "assistant", "content": "Lovely."}])
    finally:
        tree.vdb.close()
    assert report.summary().startswith("4 exchanges copied into a new file") and not report.lost


def test_a_damaged_messages_table_and_tree_are_rebuilt_from_the_search_vectors(tmp_path, minilm):
    """The new user's file: 16 KiB overwritten from the messages table's first page took
    the messages and the tree's nodes; the search vectors still held every message."""
    path = tmp_path / "violin-lessons.db"
    make_session(path, minilm, STAMPS)
    con = sqlite3.connect(str(path))
    con.execute("INSERT INTO meta VALUES('nexus.unsent', '[\"one\", \"two\", \"three\"]')")  # unanswered messages
    con.commit()
    con.close()
    before = snapshot(path, minilm)
    start = pages(path, "messages")[0]
    assert pages(path, "nodes")[0] in range(start, start + 4)  # the same 16 KiB took the tree
    smash_pages(path, range(start, start + 4))
    assert unreadable(path, "messages") and unreadable(path, "nodes")
    damaged = sha(path)
    report = salvage(str(path))
    assert sha(tmp_path / os.path.basename(report.kept_as)) == damaged  # the damaged file is kept as it was
    said = report.summary()
    assert said.startswith("4 exchanges copied into a new file")
    assert "8 of 8 messages recovered from the search vectors" in said and "lost" not in said
    assert "the topic tree was damaged and was rebuilt" in said
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    try:
        assert conversation(tree) == [(i, u, a, ts) for i, ((u, a), ts) in enumerate(zip(TALK, STAMPS))]
        assert tree.structure.snapshot() == before  # topics, ids, summaries and current topic as they were
        assert tree.vdb.get_meta("nexus.unsent") == '["one", "two", "three"]'
        hits = tree.vdb.keyword_search_messages("cardamom")  # the rebuilt keyword index
        assert {parse_message_id(mid)[0] for mid, _ in hits} == {2}
        tree.add([{"role": "user", "content": "Alma visits in May."}, {"role": "assistant", "content": "Lovely."}])
    finally:
        tree.vdb.close()


def test_a_damaged_page_costs_only_its_rows_and_the_keyword_index_fills_them_in(tmp_path, minilm):
    path = tmp_path / "s.db"
    make_session(path, minilm, STAMPS)
    before = snapshot(path, minilm)
    vector_leaves = pages(path, "conversation_vectors", "leaf")
    assert len(vector_leaves) == 4  # two messages a page (a vector is 1.5 KB): one page is one exchange
    smash_pages(path, [pages(path, "messages")[0], vector_leaves[1]])
    assert unreadable(path, "messages") and unreadable(path, "conversation_vectors")
    report = salvage(str(path))
    assert report.recovered == {"conversation_vectors": 6, "messages_fts_content": 2}
    said = report.summary()
    assert "8 of 8 messages recovered from the search vectors (6) and the keyword index (2)" in said
    assert "search by meaning will not find 2 messages: their vectors were lost" in said
    assert "tree was damaged" not in said
    assert snapshot(path, minilm) == before  # texts in order, times (from the tree's nodes), the tree


def test_messages_no_copy_holds_are_marked_lost_in_their_exchange(tmp_path, minilm):
    path = tmp_path / "s.db"
    make_session(path, minilm, STAMPS)
    smash_pages(path, [pages(path, "messages")[0], pages(path, "conversation_vectors", "leaf")[1],
                       pages(path, "messages_fts_content")[0]])
    assert unreadable(path, "messages_fts_content")
    report = salvage(str(path))
    said = report.summary()
    assert "6 of 8 messages recovered from the search vectors; 2 lost (shown as" in said
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    try:
        got = conversation(tree)
    finally:
        tree.vdb.close()
    want = [(i, u, a, ts) for i, ((u, a), ts) in enumerate(zip(TALK, STAMPS))]
    assert got == [*want[:1], (1, LOST_TEXT, LOST_TEXT, STAMPS[1]), *want[2:]]  # exchange 1 keeps its place


def test_a_conversation_no_copy_of_which_reads_is_refused_saying_what_still_reads(tmp_path, minilm):
    path = tmp_path / "s.db"
    make_session(path, minilm)
    for table in ("messages", "conversation_vectors", "messages_fts_content"):
        smash_root_page(path, table)
        assert unreadable(path, table)
    before = sha(path)
    with pytest.raises(SessionFileError) as refused:
        salvage(str(path))
    said = str(refused.value)
    assert "cannot be repaired: none of the copies of its conversation (the messages table, the search vectors, " \
           "the keyword index) holds a readable message" in said
    assert "still readable: 6 settings, 9 tree nodes, 3 topic summaries, 4 thread paths" in said
    assert sha(path) == before and not list(tmp_path.glob("*.repairing*")) and not list(tmp_path.glob("*damaged-*"))


def test_a_file_cut_short_that_cannot_be_repaired_is_left_as_it_was(tmp_path, minilm):
    """/repair of a session cut to 100 bytes left a -wal and -shm beside "the file, left
    untouched" (trial)."""
    path = tmp_path / "s.db"
    make_session(path, minilm)
    os.truncate(path, 100)
    before = sha(path)
    with pytest.raises(SessionFileError, match="its first pages are damaged"):
        salvage(str(path))
    assert sha(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]


def test_checking_a_sound_closed_session_leaves_no_files_beside_it(tmp_path, minilm):
    from trace_core.schema import inspect_session_file

    path = tmp_path / "sound.db"
    make_session(path, minilm)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sound.db"]
    inspect_session_file(str(path))  # a read-only look makes SQLite create -wal and -shm
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sound.db"]


def test_a_file_of_another_kind_is_not_repaired(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"just some notes" * 100)
    with pytest.raises(SessionFileError, match="not a SQLite database"):
        salvage(str(path))


async def test_nexus_says_repair_and_a_repaired_session_opens_with_its_history(server, tmp_path, minilm,
                                                                             monkeypatch):
    from test_nexus_app import chat_reply, make_config, notices, wait_for

    from nexus import sessions
    from nexus.app import NexusApp

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    path = sessions.resolve("family")
    path.parent.mkdir(parents=True, exist_ok=True)
    make_session(path, minilm)
    smash_root_page(path, "messages_fts_data")
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "Cannot open the session" in notices(app))
        assert "/repair family rebuilds" in notices(app) and app.session is None
        await wait_for(pilot, lambda: " · family (not open) · " in app.sub_title)  # it read as if open
        assert ".." not in notices(app)
        app.query_one("#prompt").value = "/repair family"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None, timeout=30)
        assert "Repaired family" in notices(app)
        assert [x.user for x in app.session.tree.exchanges] == [u for u, _ in TALK]
        assert list(path.parent.glob("family.db.damaged-*"))
        app.query_one("#prompt").value = "/repair family"  # now open: it read "is open, so it opened"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "family is open here and reads well: nothing to repair." in notices(app))
        # a sound session that is not open is left as it is (it was rebuilt and called damaged)
        other = sessions.resolve("sound")
        make_session(other, minilm)
        before = other.read_bytes()
        app.query_one("#prompt").value = "/repair sound"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "sound passes the file check: nothing to repair." in notices(app))
        assert other.read_bytes() == before and not list(other.parent.glob("sound.db.damaged-*"))
        assert not list(other.parent.glob("sound.db-*"))  # the check left no -wal/-shm beside it


async def test_repair_is_offered_for_a_damaged_file_not_for_a_session_named_damaged(server, tmp_path, minilm,
                                                                                  monkeypatch):
    """/repair was offered by "damaged" in the error's words, which name the file: a
    session named "damaged-notes" from a newer Nexus was told "/repair damaged-notes
    rebuilds what it can", which would rebuild a sound file. It is offered by the error's
    type (``SessionDamagedError``), when opened at start and with /open."""
    import sqlite3

    from test_nexus_app import chat_reply, make_config, notices, type_and_send, wait_for

    from nexus import sessions
    from nexus.app import NexusApp
    from trace_core.store import SCHEMA_VERSION

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    path = sessions.resolve("damaged-notes")
    path.parent.mkdir(parents=True, exist_ok=True)
    make_session(path, minilm)
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")  # written by a newer Nexus: sound, not damaged
    con.commit()
    con.close()
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "Cannot open the session" in notices(app))
        assert "newer TRACE" in notices(app) and "/repair" not in notices(app)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None)
        await type_and_send(pilot, app, "/open damaged-notes")
        await wait_for(pilot, lambda: "Cannot open damaged-notes" in notices(app))
        assert "/repair" not in notices(app)


async def test_a_session_damaged_while_open_says_so_and_repair_mends_it_in_place(server, tmp_path, minilm,
                                                                                monkeypatch):
    """Pages overwritten while the session was open: each message got "No reply:
    DatabaseError: database disk image is malformed" (no file named, no way out), and
    /repair said "is open here and reads well: nothing to repair" (a trial)."""
    from test_nexus_app import chat_reply, make_config, notices, type_and_send, wait_for

    from nexus import sessions
    from nexus.app import NexusApp

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    path = sessions.resolve("family")
    path.parent.mkdir(parents=True, exist_ok=True)
    make_session(path, minilm)
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None, timeout=30)
        smash_root_page(path, "messages_fts_data")
        await type_and_send(pilot, app, "Where does Alma live?")
        await wait_for(pilot, lambda: "No reply: its memory could not be read: the session file is damaged (" in
                       notices(app) and "/repair family rebuilds what it can" in notices(app))
        assert "Error:" not in notices(app)
        await type_and_send(pilot, app, "/repair family")
        await wait_for(pilot, lambda: "Repaired family" in notices(app) and app.session is not None
                       and app.session.tree is not None, timeout=30)
        assert [x.user for x in app.session.tree.exchanges] == [u for u, _ in TALK]
        assert app.session.kept == ["Where does Alma live?"]  # still there, for Ctrl+R
        assert list(path.parent.glob("family.db.damaged-*"))


def test_only_damage_is_said_as_damage_when_the_memory_cannot_be_read(tmp_path):
    from types import SimpleNamespace

    from nexus.chat import ChatSession

    # the config as turn_problem reads it (server.timeout, since the timeout's words): the test
    # failed with AttributeError once both changes met
    config = SimpleNamespace(base_url="http://127.0.0.1:9/v1", section=lambda name: SimpleNamespace(timeout=30.0))
    me = SimpleNamespace(path=tmp_path / "family.db", config=config, resend_key="Ctrl+R")
    damaged = ChatSession.turn_problem(me, sqlite3.DatabaseError("database disk image is malformed"))
    assert "the session file is damaged" in damaged and "/repair family" in damaged
    assert "damaged" not in ChatSession.turn_problem(me, sqlite3.OperationalError("database is locked"))


def test_a_file_another_program_holds_locked_is_not_said_damaged(tmp_path):
    """The file check took any SQLite error for damage: a session another program held
    locked ("database is locked") was a SessionDamagedError, and /open offered /repair,
    which closes the open session to rebuild a sound file (two changes met: a review)."""
    from trace_core import SessionDamagedError
    from trace_core.schema import inspect_session_file
    from trace_core.store import VectorDatabase

    path = str(tmp_path / "held.db")
    VectorDatabase(path).close()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("PRAGMA locking_mode=EXCLUSIVE")
        other.execute("BEGIN EXCLUSIVE")
        other.execute("INSERT OR REPLACE INTO meta VALUES('x', 'y')")
        with pytest.raises(SessionFileError) as raised:
            inspect_session_file(path)
        assert not isinstance(raised.value, SessionDamagedError)
        assert "locked" in str(raised.value) and "damaged" not in raised.value.problem
    finally:
        other.close()


async def test_repair_of_the_open_session_closes_it_only_when_it_is_damaged(server, tmp_path, minilm, monkeypatch):
    """/repair of the open session closed it on any failed file check, then rebuilt a
    sound file (a newer schema's, here) and kept it aside as "damaged": it stays open now,
    nothing repaired, and the problem is said."""
    import sqlite3

    from test_nexus_app import make_config, notices, type_and_send, wait_for

    from nexus import sessions
    from nexus.app import NexusApp
    from trace_core.store import SCHEMA_VERSION

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    path = sessions.resolve("family")
    path.parent.mkdir(parents=True, exist_ok=True)
    make_session(path, minilm)
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None, timeout=30)
        session = app.session
        con = sqlite3.connect(path)
        con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")  # another program's doing: sound, not damaged
        con.commit()
        con.close()
        await type_and_send(pilot, app, "/repair family")
        await wait_for(pilot, lambda: "nothing was repaired" in notices(app) or "Repaired" in notices(app)
                       or "Not repaired" in notices(app), timeout=30)
        assert "family is not damaged" in notices(app) and "It stays open" in notices(app)
        assert app.session is session and not list(path.parent.glob("family.db.damaged-*"))

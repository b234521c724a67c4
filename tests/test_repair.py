"""A session file damaged only in what is derived from the conversation (its keyword
index) is repaired from its own rows; one whose conversation is damaged is refused and
left as it was. Real session files, real MiniLM, pages overwritten as a disk would."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest

from trace_core import CTree, SessionFileError
from trace_core.repair import salvage
from trace_core.store import parse_message_id

TALK = [("My sister Alma lives in Lisbon.", "Lisbon is lovely in spring."),
        ("She works as a marine biologist.", "Marine biology suits a coastal city."),
        ("Our grandmother's recipe uses cardamom.", "Cardamom gives bread a warm scent."),
        ("I ride a blue Gazelle bicycle.", "Gazelle makes sturdy Dutch bikes.")]


def make_session(path, minilm) -> None:
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    for u, a in TALK:
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}])
    tree.index_pending()
    tree.vdb.close()


def smash_root_page(path, table: str) -> None:
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(os.urandom(page_size))


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


def test_a_damaged_conversation_is_refused_and_the_file_left_as_it_was(tmp_path, minilm):
    path = tmp_path / "s.db"
    make_session(path, minilm)
    smash_root_page(path, "messages")
    before = sha(path)
    with pytest.raises(SessionFileError, match="cannot be repaired"):
        salvage(str(path))
    assert sha(path) == before and not list(tmp_path.glob("*.repairing*")) and not list(tmp_path.glob("*damaged-*"))


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
        assert " · family (not open) · " in app.sub_title  # it named the session as if it were open
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

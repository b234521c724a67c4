"""Sessions in the app: the chat you left is shown again, /open /rename /delete /new
/sessions, /save's refusals, commands with no session, long commands' progress and
cancellation (Pilot tests against the scripted server, real session files)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_nexus_app import chat_reply, make_config, notices, ready, type_and_send, wait_for

from nexus import sessions
from nexus.app import NexusApp
from nexus.history import HistoryPager
from nexus.widgets import Notice, PastExchangeView, UserMessage
from trace_core import CTree


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def make_session(path: Path, embed, n: int, archive: tuple[int, ...] = ()) -> None:
    tree = CTree.open(str(path), judge="embedding", embed_fn=embed)
    for i in range(n):
        tree.add([{"role": "user", "content": f"Question number {i} about topic {i % 7}?"},
                  {"role": "assistant", "content": f"Answer **{i}**: see item {i}.\n\n- one\n- two"}],
                 timestamp=f"2026-03-{1 + i % 28:02d}T10:{i % 60:02d}:00+00:00")
    if archive:
        tree.archive([tree.exchanges[i] for i in archive])
    tree.vdb.close()


def rendered(widget) -> str:
    """The text a widget draws at its current width."""
    from rich.console import Console

    console = Console(width=widget.size.width or 100, color_system=None, record=True, file=open(os.devnull, "w"))
    console.print(widget.render())
    return console.export_text()


def shown_indexes(app) -> list[int]:
    return [v.exchange.index for v in app.query_one("#chat").query_children(PastExchangeView)]


def test_pager_pages_back_from_the_newest():
    class X:
        def __init__(self, i):
            self.index, self.user, self.assistant, self.system = i, f"u{i}", f"a{i}", ""
            self.timestamp, self.archived = "2026-01-02T03:04:05+00:00", i == 3

    pager = HistoryPager([X(i) for i in range(120)], page_size=50)
    assert [x.index for x in pager.earlier()] == list(range(70, 120))
    assert pager.remaining == 70
    assert [x.index for x in pager.earlier()] == list(range(20, 70))
    last = pager.earlier()
    assert [x.index for x in last] == list(range(20)) and pager.remaining == 0
    assert last[3].archived and not last[2].archived and last[0].when.startswith("2026-01-0")
    assert pager.earlier() == []
    # the newest page came from the file: earlier pages wait for the tree's list
    xs = [X(i) for i in range(120)]
    pager = HistoryPager.after(HistoryPager(xs).earlier(), 120)
    assert pager.remaining == 70 and not pager.ready and pager.earlier() == [] and pager.remaining == 70
    pager.attach(xs)
    assert [x.index for x in pager.earlier()] == list(range(20, 70))


async def test_reopening_shows_the_last_50_and_scrolling_up_loads_the_rest(server, tmp_path, minilm, data_dir):
    path = tmp_path / "long.db"
    make_session(path, minilm, 60, archive=(55,))
    # the newest page read straight from the file is the tree's own last page
    from nexus.history import newest_from_file, past_exchange

    page, total = newest_from_file(path)
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm, read_only=True)
    assert total == 60 and page == [past_exchange(x) for x in tree.exchanges[-50:]]
    tree.vdb.close()
    server.respond(chat_reply("ok"))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(shown_indexes(app)) == 50)
        assert shown_indexes(app) == list(range(10, 60))
        views = list(app.query(PastExchangeView))
        last = views[-1]
        drawn = rendered(last)
        assert "Question number 59" in drawn and "#59 · 2026-03-" in drawn
        assert "Answer 59: see item 59." in drawn and "**" not in drawn  # Markdown, drawn as such
        assert "• one" in drawn
        archived = [v for v in views if v.exchange.index == 55][0]
        assert archived.has_class("archived") and not views[0].has_class("archived")
        assert "10 earlier exchanges" in notices(app)
        chat = app.query_one("#chat")
        # the newest is in view: scrolled to the bottom
        await wait_for(pilot, lambda: chat.max_scroll_y > 0 and chat.scroll_y == chat.max_scroll_y)
        chat.scroll_home(animate=False)
        await wait_for(pilot, lambda: len(shown_indexes(app)) == 60)
        assert shown_indexes(app) == list(range(60))
        assert "earlier exchanges" not in notices(app)
        # paging kept the reader's place: exchange #10 is at the top of the view, not #0
        tenth = [v for v in app.query(PastExchangeView) if v.exchange.index == 10][0]
        await wait_for(pilot, lambda: chat.scroll_y > 0 and abs(tenth.virtual_region.y - chat.scroll_y) <= 1)
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(shown_indexes(app)) == 50)
        # /clear empties the pane: no earlier page comes back into it (#0-#9 did, a trial)
        await type_and_send(pilot, app, "/clear")
        await pilot.pause(1.0)
        assert shown_indexes(app) == [] and "earlier exchanges" not in notices(app)
        # a /rename after it keeps the pane as it is, its answer last (after /clear it drew
        # the chat again from the history, and the answers above went: a trial)
        await type_and_send(pilot, app, "/help")
        await wait_for(pilot, lambda: "Commands:" in notices(app))
        await type_and_send(pilot, app, "/rename gamma")
        await wait_for(pilot, lambda: "Renamed long to gamma." in notices(app))
        await pilot.pause(0.5)
        assert "Commands:" in notices(app) and shown_indexes(app) == []
        assert notices(app).rstrip().endswith("Renamed long to gamma."), notices(app)[-300:]


async def test_open_rename_delete_new_and_sessions(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    first = sessions.resolve("first")
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My bike is a blue Gazelle.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        # /sessions: size counts the writes in the -wal (as the database holds them once
        # closed), time is its last write
        await type_and_send(pilot, app, "/sessions")
        await wait_for(pilot, lambda: "Sessions (newest first" in notices(app))
        mtime, size = sessions.footprint(first)
        assert Path(f"{first}-wal").stat().st_size > 0 and size > first.stat().st_size
        assert size == sessions.database_bytes(first)
        assert mtime == max(f.stat().st_mtime for f in sessions.files_of(first) if f.exists())
        from nexus.app import human_size
        assert "* first" in notices(app) and human_size(size) in notices(app)
        # /new, then back with /open
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != first
                       and app.session.tree is not None)
        second = app.session_path
        assert not shown_indexes(app)
        await type_and_send(pilot, app, "My car is red.")  # not empty: it stays when left
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        # Tab completes session names after /open (the input's completer is handed them)
        assert "/open first " in app.query_one("#prompt").completer.complete("/open fi")
        await type_and_send(pilot, app, "/open first")
        await wait_for(pilot, lambda: app.session_path == first and app.session is not None
                       and len(shown_indexes(app)) == 1)
        assert "blue Gazelle" in rendered(app.query(PastExchangeView).first())
        # /delete: never the open one; asks first; a second /delete confirms
        await type_and_send(pilot, app, "/delete first")
        await wait_for(pilot, lambda: "is the open session" in notices(app))
        assert first.exists()
        await type_and_send(pilot, app, f"/delete {second.stem}")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        assert second.exists()
        await type_and_send(pilot, app, f"/delete {second.stem}")
        await wait_for(pilot, lambda: f"Deleted {second.stem}" in notices(app))
        assert not any(f.exists() for f in sessions.files_of(second))
        await type_and_send(pilot, app, "/open nosuchsession")
        await wait_for(pilot, lambda: 'No session named "nosuchsession"' in notices(app))
        # /rename: the open session's files move; it reopens under the new name with its history
        await type_and_send(pilot, app, "/rename bike trips")
        await wait_for(pilot, lambda: 'Renamed first to bike-trips (the name you typed, "bike trips", is written '
                       "bike-trips as a file name)." in notices(app))
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None)
        assert app.session_path.name == "bike-trips.db" and not first.exists()
        assert len(app.session.tree.exchanges) == 1 and len(shown_indexes(app)) == 1
        # the chat stays as it was: the notes said before the rename are still there (it was
        # redrawn from history, and they were gone — re-trial)
        assert 'No session named "nosuchsession"' in notices(app)
        assert sessions.last_session() == app.session_path
        # the name as typed to /rename finds it: "/open bike trips" was a bare "Usage" (a trial)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem != "bike-trips"
                       and app.session.tree is not None)
        await type_and_send(pilot, app, "/open bike trips")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.name == "bike-trips.db"
                       and app.session.tree is not None)
        assert "Usage" not in notices(app)
        # the palette lists the sessions to switch to, not the open one
        from nexus.app import SessionProvider

        provider = SessionProvider(app.screen)
        (sessions.sessions_dir() / "bike-repairs.db").write_bytes(b"")
        hits = [str(h.text) async for h in provider.search("bike")]
        assert any("open session bike-repairs" in h for h in hits)
        assert not any("open session bike-trips" in h for h in hits)


async def test_a_session_that_cannot_be_opened_leaves_the_open_one_open(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    first = sessions.resolve("first")
    bad = sessions.resolve("damaged")
    bad.write_bytes(b"definitely not sqlite" * 50)
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My bike is a blue Gazelle.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/open damaged")
        await wait_for(pilot, lambda: "Cannot open damaged" in notices(app))
        assert "left untouched; first stays open" in notices(app)
        assert app.session is not None and app.session_path == first
        assert [m.text for m in app.query(UserMessage)] == ["My bike is a blue Gazelle."]  # the chat stays too
        sessions.resolve("scenario-overwrite-20261203-081359-with-a-long-name").write_bytes(b"")
        await type_and_send(pilot, app, "/sessions")
        await wait_for(pilot, lambda: "* first" in notices(app))
        assert "* damaged" not in notices(app)
        import re
        said = [n.plain for n in app.query(Notice) if "Sessions (newest first" in n.plain][-1]
        columns = {re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", line).start() for line in said.splitlines()[1:]}
        assert len(columns) == 1  # the dates line up whatever the names' lengths
        await type_and_send(pilot, app, "Still here?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
    assert bad.read_bytes() == b"definitely not sqlite" * 50


async def test_an_emptied_session_file_opens_as_a_new_session_and_says_so(server, tmp_path, minilm, data_dir):
    emptied = sessions.resolve("emptied")
    emptied.write_bytes(b"")
    app = NexusApp(make_config(server.base_url, tmp_path), emptied, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "was empty (0 bytes)" in notices(app))
        assert app.session is not None and not app.session.tree.exchanges


async def test_sessions_and_delete_give_a_session_the_same_size(server, tmp_path, minilm, data_dir):
    """A new-user trial: /sessions listed the open session as 156.0 KiB and, after /new,
    /delete asked about "124.0 KiB" for it: an open session's recent writes sit in its
    -wal beside a 32 KiB -shm, and closing it writes them back into the database. A
    session's size is now all its files with the database as it is once closed."""
    import re

    from test_nexus_app import log_text

    server.respond(chat_reply("Noted."))
    kept = sessions.resolve("kept")
    make_session(kept, minilm, 12)
    app = NexusApp(make_config(server.base_url, tmp_path), kept, embed_fn=minilm)

    def size_of(name: str, text: str) -> str:
        return re.findall(rf"{name}\b.*?(\d+(?:\.\d+)? (?:bytes|KiB|MiB))", text)[-1]

    def files() -> dict[str, int]:
        return {f.name: f.stat().st_size for f in sessions.files_of(kept) if f.exists()}

    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "indexed the sentences of 12" in log_text(app))
        await type_and_send(pilot, app, "My bike is a blue Gazelle.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 13)
        seen = {"files": files(), "at": time.monotonic()}

        def settled() -> bool:  # no write for 0.5 s (the exchange's vectors and sentences are in)
            now = files()
            if now != seen["files"]:
                seen.update(files=now, at=time.monotonic())
            return time.monotonic() - seen["at"] > 0.5

        await wait_for(pilot, settled)
        open_files = files()
        assert open_files.get("kept.db-wal", 0) > 0 and "kept.db-shm" in open_files  # measured while open
        await type_and_send(pilot, app, "/sessions")
        await wait_for(pilot, lambda: "Sessions (newest first" in notices(app))
        listed = size_of("kept", notices(app).split("Sessions (newest first")[-1])
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != kept
                       and app.session.tree is not None)
        assert files() == {"kept.db": kept.stat().st_size}  # closed: the -wal was written back
        await type_and_send(pilot, app, f"/delete {kept.stem}")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        asked = size_of("Delete kept", notices(app))
        from nexus.app import human_size

        assert listed == asked == human_size(kept.stat().st_size), (listed, asked, open_files)


def test_a_sessions_size_counts_all_its_files(tmp_path, minilm, data_dir):
    """What /delete removes is counted: the database (as it is closed), the messages
    parked for it and its log."""
    from nexus.parked import parked_path

    s = sessions.resolve("counted")
    make_session(s, minilm, 3)
    base = s.stat().st_size
    assert sessions.footprint(s)[1] == sessions.database_bytes(s) == base
    parked_path(s).write_text('["a message not sent yet"]')
    sessions.log_path(s).write_text("x" * 1000)
    assert sessions.footprint(s)[1] == base + parked_path(s).stat().st_size + 1000
    # a file cut short: its size, not the header's page count (listed 160.0 KiB for 50,000 bytes)
    with open(s, "r+b") as fh:
        fh.truncate(base // 2)
    assert sessions.database_bytes(s) == base // 2


async def test_new_then_restart_resumes_the_new_one_and_the_old_stays_reachable(server, tmp_path, minilm,
                                                                               data_dir):
    server.respond(chat_reply("Noted."))
    old = sessions.resolve("old")
    app = NexusApp(make_config(server.base_url, tmp_path), old, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Remember the code word: pelican.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != old)
        new = app.session_path
    # a restart (no --session) resumes the last session: the new one
    assert sessions.resolve(None) == new
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve(None), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert app.session_path == new and len(app.session.tree.exchanges) == 0
        await type_and_send(pilot, app, "/open old")
        await wait_for(pilot, lambda: app.session_path == old and app.session is not None
                       and len(shown_indexes(app)) == 1)
        assert len(app.session.tree.exchanges) == 1


async def test_a_session_switch_stores_the_reply_in_flight_first(server, tmp_path, minilm, data_dir):
    from scripted_server import Reply

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("", chunks=[f"word{i} " for i in range(400)], chunk_delay=0.05)

    server.respond(respond)
    first = sessions.resolve("first")
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "count slowly")
        await wait_for(pilot, lambda: app.current_reply is not None and "word3" in app.current_reply.text)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != first
                       and app.session.tree is not None, 60)
        # said (the switch said nothing of the reply it cut)
        assert "The reply in progress was stopped; what it had said is stored in first" in notices(app)
    tree = CTree.open(str(first), judge="embedding", embed_fn=minilm)
    try:
        assert len(tree.exchanges) == 1 and tree.exchanges[0].user == "count slowly"
        assert "word0" in tree.exchanges[0].assistant and "word399" not in tree.exchanges[0].assistant
    finally:
        tree.vdb.close()


async def test_a_session_switch_before_the_first_word_says_the_message_is_kept_not_a_reply_stored(
        server, tmp_path, minilm, data_dir):
    """It said "what it had said is stored in first, marked cancelled": nothing had been said,
    and nothing was stored; the message was kept unanswered."""
    from scripted_server import Reply

    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("late", delay=20))
    first = sessions.resolve("first")
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "are you there?")
        await wait_for(pilot, lambda: app.turn is not None)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != first
                       and app.session.tree is not None, 60)
        said = notices(app)
        assert "The reply was stopped before its first word: your message stays in first, not answered" in said
        assert "what it had said is stored" not in said
    tree = CTree.open(str(first), judge="embedding", embed_fn=minilm)
    try:
        assert not tree.exchanges  # nothing stored as a reply
    finally:
        tree.vdb.close()


async def test_opening_a_session_with_unanswered_messages_says_so_without_claiming_nexus_closed(
        server, tmp_path, minilm, data_dir):
    from nexus.chat import UNSENT_KEY

    server.respond(chat_reply("Noted."))
    for name, kept in (("one", ["Is it raining?"]), ("three", ["First?", "Second?", "Third?"])):
        tree = CTree.open(str(sessions.resolve(name)), judge="embedding", embed_fn=minilm)
        tree.vdb.set_meta(UNSENT_KEY, json.dumps(kept))
        tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("start"), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/open one")
        await wait_for(pilot, lambda: "no answer yet" in notices(app))
        assert ("1 message above has no answer yet: press Ctrl+R to send it."
                in notices(app))
        await type_and_send(pilot, app, "/open three")
        await wait_for(pilot, lambda: "3 messages above" in notices(app))
        assert ("3 messages above have no answer yet: Ctrl+R sends them again, one each time."
                in notices(app))
        assert "Nexus closed" not in notices(app) and "message(s)" not in notices(app)


async def test_save_refuses_the_open_session_and_any_sqlite_file(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    other = tmp_path / "other.db"
    make_session(other, minilm, 1)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        before_other = other.read_bytes()
        await type_and_send(pilot, app, f"/save {path}")
        await wait_for(pilot, lambda: "Not saved" in notices(app))
        assert "file of the open session" in notices(app)
        await type_and_send(pilot, app, f"/save {path}-wal")
        await wait_for(pilot, lambda: notices(app).count("Not saved") == 2)
        await type_and_send(pilot, app, f"/save {other}")
        await wait_for(pilot, lambda: "is a SQLite database" in notices(app))
        assert other.read_bytes() == before_other
        await type_and_send(pilot, app, f"/save {tmp_path / 'out.json'}")
        await wait_for(pilot, lambda: (tmp_path / "out.json").exists())
        await type_and_send(pilot, app, "Another fact: the sky is green here.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    assert len(tree.exchanges) == 2  # the session survived the attempts
    tree.vdb.close()



async def test_export_and_save_never_write_a_sessions_file_and_ask_before_replacing_yours(server, tmp_path,
                                                                                          minilm, data_dir):
    """/export wrote Markdown over the open session's database, its -wal and another
    session (none could be repaired), and /export and /save replaced a 3 MB text file and
    a PNG without asking (a trial)."""
    from nexus import sessions

    server.respond(chat_reply("Noted."))
    folder = sessions.sessions_dir()
    path = folder / "mine.db"
    other = folder / "other.db"
    make_session(other, minilm, 1)
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        kept = {f: f.read_bytes() for f in (other, path)}
        wal = tmp_path / "copied.db-wal"
        wal.write_bytes(Path(f"{path}-wal").read_bytes())
        kept[wal] = wal.read_bytes()
        for n, target in enumerate([path, Path(f"{path}-wal"), other, Path(f"{other}-wal"), folder / "other.log",
                                    wal], 1):
            await type_and_send(pilot, app, f"/export {target}")
            await wait_for(pilot, lambda n=n: notices(app).count("Not exported") == n)
        assert "file of the open session" in notices(app) and "a session's file in Nexus's sessions folder" in \
            notices(app) and "write-ahead log" in notices(app)
        assert all(f.read_bytes() == b for f, b in kept.items())
        # a file of the user's: asked first; the same command again replaces it
        for command, name in (("export", "notes.txt"), ("save", "photo.png")):
            mine = tmp_path / name
            mine.write_bytes(b"\x89PNG mine" * 1000)
            await type_and_send(pilot, app, f"/{command} {mine}")
            await wait_for(pilot, lambda mine=mine: f"{mine} exists (8.8 KiB)" in notices(app))
            assert mine.read_bytes() == b"\x89PNG mine" * 1000
            await type_and_send(pilot, app, f"/{command} {mine}")
            await wait_for(pilot, lambda mine=mine: mine.read_bytes()[:1] in (b"#", b"{"))
            # an export of its own kind is replaced as saving again does, unasked
            asked = notices(app).count("again within 30 s to replace it")
            await type_and_send(pilot, app, f"/{command} {mine}")
            done = "Exported" if command == "export" else "Saved the tree"
            await wait_for(pilot, lambda done=done: notices(app).count(done) == 2)
            assert notices(app).count("again within 30 s to replace it") == asked
        # asked in one session, confirmed in another: that one is asked afresh (a trial's
        # confirmation carried over and replaced a file with the other session)
        theirs = tmp_path / "theirs.txt"
        theirs.write_text("my notes 2")
        await type_and_send(pilot, app, f"/save {theirs}")
        await wait_for(pilot, lambda: f"{theirs} exists" in notices(app))
        # another session's export or save there is asked about: one replaced another
        # session's only backup unasked (a trial)
        await type_and_send(pilot, app, "/open other")
        await wait_for(pilot, lambda: app.session_path == other and app.session is not None
                       and app.session.tree is not None)
        for command, name in (("export", "notes.txt"), ("save", "photo.png")):
            mine = tmp_path / name
            before = mine.read_bytes()
            await type_and_send(pilot, app, f"/{command} {mine}")
            await wait_for(pilot, lambda command=command: f"holds the /{command} of session mine" in notices(app))
            assert mine.read_bytes() == before
            await type_and_send(pilot, app, f"/{command} {mine}")
            await wait_for(pilot, lambda mine=mine, before=before: mine.read_bytes() != before)
            assert b"other" in mine.read_bytes()
        asked = notices(app).count(f"{theirs} exists")
        await type_and_send(pilot, app, f"/save {theirs}")
        await wait_for(pilot, lambda: notices(app).count(f"{theirs} exists") == asked + 1)
        assert theirs.read_text() == "my notes 2"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    assert len(tree.exchanges) == 1  # the session survived the attempts
    tree.vdb.close()

SAMPLE_ARGS = {"search": "cats", "ingest": "x.png", "web": "on", "open": "nosuch", "delete": "nosuch",
               "rename": "zzz", "find": "cats", "model": "", "save": "", "scenario": ""}
NEEDS_SESSION = {"tree", "search", "reorganize", "ingest", "web", "model", "save", "stats", "rename"}
SAYS = {"sessions": "No sessions yet", "help": "Commands:", "open": "No session named",
        "delete": "No session named", "repair": "No session named", "undo-reorganize": "Nothing undone"}


async def test_every_command_works_or_says_why_with_no_session(server, tmp_path, minilm, data_dir):
    """A refused (corrupt) session file: no session is open. Each command either works or
    says why in the chat; none stops the app."""
    from nexus import commands as C
    from nexus.widgets import Notice

    bad = tmp_path / "bad.db"
    bad.write_bytes(b"definitely not sqlite" * 50)
    before = bad.read_bytes()
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), bad, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "Cannot open the session" in notices(app))
        assert app.session is None
        for c in C.COMMANDS:
            if c.name in ("quit", "new", "load", "clear"):
                continue
            arg = SAMPLE_ARGS.get(c.name, "x" if "<" in c.usage else "")
            app.query_one("#chat").remove_children()
            await pilot.pause(0.05)
            await type_and_send(pilot, app, f"/{c.name} {arg}".strip())
            await wait_for(pilot, lambda: bool(list(app.query(Notice))), timeout=10)
            said = notices(app)
            assert SAYS.get(c.name, "") in said, f"/{c.name}: {said}"
            if c.name in NEEDS_SESSION:
                assert "needs a session" in said, f"/{c.name}: {said}"
            await pilot.pause(0.2)  # a worker that would crash has had its chance
            assert app.is_running and app.return_code is None, f"/{c.name} stopped the app"
        # /load and /new work without one
        export = tmp_path / "export.json"
        make_session(tmp_path / "src.db", minilm, 3)
        src = CTree.open(str(tmp_path / "src.db"), judge="embedding", embed_fn=minilm)
        src.save(str(export), save_conversation=True)
        src.vdb.close()
        await type_and_send(pilot, app, f"/load {export}")
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None
                       and len(app.session.tree.exchanges) == 3, timeout=60)
        assert "Imported" in notices(app)
        assert app.session.path.name == "export.db"  # named after the file (it was session-<date>)
        await type_and_send(pilot, app, f"/load {export}")
        await wait_for(pilot, lambda: app.session is not None and app.session.path.name == "export-2.db"
                       and app.session.tree is not None and len(app.session.tree.exchanges) == 3, timeout=60)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None
                       and not app.session.tree.exchanges)
    assert bad.read_bytes() == before


def big_export(path: Path, n: int) -> None:
    """A JSON export of ``n`` exchanges, written directly in the export format."""
    kids = []
    for t in range(n // 5):
        msgs = [{"type": "message", "id": f"m{5 * t + k}", "index": 5 * t + k, "timestamp": "2026-01-01T00:00:00",
                 "messages": [{"role": "user", "content": f"question {5 * t + k} about thing {t}"},
                              {"role": "assistant", "content": f"answer {5 * t + k} about thing {t}"}]}
                for k in range(5)]
        kids.append({"type": "topic", "id": f"t{t}", "name": f"Thing {t}", "summary": "", "start": 5 * t,
                     "end": 5 * t + 4, "created": 5 * t, "children": msgs})
    root = {"type": "topic", "id": "root", "name": "ROOT", "summary": "", "start": 0, "end": n - 1,
            "created": 0, "children": kids}
    path.write_text(json.dumps({"format": "trace-ctree", "version": 1, "max_children": max(5, n // 5), "model": "m",
                                "current_node": f"t{n // 5 - 1}", "root": root, "archived": []}))


async def test_load_shows_progress_and_esc_cancels_it(server, tmp_path, minilm, data_dir):
    export = tmp_path / "big.json"
    big_export(export, 3000)
    server.respond(chat_reply("Noted."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"/load {export}")
        await wait_for(pilot, lambda: "imported " in notices(app) and "/3,000 exchanges" in notices(app), 60)
        await pilot.press("escape")
        await wait_for(pilot, lambda: "cancelled: nothing was imported" in notices(app), 30)
        assert app.session_path == path and app.session is not None
        assert not [p for p in sessions.sessions_dir().iterdir() if ".importing" in p.name]
        assert all(p == path for p, _, _ in sessions.list_sessions()) or not sessions.list_sessions()


class Terminal:
    """``python -m nexus`` in a real terminal (tmux)."""

    def __init__(self, tmp: Path, name: str, session: Path, **env: str) -> None:
        self.name, self.rc = f"{name}-{os.getpid()}", tmp / f"{name}.rc"
        env = {"NEXUS_DATA_DIR": str(tmp / "data"), "XDG_CONFIG_HOME": str(tmp / "cfg"),
               "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "TERM": "xterm-256color", **env}
        # a tmux server already running (someone else's terminal) starts the command with
        # ITS environment: each setting goes with -e, or Nexus would use the real data folder
        from nexus.config import ENV_MAP

        env |= {var: "" for var in ENV_MAP if var not in env}  # empty: unset for Nexus
        sets = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
        cmd = f"{sys.executable} -m nexus --no-web --session {session}; echo EXITED $? > {self.rc}"
        done = subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "120", "-y", "40", *sets, cmd],
                              env={**os.environ, **env}, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"tmux could not open a terminal: {done.stderr}"

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True).stdout

    def wait(self, text: str, secs: float) -> None:
        end = time.monotonic() + secs
        while text not in self.screen():
            if time.monotonic() > end:
                raise AssertionError(f"{text!r} not on screen:\n{self.screen()}")
            time.sleep(0.2)

    def type(self, line: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, "-l", line], check=True)

    def quit(self) -> float:
        """/quit; seconds until the process is gone."""
        self.type("/quit")
        t0 = time.monotonic()
        subprocess.run(["tmux", "send-keys", "-t", self.name, "Enter"], check=True)
        while not self.rc.exists():
            if time.monotonic() - t0 > 60:
                raise AssertionError(f"still running 60 s after /quit:\n{self.screen()}")
            time.sleep(0.05)
        return time.monotonic() - t0

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def test_quit_during_a_long_load_exits_within_2_s_and_the_session_opens(tmp_path, monkeypatch):
    """Real processes in a real terminal: /load of a 20,000-exchange export, then /quit.
    Measured against a /quit with nothing running, in the same run (a loaded machine
    makes any process exit slower): the import may add at most 2 s."""
    import shutil

    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed")
    export = tmp_path / "big.json"
    big_export(export, 20_000)
    idle = Terminal(tmp_path, "idle", tmp_path / "idle.db")
    try:
        idle.wait("embedder ready", 120)
        baseline = idle.quit()
    finally:
        idle.close()
    session = tmp_path / "s.db"
    term = Terminal(tmp_path, "load", session)
    try:
        term.wait("embedder ready", 120)
        term.type(f"/load {export}")
        subprocess.run(["tmux", "send-keys", "-t", term.name, "Enter"], check=True)
        term.wait("/20,000 exchanges", 120)
        time.sleep(1.0)  # well inside the import
        took = term.quit()
    finally:
        term.close()
    print(f"/quit during /load: {took:.2f} s; with nothing running: {baseline:.2f} s")
    assert took <= baseline + 2.0, f"/quit during /load took {took:.2f} s, with nothing running {baseline:.2f} s"
    assert term.rc.read_text().split() == ["EXITED", "0"]
    # the open session and every listed session open; no half import is left behind
    CTree.open(str(session), judge="embedding").vdb.close()
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    for p, _, _ in sessions.list_sessions():
        CTree.open(str(p), judge="embedding").vdb.close()
    assert not [p for p in (tmp_path / "data" / "sessions").iterdir() if ".importing" in p.name]
    print(f"/quit during /load: {took:.2f} s; with nothing running: {baseline:.2f} s")


async def test_first_run_without_a_server_says_so_and_offers_local(tmp_path, minilm, data_dir, caplog):
    from scripted_server import ScriptedServer

    srv = ScriptedServer()
    port = srv.port
    srv.httpd.server_close()  # nothing listens there
    app = NexusApp(make_config(f"http://127.0.0.1:{port}/v1", tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "No model server answers" in notices(app))
        said = notices(app)
        assert f"127.0.0.1:{port}" in said and "nexus --local" in said and "connection refused" in said
        # /model then fails in words, and the log says it in a line: it wrote four chained
        # tracebacks under "ERROR worker model_worker failed", read as a crash (a trial)
        await ready(app, pilot)
        with caplog.at_level(logging.DEBUG, logger="nexus"):
            await type_and_send(pilot, app, "/model")
            await wait_for(pilot, lambda: "Cannot list models:" in notices(app))
        failed = [r for r in caplog.records if "model_worker" in r.getMessage()]
        assert failed and all(r.exc_info is None for r in failed if r.levelno > logging.DEBUG), failed
        assert any("cannot reach the model server" in r.getMessage() for r in failed if r.levelno >= logging.WARNING)


async def test_the_no_server_warning_stays_in_sight_below_unanswered_messages(tmp_path, minilm, data_dir):
    """Eleven messages kept from last time were shown after the start-up warning, which
    ended above the first screen, unseen (a trial)."""
    import json

    from scripted_server import ScriptedServer

    from nexus.chat import UNSENT_KEY
    from nexus.widgets import Notice

    srv = ScriptedServer()
    port = srv.port
    srv.httpd.server_close()  # nothing listens there
    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.vdb.set_meta(UNSENT_KEY, json.dumps([f"Message {i}?" for i in range(11)]))
    tree.vdb.close()
    app = NexusApp(make_config(f"http://127.0.0.1:{port}/v1", tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "No model server answers" in notices(app)
                       and "11 messages above have no answer yet" in notices(app))
        await pilot.pause(0.3)
        chat = app.query_one("#chat")
        warning = next(n for n in app.query(Notice) if "No model server answers" in n.plain)
        assert chat.children[-1] is warning
        assert warning.region.y >= 0 and warning.region.height > 0  # on the screen


async def test_the_title_says_no_model_server_rather_than_auto(tmp_path, minilm, data_dir):
    """No model set and no server answering: the title said "auto" as if a model were in use."""
    from scripted_server import ScriptedServer

    srv = ScriptedServer()
    port = srv.port
    srv.httpd.server_close()
    app = NexusApp(make_config(f"http://127.0.0.1:{port}/v1", tmp_path, {("models", "chat"): ""}),
                   tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "No model server answers" in notices(app))
        await wait_for(pilot, lambda: " · no model server · " in app.sub_title)
        assert "auto" not in app.sub_title


async def test_a_refused_api_key_at_start_is_said_as_such_not_as_no_server(server, tmp_path, minilm, data_dir):
    """A server that answers 401 to GET /models was "No model server answers … Start LM
    Studio's server", titled "no model server" (a trial): it is the key."""
    server.state.required_key = "sk-right"
    app = NexusApp(make_config(server.base_url, tmp_path, {("models", "chat"): ""}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "refused the API key" in notices(app))
        said = notices(app)
        assert "answers, but it refused the API key (HTTP 401" in said and "OPENAI_API_KEY" in said
        assert "No model server answers" not in said and "Start LM Studio" not in said
        await wait_for(pilot, lambda: "API key refused" in app.sub_title)
        assert "no model server" not in app.sub_title and "sk-test" not in said
        # a message sent meanwhile says what would make Ctrl+R work, not only "press Ctrl+R"
        await ready(app, pilot)
        await type_and_send(pilot, app, "Hello?")
        await wait_for(pilot, lambda: "No reply:" in notices(app))
        # the server's words too, as a failed reply says them
        assert "refused the API key: Invalid API key. Your message is kept — set the key (OPENAI_API_KEY" in notices(app)
        assert app.session.kept == ["Hello?"]


async def test_a_base_url_without_its_v1_names_the_url_to_use(server, tmp_path, minilm, data_dir):
    """``--base-url http://127.0.0.1:PORT`` (the API is at /v1): the start-up warning and a
    failed send say where the API is (were "HTTP 404 to GET /models" and "does not know
    that model or path")."""
    app = NexusApp(make_config(server.root_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "No model server answers" in notices(app))
        assert f"the API is at {server.base_url}: start with --base-url {server.base_url}" in notices(app)
        await ready(app, pilot)
        before = notices(app)
        await type_and_send(pilot, app, "Hello there")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        said = notices(app)[len(before):]
        assert "No reply" in said and f"the API is at {server.base_url}" in said, said
        assert "does not know that model or path" not in said


async def test_a_reachable_server_gets_no_warning(server, tmp_path, minilm, data_dir):
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: not any(w.group == "probe" and not w.is_finished for w in app.workers))
        assert "No model server" not in notices(app)
        assert any(r.path.rstrip("/").endswith("/v1/models") for r in server.state.requests)  # it was asked


def test_version_and_help_in_a_real_process(tmp_path):
    env = {**os.environ, "NEXUS_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    v = subprocess.run([sys.executable, "-m", "nexus", "--version"], capture_output=True, text=True, env=env,
                       timeout=60)
    from importlib.metadata import version

    assert v.returncode == 0 and v.stdout.strip() == f"nexus {version('nexus-trace')}"
    h = subprocess.run([sys.executable, "-m", "nexus", "--help"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert h.returncode == 0
    # the real paths, each whole on one line (not wrapped mid-path)
    assert str(tmp_path / "data") in h.stdout
    assert str(tmp_path / "cfg" / "nexus" / "nexus.toml") in h.stdout


async def test_ingest_shows_each_file_holds_chat_messages_and_esc_stops_between_files(server, tmp_path, minilm,
                                                                                      data_dir):
    from PIL import Image
    from scripted_server import Reply

    from nexus.widgets import UserMessage

    server.state.catalogue = {"test-model": {"type": "llm", "loaded": ["test-model"]}, "qwen2-vl": {"type": "vlm"}}
    described = []

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            described.append(1)
            return Reply(f"Picture number {len(described)}.", delay=1.0)
        return chat_reply("Hello after the pictures.")(req)

    server.respond(respond)
    folder = tmp_path / "pics"
    folder.mkdir()
    for i in range(6):
        Image.new("RGB", (64, 48), (40 * i, 20, 200)).save(folder / f"p{i}.jpg")
    cfg = make_config(server.base_url, tmp_path, {("models", "vision"): "qwen2-vl"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"/ingest {folder}")
        await wait_for(pilot, lambda: "Ingested p0.jpg (1/6)" in notices(app), 60)
        assert "/ingest: describing" in notices(app)  # the progress line, as it goes
        assert app.vision_busy
        await type_and_send(pilot, app, "Are you back?")
        waiting = [m for m in app.query(UserMessage) if m.text == "Are you back?"][0]
        await wait_for(pilot, lambda: "waiting" in waiting.state)
        assert not [r for r in server.chat_requests() if not r.get("response_format")
                    and not isinstance(r["messages"][-1]["content"], list)]  # nothing sent to the text model yet
        await pilot.press("escape")
        await wait_for(pilot, lambda: "Ingest cancelled" in notices(app), 60)
        assert 1 <= len(described) < 6 and not app.vision_busy
        assert "model: load test-model" in "\n".join(t for _, t in app.query_one("#log").history)
        # the text model is back: the waiting message goes now
        await wait_for(pilot, lambda: any(x.user == "Are you back?" for x in app.session.tree.exchanges), 60)
        assert waiting.state == ""
        ingested = [x for x in app.session.tree.exchanges if x.user.startswith("/ingest")]
        assert len(ingested) == len(described)


def test_a_cancelled_reorganisation_changes_nothing_half_done(tmp_path, minilm):
    """``should_stop`` (Esc in the app), asked before each round and between pairs: a
    stop drops the round in progress and keeps the rounds before it, committed whole.
    The file reopens exactly as the tree in memory."""
    from test_reorganize import BREAD, BREAD2, OTHER, build

    from trace_core.invariants import check_invariants

    tree = build(tmp_path, minilm, BREAD + OTHER[:2] + BREAD2 + OTHER[2:])
    before = tree.snapshot()
    # stopped at the first pair of the first round: nothing changes
    calls = []
    res = tree.reorganize(similarity_threshold=0.3, should_stop=lambda: bool(calls.append(1)) or len(calls) > 1)
    check_invariants(tree)
    assert res["cancelled"] and res["merged"] == 0 and len(calls) == 2
    assert tree.snapshot() == before
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm, read_only=True)
    assert reopened.snapshot() == before
    reopened.vdb.close()
    # stopped later: what the finished rounds merged is kept, consistently on disk
    calls.clear()
    res = tree.reorganize(similarity_threshold=0.3, should_stop=lambda: bool(calls.append(1)) or len(calls) > 2)
    check_invariants(tree)
    assert res["cancelled"]
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm, read_only=True)
    assert reopened.snapshot() == tree.snapshot()
    reopened.vdb.close()
    # not stopped: it runs to the end
    res = tree.reorganize(similarity_threshold=0.3, should_stop=lambda: False)
    assert not res["cancelled"]
    tree.vdb.close()


async def test_a_reopened_reply_shows_its_mark_as_a_note_not_as_its_words(server, tmp_path, minilm, data_dir):
    path = tmp_path / "marks.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "Tell me a long story about bees."},
              {"role": "assistant", "content": "Once upon a time a hive\n\n[reply cancelled]"}])
    tree.add([{"role": "user", "content": "Count to five."},
              {"role": "assistant", "content": "One, two, three\n\n[reply cut at max_tokens]"}])
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(shown_indexes(app)) == 2)
        first, second = (rendered(v) for v in app.query(PastExchangeView))
        assert "Once upon a time a hive" in first and "reply cancelled" in first and "[reply cancelled]" not in first
        assert "reply cut at max_tokens" in second and "[reply" not in second
        assert "[reply cancelled]" in app.session.tree.exchanges[0].assistant  # what is stored is unchanged


async def test_names_too_long_and_escape_codes_in_an_export_are_said_and_made_harmless(server, tmp_path, minilm,
                                                                                     data_dir):
    """A file name over the file system's 255 bytes is refused in words (it raised
    'Errno 36' through the command); an export is a file to ``cat``: a reply's escape
    codes are written visible, not obeyed."""
    server.respond(chat_reply("plain \x1b[31mred\x1b[0m and \x1b]0;TITLE\x07 done"))
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("first"), embed_fn=minilm)
    long = "n" * 300
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "colours?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        for command, said in ((f"/rename {long}", "Not renamed: the name is too long (300 bytes"),
                              (f"/export {tmp_path / long}.md", "Not exported: "),
                              (f"/save {tmp_path / long}.json", "Not saved: ")):
            await type_and_send(pilot, app, command)
            await wait_for(pilot, lambda said=said: said in notices(app))
        assert "the name is too long" in notices(app) and "Errno" not in notices(app)
        assert app.session_path.stem == "first"
        out = tmp_path / "out.md"
        await type_and_send(pilot, app, f"/export {out}")
        await wait_for(pilot, lambda: out.exists())
    text = out.read_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "␛[31mred␛[0m" in text


async def test_a_session_in_a_folder_that_does_not_exist_says_it_made_it(server, tmp_path, minilm, data_dir):
    path = tmp_path / "new" / "place" / "x.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: f"Made the folder {tmp_path / 'new'} for this new session" in notices(app))
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("inside"), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.pause(0.2)
        assert "Made the folder" not in notices(app)  # Nexus's own sessions folder is no news


async def test_a_live_exchange_gets_its_number_and_time_once_stored_as_a_reopened_one_shows(server, tmp_path,
                                                                                           minilm, data_dir):
    """The line over an exchange ("#0 · 2026-12-03 10:04") was drawn only after a reopen:
    a live one showed none, so /search's and the tree's numbers matched nothing on screen."""
    from nexus.widgets import ExchangeHead

    server.script("Bees dance.", "They smell it.")
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("heads"), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "How do bees talk?")
        await wait_for(pilot, lambda: len(app.query(ExchangeHead)) == 1)
        await type_and_send(pilot, app, "How do they find flowers?")
        await wait_for(pilot, lambda: len(app.query(ExchangeHead)) == 2)
        live = [rendered(h).strip() for h in app.query(ExchangeHead)]
        live_column = app.query(ExchangeHead).first().render_line(0).text.index("#")  # as drawn
        chat = list(app.query_one("#chat").children)
        for head in app.query(ExchangeHead):  # each right over its message
            assert isinstance(chat[chat.index(head) + 1], UserMessage)
    assert [h.split(" · ")[0] for h in live] == ["#0", "#1"]
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("heads"), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(shown_indexes(app)) == 2)
        reopened = [rendered(v).strip().splitlines()[0].strip() for v in app.query(PastExchangeView)]
        reopened_column = app.query(PastExchangeView).first().render_line(0).text.index("#")
    assert reopened == live
    assert live_column == reopened_column > 10  # centred alike (the live one sat at the left edge)


async def test_a_reopened_numbered_list_keeps_its_dots(server, tmp_path, minilm, data_dir):
    """Live, a reply's list reads "1. Open…"; reopened it read "1 Open…" (Rich's lists)."""
    path = tmp_path / "steps.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "How do I run it?"},
              {"role": "assistant", "content": "Steps:\n\n1. Open a terminal.\n2. Save the file.\n\n- done"}])
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(shown_indexes(app)) == 1)
        text = rendered(app.query_one(PastExchangeView))
        assert "1. Open a terminal." in text and "2. Save the file." in text and "• done" in text


def test_reading_a_session_is_not_a_write_in_the_listing(tmp_path, minilm, data_dir):
    """/search reads every session (read-only): SQLite makes their -shm and -wal then, and
    /sessions listed each as written that minute, in the wrong order (trial)."""
    from nexus.memory_service import search_sessions

    older, newer = sessions.resolve("older"), sessions.resolve("newer")
    make_session(older, minilm, 2)
    make_session(newer, minilm, 2)
    now = time.time()
    os.utime(older, (now - 7200, now - 7200))
    os.utime(newer, (now - 3600, now - 3600))
    tree = CTree.open(str(newer), judge="embedding", embed_fn=minilm)
    try:
        search_sessions(tree, newer, "exchange")
        assert any(Path(f"{older}{side}").exists() for side in ("-shm", "-wal")), "the read made no side file"
        listed = {p.stem: t for p, t, _ in sessions.list_sessions()}
        assert abs(listed["older"] - (now - 7200)) < 5
        assert [p.stem for p, _, _ in sessions.list_sessions()][:2] == ["newer", "older"]
        # a real write still counts, while it sits in the -wal
        tree.add([{"role": "user", "content": "one more"}, {"role": "assistant", "content": "noted"}])
        assert sessions.footprint(newer)[0] > now - 60
    finally:
        tree.close()


def test_export_refuses_another_name_for_a_session_file(tmp_path, data_dir):
    """A confirmed /export onto a hard link of the open session's -shm overwrote the
    shared memory under SQLite: Nexus died of a bus error and the message was lost (a
    trial). A hard link has no name or magic to see: the file itself is compared."""
    import sqlite3

    from nexus import sessions

    folder = sessions.sessions_dir()
    folder.mkdir(parents=True, exist_ok=True)
    mine, other = tmp_path / "mine.db", folder / "other.db"
    held = []
    for db in (mine, other):
        con = sqlite3.connect(db)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE t (x)")
        con.execute("INSERT INTO t VALUES (1)")
        held.append(con)  # open: its -shm exists
    try:
        for n, source in enumerate([Path(f"{mine}-shm"), Path(f"{other}-shm")]):
            link = tmp_path / f"notes{n}.md"
            os.link(source, link)
            refusal = sessions.export_refusal(link, mine)
            assert refusal and "destroy" in refusal, (source, refusal)
        assert sessions.export_refusal(tmp_path / "fresh.md", mine) is None
        # a new name in the sessions folder: refused, without saying a session is there
        new = sessions.export_refusal(folder / "notes.db", mine)
        assert new and "never written there" in new and "destroy" not in new
    finally:
        for con in held:
            con.close()


async def test_a_name_too_long_for_the_file_system_is_said_in_words(server, tmp_path, minilm, data_dir):
    """/open, /delete, /repair, /load and /ingest of a 300-character name showed
    "[Errno 36] File name too long: '<the 300 characters>'" (a trial)."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    long = "x" * 300
    async with app.run_test(size=(160, 50)) as pilot:
        await ready(app, pilot)
        for n, command in enumerate(("open", "delete", "repair", "load", "ingest"), 1):
            await type_and_send(pilot, app, f"/{command} {long}")
            await wait_for(pilot, lambda n=n: notices(app).count("(the name is too long)") == n)
        said = notices(app)
        assert "[Errno" not in said and long not in said and "…" in said


async def test_load_of_an_export_says_it_is_one(server, tmp_path, minilm, data_dir):
    """/load of the Markdown /export had just written said "is not valid JSON (truncated
    or corrupt?)" (a trial): it says what the file is, and what /load takes."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        out = tmp_path / "talk.md"
        await type_and_send(pilot, app, f"/export {out}")
        await wait_for(pilot, lambda: out.exists())
        await type_and_send(pilot, app, f"/load {out}")
        await wait_for(pilot, lambda: "it is an /export, Markdown to read" in notices(app))
        assert "corrupt" not in notices(app)


async def test_load_of_a_session_file_says_how_to_open_it(server, tmp_path, minilm, data_dir):
    """/load of a session's .db said "is not a text file (not a TRACE JSON export)" and no
    way to what it holds (a trial)."""
    other = sessions.resolve("old trip")
    make_session(other, minilm, 1)
    elsewhere = tmp_path / "my notes" / "kept.db"
    elsewhere.parent.mkdir()
    make_session(elsewhere, minilm, 1)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"/load {other}")
        await wait_for(pilot, lambda: "it is a SQLite database (a session file?), not an export; /open old-trip "
                       "opens it" in notices(app))
        await type_and_send(pilot, app, f"/load {elsewhere}")
        await wait_for(pilot, lambda: f"nexus --session '{elsewhere}' opens it" in notices(app))
        assert "not a text file" not in notices(app)
        assert not any(p.name.startswith("kept") for p in sessions.sessions_dir().iterdir())  # nothing imported


async def test_a_new_session_says_when_the_last_one_is_gone(server, tmp_path, minilm, data_dir):
    """/rename, then the terminal closed at once: the pointer still named the old file,
    and the next start opened an empty session with no word (trial)."""
    server.respond(chat_reply("ok"))
    sessions.sessions_dir().mkdir(parents=True, exist_ok=True)
    gone = sessions.sessions_dir() / "session-20261205-233146.db"
    sessions.remember(gone)
    assert sessions.vanished_last_session() == gone
    path = sessions.resolve(None)
    assert path != gone and not path.exists()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "Your last session, session-20261205-233146, is no longer at" in notices(app))
        assert "this is a new session. /sessions lists the others" in notices(app)
    assert sessions.vanished_last_session() is None  # the new one is remembered now
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert "is no longer at" not in notices(app)


async def test_notes_about_unanswered_messages_say_what_is_so_after_each_answer(server, tmp_path, minilm, data_dir):
    """After Ctrl+R got its answer, "2 more messages wait without an answer: Ctrl+R sends the
    next once this one is answered" stayed under that answer; a kept message typed again
    and answered stayed marked "not answered" above (trial)."""
    from nexus.chat import UNSENT_KEY
    from nexus.replies import UNSENT_STATE

    server.respond(chat_reply("Noted."))
    path = sessions.resolve("three")
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.vdb.set_meta(UNSENT_KEY, json.dumps(["First?", "Second?", "Third?"]))
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "3 messages above" in notices(app))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1 and app.turn is None)
        await pilot.pause()
        said = notices(app)
        assert "once this one is answered" not in said and "2 more messages wait without an answer: Ctrl+R sends " \
            "the next." in said
        await type_and_send(pilot, app, "Third?")  # typed again, not resent
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2 and app.turn is None)
        await pilot.pause()
        assert [m.text for m in app.query(UserMessage) if m.state == UNSENT_STATE] == ["Second?"]
        assert app.session.kept == ["Second?"] and "1 message above has no answer yet" in notices(app)


async def test_a_pointer_that_cannot_be_written_does_not_stop_the_session(server, tmp_path, minilm, data_dir,
                                                                           monkeypatch):
    """last-session could not be written: "Cannot open the session: …/last-session cannot
    be used (permission denied)", and a message typed waited for ever (trial)."""
    def refuse(path):
        raise PermissionError(13, "Permission denied", str(data_dir / "last-session"))

    monkeypatch.setattr(sessions, "remember", refuse)
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "hello")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert "Cannot open the session" not in notices(app)
        from test_nexus_app import log_text

        assert "the next start may not resume this session" in log_text(app)


async def test_switching_away_from_an_empty_new_session_removes_it(server, tmp_path, minilm, data_dir):
    """Every /new left another empty 116 KiB session in /sessions (trial). One with an
    exchange, a message kept, or a name of its own stays."""
    server.respond(chat_reply("Noted."))
    first = sessions.resolve(None)
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert first.exists()
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != first
                       and app.embedder_state == "ready")
        await wait_for(pilot, lambda: not first.exists())
        assert f"{first.stem} stays" not in notices(app)  # it said so, and /open then found nothing (re-trial)
        second = app.session_path
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != second)
        await type_and_send(pilot, app, "/rename kept-empty")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem == "kept-empty")
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem != "kept-empty")
        await pilot.pause(0.5)
        names = {p.stem for p, _, _ in sessions.list_sessions()}
        assert names == {second.stem, "kept-empty", app.session_path.stem}  # the first went; the open one is there


async def test_what_a_killed_load_left_goes_at_the_next_start_and_is_said(server, tmp_path, minilm, data_dir):
    """kill -9 during /load left trip.db.importing and its -wal for good: unlisted, not
    deletable by name, and the next /load of trip.json was named trip-2 (a trial). An
    import another Nexus runs now (its lock held) stays."""
    from trace_core import VectorDatabase

    folder = sessions.sessions_dir()
    folder.mkdir(parents=True, exist_ok=True)
    child = ("import os, signal, sys; from trace_core import VectorDatabase; "
             "db = VectorDatabase(sys.argv[1]); db.set_meta('half', 'imported'); os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", child, str(folder / "trip.db.importing")], timeout=60)
    assert (folder / "trip.db.importing").exists() and (folder / "trip.db.importing.lock").exists()
    running = VectorDatabase(str(folder / "big.db.importing"))  # holds its writer lock
    try:
        app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            await wait_for(pilot, lambda: "An unfinished /load (trip), stopped when Nexus was, was removed"
                           in notices(app))
            assert not [p for p in folder.iterdir() if p.name.startswith("trip.db")]
            assert (folder / "big.db.importing").exists()
            assert sessions.imported_session_path(Path("trip.json")).name == "trip.db"
    finally:
        running.close()


async def test_a_rename_during_a_reply_waits_for_it_and_keeps_the_order(server, tmp_path, minilm, data_dir):
    """/rename while a reply streamed cancelled it, answered the message queued behind it
    first, then renamed (a trial): answers came in the reverse of the order asked."""
    from scripted_server import Reply

    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("an answer " * 15, chunk_delay=0.05))
    path = sessions.sessions_dir() / "running.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "What is a good pace for a 10 km run?")
        await wait_for(pilot, lambda: app.current_reply is not None and "answer" in app.current_reply.text)
        await type_and_send(pilot, app, "And how should I stretch after running?")
        await type_and_send(pilot, app, "/rename marathon")
        assert "/rename waits for the reply" in notices(app)
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem == "marathon"
                       and app.session.tree is not None, timeout=60)
        users = [x.user for x in app.session.tree.exchanges]
        assert users == ["What is a good pace for a 10 km run?", "And how should I stretch after running?"]
        assert "[reply cancelled]" not in app.session.tree.exchanges[0].assistant
        assert app.session.kept == []
        await pilot.press("ctrl+q")


async def test_a_session_file_renamed_outside_nexus_is_followed_and_a_deleted_one_refuses(server, tmp_path, minilm,
                                                                                          data_dir):
    """Renamed in a file manager while open, the session went on "remembering" into a log
    under the old name that the renamed file never read (the renamed file opened without
    the exchanges); deleted, each message was said remembered into a file already gone."""
    server.respond(chat_reply("Noted."))
    first = sessions.resolve("trip")
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sister lives in Köln.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        renamed = first.with_name("Köln trip.db")
        first.rename(renamed)
        await type_and_send(pilot, app, "My bike is red.")
        await wait_for(pilot, lambda: "was renamed outside Nexus, to Köln trip.db" in notices(app))
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None
                       and len(app.session.tree.exchanges) == 2)
        assert app.session_path == renamed and sessions.last_session() == renamed
        assert [x.user for x in app.session.tree.exchanges] == ["My sister lives in Köln.", "My bike is red."]
        renamed.unlink()
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: "was deleted or moved away outside Nexus" in notices(app))
        assert app.query_one("#prompt").text == "My cat is called Miso."  # given back, not said remembered
        assert len(app.session.tree.exchanges) == 2
        app.query_one("#prompt").text = ""
        await type_and_send(pilot, app, f"/save {tmp_path / 'kept.json'}")  # what the notice offers works
        await wait_for(pilot, lambda: "Saved the tree to" in notices(app))
    assert sorted(p.name for p in sessions.sessions_dir().iterdir()) == []  # nothing made again under a name
    assert [x.user for x in CTree.load(str(tmp_path / "kept.json"), embed_fn=minilm).exchanges] == \
        ["My sister lives in Köln.", "My bike is red."]


async def test_a_session_file_renamed_during_a_reply_keeps_the_exchange_for_ctrl_r_under_the_new_name(
        server, tmp_path, minilm, data_dir):
    from tests.scripted_server import Reply

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("Noted, a red bike.", chunk_delay=0.3)

    server.respond(respond)
    first = sessions.resolve("trip")
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My bike is red.")
        await wait_for(pilot, lambda: app.current_reply is not None)
        await type_and_send(pilot, app, "And my car?")  # queued behind it
        renamed = first.with_name("bikes.db")
        first.rename(renamed)
        await wait_for(pilot, lambda: "This exchange could not be stored: the session file was renamed, moved or "
                       "deleted while open (outside Nexus)" in notices(app))
        # the queued message is said as the file's problem ("is closed (tree.close() …)": a trial)
        await wait_for(pilot, lambda: "No reply: the session file could not be opened again (it was renamed, moved "
                       "or deleted outside Nexus)" in notices(app))
        assert "tree.close()" not in notices(app)
        assert not first.exists()  # no empty session made again under the old name
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None
                       and [x.user for x in app.session.tree.exchanges] == ["My bike is red."])
        assert app.session_path == renamed and "renamed outside Nexus, to bikes.db" in notices(app)
        assert app.session.kept == ["And my car?"]  # still there for Ctrl+R, under the new name
    assert not first.exists() and not Path(f"{first}.unstored.json").exists()


async def test_a_session_of_another_embedder_is_refused_before_the_open_one_closes(server, tmp_path, minilm,
                                                                                   hash_embed, data_dir):
    """/open of a session built with another embedder closed the open session first, then
    could not open the other: no session was open, though /open promises the open one stays."""
    server.respond(chat_reply("Noted."))
    other = sessions.resolve("other")
    make_session(other, hash_embed, 2)
    before = other.read_bytes()
    first = sessions.resolve("first")
    app = NexusApp(make_config(server.base_url, tmp_path), first, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My bike is a blue Gazelle.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/open other")
        await wait_for(pilot, lambda: "Cannot open other" in notices(app))
        assert f"was built with the embedder {hash_embed.name}; the embedder now configured is " \
               "all-MiniLM-L6-v2" in notices(app)
        assert "left untouched; first stays open" in notices(app)
        assert app.session is not None and app.session_path == first
        await type_and_send(pilot, app, "Still here?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
    assert other.read_bytes() == before


async def test_a_session_named_outside_nexus_opens_repairs_and_deletes_by_its_name(server, tmp_path, minilm,
                                                                                   data_dir):
    """"Reise 2027.db", renamed in a file manager: /sessions listed it and /new said "stays:
    /open Reise 2027", which answered "No session named" (the name was looked up as /rename
    writes it, Reise-2027), and /repair with the name was a bare usage line (a trial)."""
    server.respond(chat_reply("Noted."))
    own = sessions.sessions_dir() / "Reise 2027.db"
    make_session(own, minilm, 2)
    assert sessions.resolve("Reise 2027") == own  # --session "Reise 2027" too (it made a new Reise-2027)
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("first"), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/open Reise 2027")
        await wait_for(pilot, lambda: app.session is not None and app.session_path == own
                       and app.session.tree is not None)
        assert len(app.session.tree.exchanges) == 2
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != own
                       and app.session.tree is not None)
        await type_and_send(pilot, app, "/repair Reise 2027")
        await wait_for(pilot, lambda: "Reise 2027 passes the file check: nothing to repair." in notices(app))
        await type_and_send(pilot, app, "/delete Reise 2027")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        await type_and_send(pilot, app, "/delete Reise 2027")
        await wait_for(pilot, lambda: "Deleted Reise 2027." in notices(app))
    assert not own.exists() and "No session named" not in notices(app)

"""What the user was shown as kept is kept on disk, whatever ends Nexus: an answered
exchange the session file refused waits beside it for the next start; a message being
answered is in the file before the model is asked; a memory model that answers a web
page is a memory-model failure (the embedding judge decides), not a lost exchange.
Pilot tests against the scripted server (real HTTP, real openai client)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_server import Reply
from test_nexus_app import chat_reply, log_text, make_config, notices, ready, type_and_send, wait_for
from test_nexus_turn import chat_only

from nexus import parked
from nexus.app import NexusApp
from nexus.chat import load_kept
from trace_core import CTree
from trace_core.store import VectorDatabase


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def stored_users(path, minilm) -> list[str]:
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding", read_only=True)
    try:
        return [x.user for x in tree.exchanges]
    finally:
        tree.vdb.close()


async def test_an_exchange_the_file_refused_survives_quitting_and_is_stored_at_the_next_start(
        server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Kept safe."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "first, stored normally")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        await type_and_send(pilot, app, "second, the store fails")
        await wait_for(pilot, lambda: "could not be stored" in notices(app))
        assert [(u, r.strip()) for u, r in parked.read_unstored(path)] == [("second, the store fails", "Kept safe.")]
        await pilot.press("ctrl+q")  # not stored again before quitting: it waits beside the file
    assert stored_users(path, minilm) == ["first, stored normally"]
    assert load_kept_of(path) == []  # an answered exchange, not an unanswered message
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "Stored 1 answered exchange" in notices(app))
        assert [x.user for x in app.session.tree.exchanges] == ["first, stored normally", "second, the store fails"]
        assert not parked.unstored_path(path).exists() and not app.session.unstored
        assert len([r for r in server.chat_requests() if not r.get("response_format")]) == 2  # not asked again
        await pilot.press("ctrl+q")


async def test_an_exchange_no_file_could_take_holds_the_first_quit_and_is_printed_by_the_second(
        server, tmp_path, minilm, data_dir, capsys):
    """A full disk: the session file and the file beside it both refuse. "Kept here" read as
    safe and a /quit lost the exchange without a word (a trial)."""
    server.respond(chat_reply("Kept safe."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        blocker = parked.unstored_path(path).with_name(parked.unstored_path(path).name + ".tmp")
        blocker.mkdir()  # ... and so does the file beside it (a folder where its draft goes)
        await type_and_send(pilot, app, "My bike is a green Brompton.")
        await wait_for(pilot, lambda: "it is only in this window" in notices(app))
        refuse = "PRAGMA query_only = ON"  # again: a failed store opens the file anew
        app.session.tree.vdb.con.execute(refuse)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: "Not quitting yet: 1 answered exchange is only in this window" in notices(app))
        assert app.is_running
        # space freed (the failed try opened the file anew): the next quit stores it first, then goes
        await pilot.press("ctrl+q")
    assert stored_users(path, minilm) == ["My bike is a green Brompton."]
    assert app.lost_at_exit == []

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "t.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")
        parked.unstored_path(tmp_path / "t.db").with_name("t.db.unstored.json.tmp").mkdir()
        await type_and_send(pilot, app, "My car is red.")
        await wait_for(pilot, lambda: "it is only in this window" in notices(app))
        app.session.tree.vdb.con.execute(refuse)
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: "Not quitting yet" in notices(app))
        app.session.tree.vdb.con.execute(refuse)
        await pilot.press("ctrl+q")  # again within 30 s: leave anyway
    assert [(u, r.strip()) for u, r in app.lost_at_exit] == [("My car is red.", "Kept safe.")]
    from nexus.__main__ import print_lost

    print_lost(app.lost_at_exit)
    assert "You: My car is red.\nAssistant: Kept safe." in capsys.readouterr().err
    assert not list(tmp_path.glob("*.unstored.json.tmp.*"))


async def test_a_message_without_an_answer_the_file_could_not_keep_holds_the_first_quit(
        server, tmp_path, minilm, data_dir, capsys):
    """A full disk, a failed reply: the message "kept — Ctrl+R sends it again" was in
    memory only, and the first /quit lost it (a trial)."""
    server.respond(chat_only(lambda req: Reply("", status=500)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")
        await type_and_send(pilot, app, "The shed code is Grommlet 7790.")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["The shed code is Grommlet 7790."])
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: "Not quitting yet: 1 message without an answer is only in this window"
                       in notices(app))
        app.session.tree.vdb.con.execute("PRAGMA query_only = OFF")  # space freed: the next quit keeps it
        await pilot.press("ctrl+q")
    assert load_kept_of(path) == ["The shed code is Grommlet 7790."] and app.lost_at_exit == []


def load_kept_of(path) -> list[str]:
    db = VectorDatabase(str(path), read_only=True)
    try:
        return load_kept(db)
    finally:
        db.close()


async def test_the_message_being_answered_is_in_the_file_before_the_model_answers(server, tmp_path, minilm,
                                                                                   data_dir):
    """kill -9 mid-reply cannot be caught: what a killed Nexus leaves is what the file
    holds while the reply streams."""
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("slowly, word by word, the answer comes", chunk_delay=0.3)

    server.respond(respond)
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Will this survive a kill?")
        await wait_for(pilot, lambda: app.current_reply is not None and "slowly" in app.current_reply.text)
        assert load_kept_of(path) == ["Will this survive a kill?"]  # a reader of the file now: the restart
        assert app.session.kept == []  # not for Ctrl+R while it is being answered
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        # stored: the unsent row lets it go (written just after the exchange: CI saw the moment between)
        await wait_for(pilot, lambda: load_kept_of(path) == [])
        await pilot.press("ctrl+q")


async def test_a_memory_model_answering_a_web_page_falls_back_and_the_exchange_is_stored(server, tmp_path, minilm,
                                                                                          data_dir):
    page = "<html><body><h1>Welcome to nginx!</h1></body></html>"

    def respond(req):
        if not req.get("stream"):  # the memory model's calls: a proxy's page with HTTP 200
            return Reply(body=page)
        return Reply("Noted.", chunk_delay=0.0)

    server.respond(respond)
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path, {("memory", "judge"): "llm"}), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sister Alma lives in Lisbon.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "She works as a marine biologist.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert "could not be stored" not in notices(app)
        assert "answered a web page, not a completion: Welcome to nginx!" in log_text(app)
        await pilot.press("ctrl+q")
    assert stored_users(path, minilm) == ["My sister Alma lives in Lisbon.", "She works as a marine biologist."]


async def test_an_export_and_a_save_carry_the_messages_with_no_answer_and_load_brings_the_session_back(
        server, tmp_path, minilm, data_dir):
    """/save then /load lost the system prompt, the sampling settings and the messages
    with no answer ("the whole session", the README says of an export: a trial)."""
    answers = iter([Reply("Noted: Ana lives in Porto."), Reply(status=500, error="model crashed")])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format") else next(answers))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sister Ana lives in Porto.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "Should pods have memory requests equal to limits?")
        await wait_for(pilot, lambda: "No reply" in notices(app))
        await type_and_send(pilot, app, "/system Always answer in French.")
        await type_and_send(pilot, app, "/set temperature 0.2")
        await wait_for(pilot, lambda: app.session.settings.temperature == 0.2)
        out = tmp_path / "out.md"
        await type_and_send(pilot, app, f"/export {out}")
        await wait_for(pilot, lambda: "Exported 1 exchange and 1 message with no answer" in notices(app))
        saved = tmp_path / "trip.json"
        await type_and_send(pilot, app, f"/save {saved}")
        await wait_for(pilot, lambda: "Saved the tree and 1 message with no answer to" in notices(app))
        await type_and_send(pilot, app, f"/load {saved}")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem == "trip"
                       and app.session.tree is not None, timeout=40)
        s = app.session
        assert [x.user for x in s.tree.exchanges] == ["My sister Ana lives in Porto."]
        assert s.settings.system == "Always answer in French." and s.settings.temperature == 0.2
        assert s.kept == ["Should pods have memory requests equal to limits?"]
        await wait_for(pilot, lambda: "1 message above has no answer yet" in notices(app))
    text = out.read_text()
    assert "## Not answered" in text and "Should pods have memory requests equal to limits?" in text
    assert "1 exchange · 1 message with no answer" in text


async def test_an_exchange_stored_at_start_is_no_unanswered_message_and_is_shown(server, tmp_path, minilm, data_dir):
    """The disk stopped taking writes mid-reply: the message was already in the unsent row,
    and the answered exchange waited beside the file. At the next start it was stored — and
    also shown "not answered", so Ctrl+R stored it twice; and the chat, drawn from the file
    first, left the stored exchange out until the session was opened again (trial)."""
    from nexus.chat import UNSENT_KEY
    from nexus.widgets import PastExchangeView, UserMessage

    server.respond(chat_reply("A new answer."))
    path = tmp_path / "s.db"
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    tree.add([{"role": "user", "content": "first, stored normally"}, {"role": "assistant", "content": "Yes."}])
    tale = "Tell me a long tale about three brothers."
    tree.vdb.set_meta(UNSENT_KEY, json.dumps([tale]))  # held while it was answered; never let go
    tree.vdb.close()
    parked.keep_unstored(path, [(tale, "Once there were three brothers.")])
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "Stored 1 answered exchange" in notices(app))
        await wait_for(pilot, lambda: len(app.query(PastExchangeView)) == 2)
        assert [v.exchange.user for v in app.query(PastExchangeView)] == ["first, stored normally", tale]
        assert app.session.kept == [] and "no answer yet" not in notices(app)
        assert not [m for m in app.query(UserMessage) if m.text == tale]
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        await pilot.press("ctrl+q")
    assert stored_users(path, minilm) == ["first, stored normally", tale]
    assert load_kept_of(path) == []


async def test_two_queued_messages_with_the_same_words_are_both_kept(server, tmp_path, minilm, data_dir):
    """Queued "ok" and "ok", then the terminal closed: one "ok" came back (trial)."""
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("a slow answer " * 30, chunk_delay=0.05))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "tell me something")
        await wait_for(pilot, lambda: app.turn is not None)
        for text in ("queued A", "ok", "ok"):
            await type_and_send(pilot, app, text)
        assert [o.text for o in app.outbox] == ["queued A", "ok", "ok"]
        await pilot.press("ctrl+q")
    assert load_kept_of(path)[-3:] == ["queued A", "ok", "ok"]


async def test_messages_queued_behind_a_reply_are_on_disk_as_they_are_queued(server, tmp_path, minilm, data_dir):
    """kill -9 while a reply streamed with two messages queued behind it: only the message
    being answered came back (a trial). What a killed Nexus leaves is what its files hold
    at that moment: a copy of them, opened by another Nexus, stands for the restart."""
    import shutil

    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("a slow answer " * 12, chunk_delay=0.1))
    path = tmp_path / "s.db"
    copy = tmp_path / "after-kill" / "s.db"
    copy.parent.mkdir()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "SLOW first: my bike lock code is 3321")
        await wait_for(pilot, lambda: app.current_reply is not None and "slow" in app.current_reply.text)
        assert not parked.queued_path(path).exists()  # a message sent at once writes no queue
        await type_and_send(pilot, app, "Queued second: my passport expires in May 2031")
        await type_and_send(pilot, app, "Queued third: dentist on Friday at 10")
        assert parked.read_queued(path) == ["Queued second: my passport expires in May 2031",
                                            "Queued third: dentist on Friday at 10"]
        for suffix in ("", "-wal", "-shm", ".queued.json"):
            if Path(f"{path}{suffix}").exists():
                shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 3, timeout=60)
        await wait_for(pilot, lambda: app.turn is None)
        assert not parked.queued_path(path).exists()  # all answered: the queue's file goes
        await pilot.press("ctrl+q")
    assert load_kept_of(path) == []
    app = NexusApp(make_config(server.base_url, tmp_path), copy, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "3 messages above have no answer yet" in notices(app))
        assert app.session.kept == ["SLOW first: my bike lock code is 3321",
                                    "Queued second: my passport expires in May 2031",
                                    "Queued third: dentist on Friday at 10"]
        assert not parked.queued_path(copy).exists()  # taken into the session file
        await pilot.press("ctrl+q")
    assert len(load_kept_of(copy)) == 3


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


async def test_messages_typed_while_the_session_opens_are_on_disk_as_they_are_typed(server, tmp_path, minilm,
                                                                                     data_dir):
    """kill -9 while --local started its model (10–20 s, the session not open yet): the
    messages typed meanwhile were only in memory (a clean exit parked them). Each is in a
    file of this process beside the session as it is typed; what a killed Nexus leaves
    (a copy of its files) is taken by the next open, unanswered, for Ctrl+R."""
    import shutil

    from nexus.local_model import LocalModel
    from trace_core.local_llm import LocalLLMServer

    path = tmp_path / "s.db"
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    tree.add([{"role": "user", "content": "My sister Ana lives in Porto."}, {"role": "assistant", "content": "Noted."}])
    tree.close()
    local = LocalModel(LocalLLMServer(model=str(tmp_path / "never-started.gguf")))  # not begun: the session waits
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm, local_model=local)
    copy = tmp_path / "after-kill" / "s.db"
    copy.parent.mkdir()
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.session_path == path)
            for text in ("My locker code is 4412", "and the gym opens at 6"):
                await type_and_send(pilot, app, text)
            assert app.session is None
            assert json.loads(parked.opening_path(path).read_text()) == ["My locker code is 4412",
                                                                        "and the gym opens at 6"]
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{path}{suffix}").exists():
                    shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
            shutil.copyfile(parked.opening_path(path), parked.opening_path(copy, _dead_pid()))
            await pilot.press("ctrl+q")
    finally:
        local.stop()
    assert not parked.opening_path(path).exists()  # parked by the clean exit instead
    assert load_kept_of(path) == [] and parked.read(path) == ["My locker code is 4412", "and the gym opens at 6"]
    # a running Nexus's own file is not taken by another
    import subprocess
    import sys

    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        parked.opening_path(copy, alive.pid).write_text(json.dumps(["still being typed elsewhere"]))
        app = NexusApp(make_config(server.base_url, tmp_path), copy, embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            await wait_for(pilot, lambda: "2 messages above have no answer yet" in notices(app))
            assert app.session.kept == ["My locker code is 4412", "and the gym opens at 6"]
            await pilot.press("ctrl+q")
        assert [p.name for p in parked.opening_files(copy)] == [f"s.db.opening-{alive.pid}.json"]
    finally:
        alive.kill()
    assert load_kept_of(copy) == ["My locker code is 4412", "and the gym opens at 6"]


async def test_export_and_save_during_a_reply_keep_the_message_being_answered(server, tmp_path, minilm, data_dir):
    """/export while a reply streamed left out the message being answered, and /save said
    "1 message with no answer" of a file holding 2 (a trial)."""
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("a slow answer " * 40, chunk_delay=0.05))
    path = tmp_path / "s.db"
    out = tmp_path / "out"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Remember: my locker number is 317.")
        await wait_for(pilot, lambda: app.current_reply is not None and "slow" in app.current_reply.text)
        await type_and_send(pilot, app, f"/export {out}/during.md")
        await wait_for(pilot, lambda: "Exported" in notices(app))
        assert "Exported 0 exchanges and 1 message with no answer" in notices(app)
        await type_and_send(pilot, app, f"/save {out}/during.json")
        await wait_for(pilot, lambda: "Saved the tree and 1 message with no answer" in notices(app))
        await pilot.press("ctrl+q")
    text = (out / "during.md").read_text()
    assert "## Not answered" in text and "my locker number is 317" in text
    saved = json.loads((out / "during.json").read_text())
    assert "Remember: my locker number is 317." in json.dumps(saved)


async def test_a_message_after_the_file_could_not_be_opened_again_says_why_in_words(
        server, tmp_path, minilm, data_dir, monkeypatch):
    """A full disk: after a failed store the file could not be opened again, and each next
    message got "No reply: …/s.db: is closed (tree.close() or tree.vdb.close()): could not
    read its memory; CTree.open opens it again. Your message is kept" — the library's words,
    and "kept" for a message the file had refused too (a trial on a full tmpfs)."""
    from nexus import chat
    from trace_core import SessionFileError

    server.respond(chat_reply("Kept safe."))
    path = tmp_path / "s.db"
    real_open, full = chat.CTree.open, []

    def open_unless_full(*args, **kwargs):
        if full:  # as SQLite said it on the full tmpfs
            raise SessionFileError(str(path), "cannot be used as a session: database or disk is full")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(chat.CTree, "open", open_unless_full)
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        full.append(True)
        await type_and_send(pilot, app, "first, the store fails")
        await wait_for(pilot, lambda: "could not be stored" in notices(app))
        await wait_for(pilot, lambda: app.turn is None and app.session.tree.closed)
        await type_and_send(pilot, app, "second, after it")
        await wait_for(pilot, lambda: "No reply: the session file could not be opened again (the disk is full), so "
                       "its memory cannot be read: nothing was sent to the model. Your message is kept in this "
                       "window only" in notices(app))
        assert "tree.close()" not in notices(app)
        assert len([r for r in server.chat_requests() if not r.get("response_format")]) == 1
        assert app.session.kept == ["second, after it"]
        rescue = tmp_path / "rescue.json"  # what the notices offer works with the file closed
        await type_and_send(pilot, app, f"/save {rescue}")
        await wait_for(pilot, lambda: "Saved the tree and 1 message with no answer and 1 answered exchange the "
                       "session file could not take yet" in notices(app))
        meta = json.loads(rescue.read_text())["meta"]
        assert json.loads(meta["nexus.unsent"]) == ["second, after it"]
        assert [u for u, _ in json.loads(meta["nexus.unstored"])] == ["first, the store fails"]
        full.clear()  # space freed: the quit opens the file again and keeps the message there
        await pilot.press("ctrl+q")
    assert stored_users(path, minilm) == ["first, the store fails"] and load_kept_of(path) == ["second, after it"]


async def test_save_and_export_hold_what_only_this_window_holds_and_load_brings_it_back(
        server, tmp_path, minilm, data_dir):
    """A full disk: /save said "Saved the tree and 1 message with no answer", and its JSON
    held neither that message (it read the file's row, which the disk had refused) nor the
    answered exchange the file could not take; /export left them out too (a trial)."""
    from test_nexus_turn import user_of

    server.respond(chat_only(lambda req: Reply("", status=500) if "Grommlet" in user_of(req)
                             else Reply("Noted, a green Brompton.")))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        await type_and_send(pilot, app, "My bike is a green Brompton.")
        await wait_for(pilot, lambda: "could not be stored" in notices(app) and app.turn is None
                       and not app.session.tree.closed)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")  # still full (the store opened it anew)
        await type_and_send(pilot, app, "The shed code is Grommlet 7790.")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["The shed code is Grommlet 7790."])
        assert app.session.only_here()  # the file has neither
        saved, md = tmp_path / "kept.json", tmp_path / "kept.md"
        await type_and_send(pilot, app, f"/save {saved}")
        await wait_for(pilot, lambda: "Saved the tree and 1 message with no answer and 1 answered exchange the "
                       "session file could not take yet" in notices(app))
        await type_and_send(pilot, app, f"/export {md}")
        await wait_for(pilot, lambda: "Exported 0 exchanges and 1 message with no answer and 1 answered exchange "
                       "the session file could not take yet" in notices(app))
        text = md.read_text()
        assert "## Answered, not stored yet" in text and "Noted, a green Brompton." in text
        assert "Grommlet 7790" in text
        app.session.tree.vdb.con.execute("PRAGMA query_only = OFF")
        await type_and_send(pilot, app, f"/load {saved}")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem == "kept"
                       and app.session.tree is not None)
        assert [(x.user, x.assistant.strip()) for x in app.session.tree.exchanges] == \
            [("My bike is a green Brompton.", "Noted, a green Brompton.")]
        assert app.session.kept == ["The shed code is Grommlet 7790."]
        assert app.session.tree.vdb.get_meta("nexus.unstored") is None


async def test_a_switch_away_from_what_only_this_window_holds_asks_first(server, tmp_path, minilm, data_dir):
    """A full disk, a failed reply: the message "kept in this window only" was lost without
    a word by /new (only a quit asked first)."""
    from nexus import sessions

    server.respond(chat_only(lambda req: Reply("", status=500)))
    path = tmp_path / "s.db"
    sessions.resolve("other").write_bytes(b"")
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")
        await type_and_send(pilot, app, "The shed code is Grommlet 7790.")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["The shed code is Grommlet 7790."])
        for command in ("/new", "/open other", "/rename shed"):
            await type_and_send(pilot, app, command)
            said = (f"Not done yet: 1 message without an answer is only in this window — the session file could "
                    f"not be written — and closing s for {command.split()[0]} would lose it")
            await wait_for(pilot, lambda said=said: said in notices(app))
        assert app.session is not None and app.session_path == path and path.exists()
        await type_and_send(pilot, app, "/new")  # again within 30 s: it goes
        await wait_for(pilot, lambda: app.session is not None and app.session_path != path
                       and app.session.tree is not None)

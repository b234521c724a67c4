"""Text typed in the input and not sent survives Nexus closing: it is in the input again
at the next start (Pilot tests against the scripted server; the terminal's ways out —
Ctrl+Q, /quit, SIGHUP, SIGTERM — are in test_nexus_leave.py)."""

from __future__ import annotations

import pytest
from test_nexus_app import chat_reply, make_config, notices, ready, wait_for

from nexus.app import NexusApp
from nexus.draft import SAVE_DELAY, DraftStore
from nexus.widgets import PromptInput


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def new_app(server, tmp_path, minilm, **kw) -> NexusApp:
    return NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm, **kw)


async def test_unsent_text_is_in_the_input_after_a_restart_and_forgotten_once_sent(server, tmp_path, minilm,
                                                                                   data_dir):
    server.respond(chat_reply("Noted."))
    draft = "Half a thought about the\nsecond line of it"
    app = new_app(server, tmp_path, minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = draft
        await pilot.press("ctrl+q")
    path = data_dir / "draft.txt"
    assert path.read_text(encoding="utf-8") == draft
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # what was typed is as private as the sessions

    app = new_app(server, tmp_path, minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        prompt = app.query_one("#prompt", PromptInput)
        await pilot.pause()  # right after the first frame (keys typed before it come first)
        assert prompt.text == draft  # with the first frames, not waiting for the session
        await ready(app, pilot)
        # said, as the one put one ↑ away is: a message typed at once was glued to it
        # unseen ("…quicklyHello, is anyone there?" went to the model, in a trial)
        assert "The text you had not sent when Nexus last closed is back in the input" in notices(app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].user == draft
        assert not path.exists()  # sent: no longer a draft

    app = new_app(server, tmp_path, minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert app.query_one("#prompt", PromptInput).text == ""


async def test_the_draft_is_saved_a_moment_after_typing_without_quitting(server, tmp_path, minilm, data_dir):
    """A crash (or a kill) after a pause loses nothing typed before it."""
    server.respond(chat_reply("Noted."))
    app = new_app(server, tmp_path, minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press(*"typed slowly")
        await pilot.pause(SAVE_DELAY + 0.5)
        assert (data_dir / "draft.txt").read_text(encoding="utf-8") == "typed slowly"
        await pilot.press(*" and more")
        await pilot.pause(SAVE_DELAY + 0.5)
        assert (data_dir / "draft.txt").read_text(encoding="utf-8") == "typed slowly and more"


async def test_quitting_while_up_shows_an_earlier_prompt_keeps_the_draft_not_the_prompt(server, tmp_path, minilm,
                                                                                     data_dir):
    server.respond(chat_reply("Noted."))
    app = new_app(server, tmp_path, minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "an earlier question"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await pilot.press(*"my draft", "up")
        assert prompt.text == "an earlier question"
        await pilot.press("ctrl+q")
    assert (data_dir / "draft.txt").read_text(encoding="utf-8") == "my draft"


async def test_typing_at_the_first_screen_is_not_overwritten_by_the_draft(server, tmp_path, minilm, data_dir):
    """Type-ahead wins the input; the draft waits one ↑ away, and a notice says so."""
    server.respond(chat_reply("Noted."))
    DraftStore(data_dir / "draft.txt").save("yesterday's unsent words")
    app = new_app(server, tmp_path, minilm, typeahead="typed before it started")
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        assert prompt.text == "typed before it started"
        assert "one ↑ away" in notices(app)
        await pilot.press("up")
        assert prompt.text == "yesterday's unsent words"


async def test_ctrl_q_typed_before_the_first_screen_quits_and_keeps_the_text(server, tmp_path, minilm, data_dir):
    """Ctrl+Q typed while Python started (read with the type-ahead, before the app read
    the keys) was dropped: Nexus came up and stayed (a trial). It quits, as the key would
    have once on screen, and what was typed before it is kept with the saved draft."""
    DraftStore(data_dir / "draft.txt").save("OLD DRAFT")
    app = new_app(server, tmp_path, minilm, typeahead="NEW\x11")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: not app.is_running, 20)
    assert app.return_code == 0
    kept = loaded(data_dir / "draft.txt")
    assert kept.count("OLD DRAFT") == 1 and kept.count("NEW") == 1, kept


def loaded(path) -> str:
    """What a window that opens now and closes again finds."""
    store = DraftStore(path)
    try:
        return store.load()
    finally:
        store.close()


def test_draft_store_bad_files_and_an_unwritable_dir(tmp_path):
    path = tmp_path / "draft.txt"
    path.write_bytes(b"\xff\xfe not utf-8 \x80")
    assert loaded(path) == ""  # unreadable: an empty input, and Nexus starts
    store = DraftStore(path)
    assert store.save("kept") and loaded(path) == "kept"
    assert not (tmp_path / "draft.txt.tmp").exists()
    assert store.save("   ") and not path.exists()  # blank is no draft
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    assert DraftStore(blocked / "draft.txt").save("words") is False  # said in the log, never raised


def test_two_windows_keep_their_own_drafts_and_the_next_start_has_both(tmp_path):
    """A second Nexus open beside the first neither shows nor overwrites the first's draft;
    once both have closed, the next start has both texts, and the extra files are gone."""
    path = tmp_path / "draft.txt"
    first, second = DraftStore(path), DraftStore(path)
    assert first.load() == "" and first.save("typed in the first window")
    assert second.load() == ""  # not a copy of the first window's text
    assert second.save("typed in the second window") and second.path != path
    assert first.save("typed in the first window, and more")
    assert path.read_text(encoding="utf-8") == "typed in the first window, and more"

    third = DraftStore(path)  # opened while both are still open: it adopts nothing
    assert third.load() == ""
    assert second.path.read_text(encoding="utf-8") == "typed in the second window"
    third.close()

    first.close()
    second.close()
    again = DraftStore(path)
    assert again.load() == "typed in the first window, and more\n\ntyped in the second window"
    assert path.read_text(encoding="utf-8") == again.load()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft.txt", "draft.txt.lock"]
    again.close()


async def test_commands_typed_before_the_first_screen_run_in_the_order_typed(server, tmp_path, minilm, data_dir):
    """A trial typed /stats, /retry, then a message, before the first screen: /stats was
    told "no session is open … type /new" (and /new made a second session), and /retry
    "a reply is on its way" — the message typed after it. Both wait for the session now,
    and /retry runs before the message typed after it."""
    from scripted_server import Reply

    from trace_core import CTree

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}])
    tree.vdb.close()
    answers = iter(["Green.", "Noted."])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(next(answers)))
    app = new_app(server, tmp_path, minilm, typeahead="/stats\n/retry\nAnd a fruit?\n")
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2 and app.turn is None)
        assert [(x.user, x.assistant) for x in app.session.tree.exchanges] == [
            ("Name a colour.", "Green."), ("And a fruit?", "Noted.")]
        said = notices(app)
        assert "needs a session" not in said and "on its way" not in said
        assert "sampling:" in said  # /stats ran


async def test_keys_typed_after_the_type_ahead_go_where_its_arrows_left_the_cursor(server, tmp_path, minilm,
                                                                                   data_dir):
    """"hello wrld" and ← ← ← typed before the first screen, "o" after it: "hello world"."""
    app = new_app(server, tmp_path, minilm, typeahead="hello wrld\x1b[D\x1b[D\x1b[D")
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("o")
        assert app.query_one("#prompt", PromptInput).text == "hello world"

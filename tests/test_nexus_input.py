"""Issue 12: the input editor, prompt history, completion, keys, palette (Pilot tests
against the scripted server; real SQLite sessions in tmp dirs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_server import Reply
from test_nexus_app import chat_reply, log_text, make_config, notices, ready, type_and_send, wait_for
from textual import events

from nexus.app import NexusApp
from nexus.completion import Completer
from nexus.config import ConfigError
from nexus.keys import ALL_KEYS, APP_KEYS, check_key, validate_keys
from nexus.prompt_history import PromptHistory
from nexus.widgets import (
    AssistantMessage,
    ChatScroll,
    EventLog,
    ExchangeHead,
    MemoryTree,
    PastExchangeView,
    PromptInput,
    UserMessage,
)

ROOT = Path(__file__).parent.parent


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def user_texts(app) -> list[str]:
    return [x.user for x in app.session.tree.exchanges]


async def test_enter_sends_shift_enter_and_ctrl_j_add_lines(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Got it."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        assert app.focused is prompt
        await pilot.press(*"one", "shift+enter", *"two", "ctrl+j", *"three")
        assert prompt.text == "one\ntwo\nthree"
        assert not list(app.query(UserMessage))  # nothing sent yet
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert user_texts(app) == ["one\ntwo\nthree"]
        assert prompt.text == ""
        # a bracketed paste keeps its lines (the terminal test does this through tmux)
        from textual import events

        app.post_message(events.Paste("line a\nline b\nline c"))  # as the driver posts a bracketed paste
        await pilot.pause(0.1)
        assert prompt.text == "line a\nline b\nline c"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert user_texts(app)[-1] == "line a\nline b\nline c"


async def test_up_and_down_recall_prompts_and_survive_a_restart(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("ok"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        for text in ["first question", "second\nin two lines"]:
            n = len(app.session.tree.exchanges)
            prompt.value = text
            await pilot.press("enter")
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        await pilot.press(*"draft")
        await pilot.press("up")
        assert prompt.text == "second\nin two lines"
        # the cursor is on the last line of a two-line prompt: ↑ moves it, ↓ on the last line recalls
        await pilot.press("up")
        assert prompt.text == "second\nin two lines" and prompt.cursor_location[0] == 0
        await pilot.press("up")
        assert prompt.text == "first question"
        await pilot.press("down")
        assert prompt.text == "second\nin two lines"
        prompt.move_cursor(prompt.document.end)
        await pilot.press("down")
        assert prompt.text == "draft"  # back to what was being typed
    history_file = data_dir / "prompt-history.jsonl"
    assert history_file.exists() and oct(history_file.stat().st_mode & 0o777) == "0o600"
    # a restart: the prompts are still there
    app2 = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app2.run_test(size=(120, 40)) as pilot:
        await ready(app2, pilot)
        prompt = app2.query_one("#prompt", PromptInput)
        await pilot.press("up")
        assert prompt.text == "second\nin two lines"
        await pilot.press("up", "up")  # to its first line, then the one before
        assert prompt.text == "first question"


def test_prompt_history_skips_a_torn_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('"one"\n"two"\n"thr')  # a crash mid-write
    h = PromptHistory(path)
    assert h.items == ["one", "two"]
    h.add("three")
    assert PromptHistory(path).items == ["one", "two", "three"]


def test_prompt_history_keeps_a_pasted_document_for_this_run_only(tmp_path):
    path = tmp_path / "h.jsonl"
    h = PromptHistory(path)
    h.add("short")
    pasted = "a long pasted log line\n" * 20_000  # 460 KB
    h.add(pasted)
    h.add("after")
    assert h.previous("") == "after" and h.previous("after") == pasted  # ↑ still finds it now
    assert PromptHistory(path).items == ["short", "after"]  # not a copy on disk
    assert path.stat().st_size < 100


def test_completer_commands_and_arguments(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photo.jpg").write_bytes(b"x")
    c = Completer(lambda: ["work-notes", "holiday"], lambda: ["qwen2.5-7b", "llama3.2"])
    assert c.complete("/reo") == ["/reorganize "]
    assert "/search " in c.complete("/se") and "/sessions " in c.complete("/se")
    assert c.complete("/open ho") == ["/open holiday "]
    assert c.complete("/model q") == ["/model qwen2.5-7b "]
    assert c.complete("/set t") == ["/set temperature ", "/set top_p "]
    found = c.complete(f"/ingest {tmp_path}/pho")
    assert found == [f"/ingest {tmp_path}/photo.jpg", f"/ingest {tmp_path}/photos{os.sep}"]
    assert c.complete("hello /reo") == [] and c.complete("/reo\nx") == []
    assert c.complete("/search --a") == ["/search --all "]  # flags too, then a space (it completed none)
    from nexus.completion import FLAGS
    from trace_core.scenarios import SCENARIOS

    assert [f for f in FLAGS["scenario"] if not f.startswith("-")] == list(SCENARIOS)
    assert c.complete("/scenario needle --k") == ["/scenario needle --keep "]
    # a folder with spaces, typed unquoted as /ingest, /export and /save take it: "g" then
    # Tab completed nothing inside "folder with space/" (trial)
    (tmp_path / "folder with space").mkdir()
    (tmp_path / "folder with space" / "green photo.png").write_bytes(b"x")
    assert c.complete(f"/ingest {tmp_path}/fol") == [f"/ingest {tmp_path}/folder with space{os.sep}"]
    assert c.complete(f"/export {tmp_path}/folder with space/g") == [
        f"/export {tmp_path}/folder with space/green photo.png"]


async def test_tab_completes_commands_sessions_models_and_paths(server, tmp_path, minilm, data_dir):
    server.state.models = ["alpha-model", "beta-model"]
    server.respond(chat_reply("ok"))
    img = tmp_path / "lighthouse.jpg"
    img.write_bytes(b"not read")
    from trace_core import CTree

    (data_dir / "sessions").mkdir(parents=True)
    CTree.open(str(data_dir / "sessions" / "garden-ideas.db"), judge="embedding", embed_fn=minilm).vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), data_dir / "sessions" / "garden-notes.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        await pilot.press(*"/reo", "tab")
        assert prompt.text == "/reorganize "
        prompt.value = ""
        await pilot.press(*"/open gar", "tab")
        assert prompt.text == "/open garden-ideas "  # not the open one (it was offered first)
        # several choices: on the border while Tab cycles them, gone once something else is typed
        prompt.value = ""
        await pilot.press(*"/s", "tab")
        assert prompt.border_subtitle and prompt.text.startswith("/s")
        await pilot.press("tab")
        assert prompt.border_subtitle
        prompt.value = ""
        await pilot.press(*"hello")
        assert prompt.border_subtitle == ""  # they stayed through later messages
        # model names: fetched once in the background, then completed from that cached list
        prompt.value = ""
        await pilot.press(*"/model be")
        await wait_for(pilot, lambda: app.models_cache == ["alpha-model", "beta-model"])
        await pilot.press("tab")
        assert prompt.text == "/model beta-model "
        listed = len([c for c in server.calls() if c == ("GET", "/v1/models")])
        prompt.value = "/model al"
        await pilot.press("tab")
        assert prompt.text == "/model alpha-model "
        assert len([c for c in server.calls() if c == ("GET", "/v1/models")]) == listed  # cached
        prompt.value = f"/ingest {tmp_path}/light"
        await pilot.press("tab")
        assert prompt.text == f"/ingest {img}"


def readme_keys() -> list[str]:
    """The keys the README's Keys table lists, as Textual key names."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Keys", 1)[1].split("\n###", 1)[0]
    names = {"ctrl": "ctrl", "shift": "shift", "enter": "enter", "esc": "escape", "tab": "tab", "←": "left",
             "→": "right", "↑": "up", "↓": "down"}
    keys = []
    for row in re.findall(r"^\| ([^|]+) \|", section, re.M):
        if row.strip() in ("key", "---"):
            continue
        for one in row.split("/"):
            one = one.strip().lower()
            if not one or "click" in one or "(" in one:  # mouse, or keys of another pane ("(tree pane)")
                continue
            keys.append("+".join(names.get(p.strip(), p.strip()) for p in one.split("+")))
    return keys


async def test_every_readme_key_works_with_the_input_focused(server, tmp_path, minilm, data_dir):
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        last = req["messages"][-1]["content"]
        if "count" in last:
            return Reply("", chunks=[f"word{i} " for i in range(300)], chunk_delay=0.03)
        return Reply("Here:\n\n```python\nprint('hi')\n```\n")

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    tested: set[str] = set()

    async def press(key: str) -> None:
        assert app.focused is prompt, f"the input lost focus before {key}"
        await pilot.press(key)
        tested.add(key)

    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        # Enter sends; Shift+Enter / Ctrl+J add lines (above); Tab completes
        await pilot.press(*"/sta")
        await press("tab")
        assert prompt.text == "/stats "
        await press("enter")
        await wait_for(pilot, lambda: "exchanges: 0" in notices(app))
        await pilot.press(*"a")
        await press("shift+enter")
        await press("ctrl+j")
        assert prompt.text == "a\n\n"
        prompt.value = "show me code"
        await press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        # Ctrl+K copies the last code block (the editor's own Ctrl+K would delete to the line end)
        prompt.value = "keep this text"
        prompt.move_cursor((0, 4))
        await press("ctrl+k")
        assert app.clipboard == "print('hi')\n" and prompt.text == "keep this text"
        # Ctrl+Y copies the last reply (the editor's would redo)
        await press("ctrl+y")
        assert app.clipboard.startswith("Here:") and "print('hi')" in app.clipboard
        prompt.value = ""
        # Ctrl+T / Ctrl+L show and hide the panes
        tree, log_pane = app.query_one("#tree"), app.query_one("#log")
        await press("ctrl+t")
        assert tree.display is False
        await press("ctrl+t")
        assert tree.display is True
        await press("ctrl+l")
        assert log_pane.display is False
        await press("ctrl+l")
        assert log_pane.display is True
        # Ctrl+← / Ctrl+→ resize the tree pane (the editor's would move by word)
        await pilot.pause(0.05)
        width = tree.outer_size.width
        await press("ctrl+right")
        await pilot.pause(0.05)
        assert tree.outer_size.width == width + 4
        await press("ctrl+left")
        await press("ctrl+left")
        await pilot.pause(0.05)
        assert tree.outer_size.width == width - 4
        # in a burst, before the layout caught up, each press counts (four widened it once: a trial)
        for _ in range(4):
            app.post_message(events.Key("ctrl+right", None))
        await pilot.pause(0.1)
        assert tree.outer_size.width == width + 12
        for _ in range(40):  # at most 120 columns, and the chat keeps 40 (a trial left it 20 of 140)
            await press("ctrl+right")
        await pilot.pause(0.05)
        assert app.size.width - tree.outer_size.width >= 40 and tree.outer_size.width > width
        widened = tree.outer_size.width
        # the terminal shrinks: the chat keeps its 40 columns (the pane kept its width, a trial);
        # it grows again: the pane gets its width back
        await pilot.resize_terminal(app.size.width - 30, app.size.height)
        await pilot.pause(0.2)
        assert app.size.width - tree.outer_size.width >= 40, (app.size.width, tree.outer_size.width)
        await pilot.resize_terminal(app.size.width + 30, app.size.height)
        await pilot.pause(0.2)
        assert tree.outer_size.width == widened
        # PageUp / PageDown scroll the chat (test_page_up_and_down_scroll_the_chat_while_typing), the text kept
        prompt.value = "a draft"
        await press("pageup")
        await press("pagedown")
        assert prompt.text == "a draft"
        # F7 selects the whole input: Backspace clears it
        prompt.value = "line one\nline two"
        await press("f7")
        await pilot.press("backspace")
        assert prompt.text == ""
        # Ctrl+G cycles the log level
        level = app.query_one(EventLog).level
        await press("ctrl+g")
        assert app.query_one(EventLog).level != level
        # Ctrl+R: nothing failed, nothing to resend — and says so
        await press("ctrl+r")
        await wait_for(pilot, lambda: "Nothing to resend." in notices(app))
        # Esc cancels a streaming reply, the partial text kept
        prompt.value = "count for me"
        await press("enter")
        await wait_for(pilot, lambda: app.current_reply is not None and "word3" in app.current_reply.text)
        await press("escape")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert "[reply cancelled]" in app.session.tree.exchanges[-1].assistant
        # Ctrl+C with nothing selected: how to quit (its own test covers a reply and a selection)
        await press("ctrl+c")
        await wait_for(pilot, lambda: "Ctrl+Q quits Nexus" in notices(app))
        # ↑ recalls the last prompt
        await press("up")
        assert prompt.text == "count for me"
        await press("down")
        assert prompt.text == ""
        # Ctrl+↑ selects a message, Ctrl+Y copies it, Ctrl+O (or Esc) comes back to the input
        await press("ctrl+up")
        assert isinstance(app.focused, AssistantMessage)
        await pilot.press("ctrl+up")
        assert isinstance(app.focused, UserMessage) and app.focused.text == "count for me"
        await pilot.press("ctrl+y")
        assert app.clipboard == "count for me"
        await pilot.press("ctrl+down")
        assert isinstance(app.focused, AssistantMessage)
        await pilot.press("ctrl+o")
        assert app.focused is prompt
        # Ctrl+B goes into the tree pane; Esc comes back
        await press("ctrl+b")
        assert app.focused is app.query_one(MemoryTree)
        await pilot.press("escape")
        assert app.focused is prompt
        tested.add("ctrl+down")
        tested.add("ctrl+o")
        await pilot.press("ctrl+up")
        await pilot.press("escape")
        assert app.focused is prompt
        # Ctrl+P opens the palette; Esc closes it (the app's Esc steps aside)
        await press("ctrl+p")
        await wait_for(pilot, lambda: len(app.screen_stack) == 2)
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
    tested.add("ctrl+q")  # below, in its own test (a fresh app: what it stores on the way out is turn's test)
    missing = [k for k in readme_keys() if k not in tested]
    assert not missing, f"README keys not exercised: {missing}"


async def test_after_reading_up_sending_brings_the_chat_back_to_its_end(server, tmp_path, minilm, data_dir):
    """Ctrl+↑ scrolls up to read; the chat stops following new text (as it should while
    reading). Sending a message, Ctrl+O, or Ctrl+↓ past the newest message bring it back to
    its end, and it follows the reply again (it stayed up there before)."""
    from textual.containers import VerticalScroll

    server.respond(chat_reply("\n\n".join(f"Paragraph {i} of a long answer." for i in range(12))))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        chat = app.query_one("#chat", VerticalScroll)

        async def at_end() -> bool:
            await pilot.pause(0.2)
            return chat.max_scroll_y > 0 and chat.scroll_y >= chat.max_scroll_y - 1

        for k in range(3):
            app.query_one("#prompt").value = f"question {k}"
            await pilot.press("enter")
            await wait_for(pilot, lambda k=k: app.turn is None and len(app.session.tree.exchanges) == k + 1)
        assert await at_end()
        for way_back in ("send", "ctrl+o", "ctrl+down"):
            for _ in range(4):
                await pilot.press("ctrl+up")
            assert not await at_end()
            if way_back == "send":  # the input clicked: the chat stays where it was, until Enter
                app.query_one("#prompt").focus()
                assert not await at_end()
                app.query_one("#prompt").value = "one more question"
                await pilot.press("enter")
            else:
                for _ in range(1 if way_back == "ctrl+o" else 4):  # the 4th goes past the newest
                    await pilot.press(way_back)
                assert app.focused is app.query_one("#prompt")
                app.query_one("#prompt").value = "/stats"
                await pilot.press("enter")
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
            assert await at_end(), way_back


@pytest.mark.timeout(90)
async def test_ctrl_q_quits_with_the_input_focused(server, tmp_path, minilm, data_dir):
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.query_one("#prompt", PromptInput).value = "half typed"
        assert app.focused is app.query_one("#prompt")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, 20)
    assert app.return_code == 0


async def test_keys_remapped_from_the_config(server, tmp_path, minilm, data_dir):
    cfg = make_config(server.base_url, tmp_path)
    cfg.set("keys", "toggle_tree", "f2")
    cfg.set("keys", "copy_code", "f5")
    cfg.set("keys", "newline", "ctrl+n")
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        tree = app.query_one("#tree")
        await pilot.press("ctrl+t")
        assert tree.display is True  # no longer bound
        await pilot.press("f2")
        assert tree.display is False
        await pilot.press("f5")
        await wait_for(pilot, lambda: "No code block to copy." in str([n.message for n in app._notifications]))
        prompt = app.query_one("#prompt", PromptInput)
        await pilot.press("a", "ctrl+n", "b", "ctrl+j", "c")
        assert prompt.text == "a\nbc"  # the prompt's own keys follow the keymap too
        prompt.value = "/help"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "F2: tree" in notices(app) and "F5: copy code" in notices(app))


async def test_remapped_keys_are_the_keys_the_screen_names(server, tmp_path, minilm, data_dir):
    """The input's hint, the inspector's title, the editing border and the notes said the
    default keys whatever [keys] bound: after newline = "ctrl+n" the hint still offered
    Ctrl+J, which no longer made a new line; after cancel = "f9" the inspector said "Esc
    closes" and Esc did nothing (a trial)."""
    cfg = make_config(server.base_url, tmp_path)
    cfg.set("keys", "newline", "ctrl+n")
    cfg.set("keys", "cancel", "f9")
    cfg.set("keys", "resend", "f8")
    cfg.set("keys", "quit", "ctrl+end")
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        assert "Ctrl+N: new line" in str(prompt.placeholder) and "Ctrl+J" not in str(prompt.placeholder)
        assert app.query_one("#inspector").border_title == "Inspector · F9 closes"
        await pilot.press("ctrl+c")  # nothing selected, nothing running: how to quit and cancel
        await wait_for(pilot, lambda: "Ctrl+End quits Nexus" in notices(app))
        assert "F9 cancels a reply" in notices(app)
        await type_and_send(pilot, app, "/help")
        await wait_for(pilot, lambda: "Ctrl+N: new line" in notices(app))
        assert "F9: cancel" in notices(app) and "F8: resend" in notices(app) and "Ctrl+↑: select previous" in notices(app)
        assert "the message F8 would send next" in notices(app) and "Ctrl+R" not in notices(app)
        app.editing = 0
        assert "F9 cancels" in str(prompt.border_title)


def test_bad_keys_are_named():
    assert validate_keys({"toggle_tree": "f2"}) == {"toggle_tree": "f2"}
    assert validate_keys({"copy_code": "f5,F5"}) == {"copy_code": "f5"}  # was "bound to both copy_code and copy_code"
    with pytest.raises(ConfigError, match="the command palette"):
        validate_keys({"copy_code": "Ctrl+P"})
    for keys, words in [
        ({"toggle_treee": "f2"}, ["toggle_treee", "unknown action"]),
        ({"toggle_tree": "ctlr+t"}, ["toggle_tree", "ctlr"]),
        ({"toggle_tree": "ctrl+"}, ["toggle_tree", "empty"]),
        ({"toggle_tree": "ctrl+banana"}, ["banana"]),
        ({"focus_input": "ctrl+i"}, ["ctrl+i", "tab"]),
        ({"copy_code": "ctrl+t"}, ["ctrl+t", "toggle_tree", "copy_code"]),
        # the one holding it by default is named as the one to move too (a trial)
        ({"copy_code": "ctrl+y"}, ["copy_reply has it by default: give copy_reply another key"]),
        ({"cancel": 5}, ["cancel"]),
        # keys the input types or edits with: "quit = 'a'" quit at the first "a" typed, the
        # rest of the sentence went to the shell; "resend = 'enter'" sent nothing (a trial)
        ({"quit": "a"}, ["quit", "'a'", "typing"]),
        ({"quit": "shift+a"}, ["shift+a", "typing"]),
        ({"resend": "enter"}, ["resend", "'enter'", "typing"]),
        ({"resend": "ctrl+r,backspace"}, ["backspace", "typing"]),
        ({"select_next": "shift+down"}, ["shift+down", "typing"]),
        ({"toggle_tree": "question_mark"}, ["question_mark", "typing"]),
        ({"quit": "ctrl+u"}, ["ctrl+u", "typing"]),  # quit where the line was to be cleared (a re-trial)
        ({"copy_reply": "ctrl+h"}, ["ctrl+h", "typing"]),  # Backspace in a terminal
        # the palette's key was taken without a word (a trial)
        ({"copy_code": "ctrl+p"}, ["'ctrl+p'", "the command palette", "copy_code"]),
    ]:
        with pytest.raises(ConfigError) as err:
            validate_keys(keys)
        assert all(w in str(err.value) for w in words), (keys, str(err.value))
    assert check_key("shift+enter,ctrl+j") is None and check_key("ctrl+question_mark") is None
    assert all(check_key(k) is None for k in ("f5", "alt+a", "ctrl+shift+a", "tab", "escape", "pageup", "insert"))


def test_the_config_file_documents_every_key():
    text = (ROOT / "config" / "nexus.toml").read_text().split("[keys]", 1)[1]
    for k in ALL_KEYS.values():
        assert f'# {k.action} = "{k.key}"' in text, k.action
    assert {k.action for k in APP_KEYS} >= {"focus_input", "copy_code", "grow_side"}


def test_a_bad_key_in_the_user_config_stops_nexus_at_start(tmp_path):
    cfg_dir = tmp_path / "xdg" / "nexus"
    cfg_dir.mkdir(parents=True)
    (cfg_dir / "nexus.toml").write_text('[keys]\ncopy_reply = "ctrl+yy"\n')
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"), NEXUS_DATA_DIR=str(tmp_path / "data"))
    res = subprocess.run([sys.executable, "-m", "nexus", "--no-web"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    assert "copy_reply" in res.stderr and "yy" in res.stderr


def test_an_embedder_that_cannot_load_stops_nexus_at_start_in_words(tmp_path):
    """``[memory] embed = "nonsense-embedder"``: 85 s of "embedder loading" while the hub was
    retried offline, then "Cannot open the session: We couldn't connect to huggingface.co"."""
    cfg_dir = tmp_path / "xdg" / "nexus"
    cfg_dir.mkdir(parents=True)
    (cfg_dir / "nexus.toml").write_text('[memory]\nembed = "nonsense-embedder"\n')
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "xdg"), NEXUS_DATA_DIR=str(tmp_path / "data"),
               HF_HUB_OFFLINE="1")
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "nexus", "--no-web"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and time.monotonic() - t < 30
    assert "memory.embed: 'nonsense-embedder' is not downloaded" in res.stderr, res.stderr
    from trace_core.embedders import embedder_problem

    assert "is no folder" in embedder_problem(str(tmp_path / "no-such-model"))
    assert "is not a model name" in embedder_problem("two words")
    assert embedder_problem("minilm") is None and embedder_problem(str(tmp_path)) is None


def palette_prompts(app) -> list[str]:
    from textual.command import CommandList

    cl = app.screen.query_one(CommandList)
    return [str(cl.get_option_at_index(i).prompt) for i in range(cl.option_count)]


async def test_palette_lists_every_command_and_runs_or_fills(server, tmp_path, minilm, data_dir):
    from nexus import commands as C

    server.respond(chat_reply("ok"))
    (data_dir / "sessions").mkdir(parents=True, exist_ok=True)
    (data_dir / "sessions" / "orchard.db").write_bytes(b"")  # another session to switch to
    app = NexusApp(make_config(server.base_url, tmp_path), data_dir / "sessions" / "garden.db", embed_fn=minilm)
    async with app.run_test(size=(120, 50)) as pilot:
        await ready(app, pilot)
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: len(app.screen_stack) == 2 and len(palette_prompts(app)) > len(C.COMMANDS))
        shown = "\n".join(palette_prompts(app))
        for c in C.COMMANDS:
            assert f"/{c.name} — " in shown, c.name
        assert "open session orchard" in shown  # and the sessions to switch to,
        assert "open session garden" not in shown  # not the one open (found in a new-user trial)
        # each entry's usage line, placeholders in brackets included (they were read as markup)
        from textual.command import CommandList

        from nexus.palette import usage
        cl = app.screen.query_one(CommandList)
        helps = [str(cl.get_option_at_index(i).prompt) for i in range(cl.option_count)]
        assert any("/model [name]" in h for h in helps) and any("/save [path]" in h for h in helps), helps[:6]
        assert usage(C.BY_NAME["model"]) != C.BY_NAME["model"].usage
        # a command without arguments runs
        await pilot.press(*"stats")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: "exchanges: 0" in notices(app))
        # one with an argument fills the input
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: len(app.screen_stack) == 2)
        await pilot.press(*"search memory")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)
        assert app.query_one("#prompt", PromptInput).text == "/search "
        assert app.focused is app.query_one("#prompt")


async def test_a_message_can_be_clicked_and_copied(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("A reply worth copying."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.query_one("#prompt", PromptInput).value = "copy me\nplease"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await pilot.click(UserMessage)
        assert isinstance(app.focused, UserMessage)
        await pilot.press("ctrl+y")
        assert app.clipboard == "copy me\nplease"
        await pilot.click(AssistantMessage)
        await pilot.press("ctrl+y")
        assert app.clipboard.strip() == "A reply worth copying."
        assert MemoryTree  # the tree pane is untouched by selection


# --- per session: /system, /set, /retry, /edit; export; reasoning --------------------------------------


def chat_bodies(server) -> list[dict]:
    return [r for r in server.chat_requests() if not r.get("response_format")]


async def test_system_prompt_and_sampling_are_stored_with_the_session(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Arr, noted."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "/system You are a pirate.  Answer in one line."
        await pilot.press("enter")
        await wait_for(pilot, lambda: "System prompt set" in notices(app))
        for line, said in [("/set temperature 0.2", "temperature = 0.2"), ("/set top_p 0.9", "top_p = 0.9"),
                           ("/set max_tokens 64", "max_tokens = 64"),
                           ("/set temperature 7", "temperature must be a number in [0, 2], not 7"),
                           ("/set top_p 0", "top_p must be a number in (0, 1], not 0"),
                           ("/set max_tokens lots", "max_tokens must be a whole number from 1 to 131072"),
                           ("/set colour red", "unknown setting 'colour'"),
                           ("/reorganize --threshold 7", "must lie in (0, 1]")]:
            prompt.value = line
            await pilot.press("enter")
            await wait_for(pilot, lambda said=said: said in notices(app))
        prompt.value = "/stats"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "You are a pirate." in notices(app))
        assert "temperature 0.2" in notices(app) and "top_p 0.9" in notices(app)
        prompt.value = "Where is the treasure?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        body = chat_bodies(server)[-1]
        system = body["messages"][0]["content"]
        assert system.startswith("You are a pirate.  Answer in one line.")
        assert body["temperature"] == 0.2 and body["top_p"] == 0.9 and body["max_tokens"] == 64
        # the memory block is there too, after it: a second message carries the first
        prompt.value = "And the map?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        system = chat_bodies(server)[-1]["messages"][0]["content"]
        assert system.startswith("You are a pirate.") and "treasure" in system
        # /set alone says what they are now (it printed the usage only)
        prompt.value = "/set"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Sampling now: temperature 0.2 (this session's), top_p 0.9 (this session's), "
                       "max_tokens 64 (this session's)." in notices(app))
        prompt.value = "/set top_p"  # one name alone: its value (it printed the usage only: a trial)
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Sampling now: top_p 0.9 (this session's). Usage:" in notices(app))
    # stored in the session file: a restart keeps them
    app2 = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app2.run_test(size=(120, 40)) as pilot:
        await ready(app2, pilot)
        assert app2.session.settings.system == "You are a pirate.  Answer in one line."
        assert (app2.session.settings.temperature, app2.session.settings.top_p) == (0.2, 0.9)
        # the log says they apply (the --local start line names its own max_tokens)
        await wait_for(pilot, lambda: "this session's own settings (/set, /system, /web): temperature 0.2, "
                       "top_p 0.9, max_tokens 64, its own system prompt" in log_text(app2))
        # more than the context leaves is said, not sent as less unsaid (a trial: 100,000 went as 4,096)
        ctx = app2.session.limits()[0]
        await type_and_send(pilot, app2, "/set max_tokens 100000")
        await wait_for(pilot, lambda: f"Replies get at most {ctx // 2:,} tokens: half of the model's context "
                       f"({ctx:,}, models.context_tokens)" in notices(app2))
        # and back: once set, top_p could never go back to the server's own (a trial)
        await type_and_send(pilot, app2, "/set top_p default")
        await wait_for(pilot, lambda: "top_p is back to the default" in notices(app2))
        assert app2.session.settings.top_p is None
        await type_and_send(pilot, app2, "Any treasure left?")
        await wait_for(pilot, lambda: len(app2.session.tree.exchanges) == 3)
        assert "top_p" not in chat_bodies(server)[-1] and chat_bodies(server)[-1]["temperature"] == 0.2


async def test_retry_replaces_the_last_exchange(server, tmp_path, minilm, data_dir):
    answers = iter(["The first answer.", "A second, better answer."])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(next(answers)))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "Explain tides."
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        asked_at = app.session.tree.exchanges[0].timestamp
        time.sleep(1.1)  # timestamps are to the second
        prompt.value = "/retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].assistant == "A second, better answer.")
        await wait_for(pilot, lambda: app.turn is None)
        # asked as if the replaced exchange had not happened: its answer is neither a recent
        # message nor memory (the bundled model, seeing it, answered nothing, three times of three)
        retried = json.dumps(chat_bodies(server)[-1])
        assert "Explain tides." in retried and "The first answer." not in retried
        # with a seed of its own: llama.cpp's seeds restart with the server, and a retry first
        # after a restart gave the same answer again
        assert "seed" in chat_bodies(server)[-1] and "seed" not in chat_bodies(server)[0]
        xs = app.session.tree.exchanges
        assert len(xs) == 1 and xs[0].user == "Explain tides."
        assert xs[0].timestamp == asked_at  # asked then: a retried exchange kept the retry's time
        hits = app.session.search("tides answer")
        assert not any("The first answer." in h.text for h in hits)
    from trace_core import CTree

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    assert [x.assistant for x in tree.exchanges] == ["A second, better answer."]
    tree.vdb.close()


async def test_undo_retry_puts_back_the_answer_a_retry_replaced(server, tmp_path, minilm, data_dir):
    """/retry threw the replaced answer away: a worse regenerated one could not be undone
    (noticed in a trial). Every version of the newest exchange is kept in the session file;
    /undo-retry steps back through them, and a restart keeps them."""
    answers = iter(["Tides follow the moon.", "Tides are waves.", "Tides: the sea goes up."])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(next(answers)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "/undo-retry"  # nothing replaced yet: said, nothing changes
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Nothing to put back yet: no exchange in this session." in notices(app))
        prompt.value = "Explain tides."
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        prompt.value = "/undo-retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Nothing put back: #0, the newest exchange, is as it was (no /retry or /edit replaced it)."
                       in notices(app))
        for want in ("Tides are waves.", "Tides: the sea goes up."):
            prompt.value = "/retry"
            await pilot.press("enter")
            await wait_for(pilot, lambda want=want: app.session.tree.exchanges[-1].assistant == want)
            await wait_for(pilot, lambda: app.turn is None)
        prompt.value = "/undo-retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].assistant == "Tides are waves.")
        await wait_for(pilot, lambda: "Put back version 2 of 3 of #0" in notices(app))
        # the log tells a retry from its undo (both said "remembered exchange #0")
        assert "replaced exchange #0 in" in log_text(app) and "put back exchange #0 in" in log_text(app)
        prompt.value = "/undo-retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].assistant == "Tides follow the moon.")
        # shown below what it replaced, which is dimmed; memory holds it alone
        await wait_for(pilot, lambda: any(v.exchange.assistant == "Tides follow the moon." and not v.replaced
                                          for v in app.query(PastExchangeView)))
        assert [v.replaced for v in app.query(PastExchangeView)] == [True, False]
        assert len(app.session.tree.exchanges) == 1
        hits = app.session.search("tides sea goes up")
        assert not any("the sea goes up" in h.text for h in hits)
    # a restart keeps the versions: going back from the first comes round to the newest
    app2 = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app2.run_test(size=(120, 40)) as pilot:
        await ready(app2, pilot)
        assert app2.session.tree.exchanges[-1].assistant == "Tides follow the moon."
        app2.query_one("#prompt", PromptInput).value = "/undo-retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app2.session.tree.exchanges[-1].assistant == "Tides: the sea goes up.")
        # a new exchange ends the versions: they were of the newest exchange only
        prompt = app2.query_one("#prompt", PromptInput)
        prompt.value = "Thanks."
        server.respond(chat_reply("You're welcome."))
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app2.session.tree.exchanges) == 2)
        await wait_for(pilot, lambda: app2.turn is None)
        prompt.value = "/undo-retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: notices(app2).count("Nothing put back") == 1)
        assert [x.assistant for x in app2.session.tree.exchanges] == ["Tides: the sea goes up.", "You're welcome."]


async def test_edit_puts_the_message_back_and_replaces_the_exchange(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("ok"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        for text in ["My dog is Rex.", "My cat is Mimo."]:
            n = len(app.session.tree.exchanges)
            prompt.value = text
            await pilot.press("enter")
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        prompt.value = "/edit"
        await pilot.press("enter")
        await wait_for(pilot, lambda: prompt.text == "My cat is Mimo.")
        prompt.value = "My cat is Miso."
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].user == "My cat is Miso.")
        assert [x.user for x in app.session.tree.exchanges] == ["My dog is Rex.", "My cat is Miso."]
        # what the chat still shows of the replaced exchange is dimmed and says so (it read as
        # part of the conversation until a reopen)
        await wait_for(pilot, lambda: len(app.query(ExchangeHead)) == 3)
        heads = list(app.query(ExchangeHead))
        assert [h.index for h in heads] == [0, 1, 1]
        assert heads[1].has_class("replaced") and "replaced below" in str(heads[1].render())
        assert not heads[0].has_class("replaced") and not heads[2].has_class("replaced")
        dimmed = {w.text for w in app.query(UserMessage) if w.has_class("replaced")}
        assert dimmed == {"My cat is Mimo."}
        assert len([r for r in app.query(AssistantMessage) if r.has_class("replaced")]) == 1
        # a plain message afterwards is a new exchange again
        prompt.value = "Thanks."
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 3)


async def test_a_retry_with_no_answer_keeps_nothing_and_leaves_the_exchange(server, tmp_path, minilm, data_dir):
    """/retry got an empty answer: its question was kept for Ctrl+R as "not answered" over
    an answered exchange, nagged at every start, and a Ctrl+R after a restart stored the
    question twice (trial). Nothing is kept now; the exchange stays; /retry tries again."""
    answers = iter(["The first answer.", "", "A second answer."])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(next(answers), chunk_delay=0.0))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "What is the capital of Portugal?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        prompt.value = "/retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.turn is None and "no new answer" in app.query(AssistantMessage).last().note)
        assert app.session.kept == [] and app.session.tree.vdb.get_meta("nexus.unsent") in (None, "[]")
        assert [(x.user, x.assistant) for x in app.session.tree.exchanges] == [
            ("What is the capital of Portugal?", "The first answer.")]
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "Nothing to resend." in notices(app))
        prompt.value = "/retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].assistant == "A second answer.")
        assert len(app.session.tree.exchanges) == 1
        # a /retry the server fails: said, nothing kept, the exchange as it was
        server.respond(lambda req: Reply("", status=500, body='{"error": {"message": "model crashed"}}'))
        prompt.value = "/retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "No new reply:" in notices(app) and app.turn is None)
        assert "The exchange /retry was to replace is as it was" in notices(app)
        assert app.session.kept == [] and app.session.tree.exchanges[-1].assistant == "A second answer."


async def test_copy_keys_find_the_replies_of_a_reopened_session(server, tmp_path, minilm, data_dir):
    """Ctrl+Y and Ctrl+K looked at live replies only: "No reply to copy yet." in a
    reopened session full of them (found in a trial)."""
    from trace_core import CTree

    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "A one-liner?"},
              {"role": "assistant", "content": "Here:\n\n```python\nprint('hi')\n```"}])
    tree.add([{"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "You're welcome."}])
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.query(PastExchangeView)) == 2)
        await pilot.press("ctrl+k")
        assert app.clipboard == "print('hi')\n"
        await pilot.press("ctrl+y")
        assert app.clipboard == "You're welcome."


async def test_retry_in_a_reopened_session_marks_the_shown_exchange_replaced(server, tmp_path, minilm, data_dir):
    from trace_core import CTree

    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    for q in ("Explain tides.", "Explain waves."):
        tree.add([{"role": "user", "content": q}, {"role": "assistant", "content": "A first answer."}])
    tree.vdb.close()
    server.respond(chat_reply("A second answer."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.query(PastExchangeView)) == 2)
        app.query_one("#prompt", PromptInput).value = "/retry"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].assistant == "A second answer.")
        await wait_for(pilot, lambda: len(app.query(ExchangeHead)) == 1)
        first, second = app.query(PastExchangeView)
        assert second.replaced and second.has_class("replaced") and not first.replaced


async def test_export_writes_markdown_with_dates_and_the_outline(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Sourdough needs a starter."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "bread.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "How do I bake sourdough?\nStep by step."
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        out = tmp_path / "out" / "bread.md"
        prompt.value = f"/export {out} --tree"
        await pilot.press("enter")
        await wait_for(pilot, lambda: out.exists())
        assert str(out) in notices(app)
        text = out.read_text()
        day = app.session.tree.exchanges[0].timestamp[:4]
        assert text.startswith("# Nexus — bread")
        assert f"## {day}" in text and "### #0 · " in text
        assert "**You:**\n\nHow do I bake sourdough?\nStep by step." in text
        assert "Sourdough needs a starter." in text and "## Topic outline" in text and "ROOT" in text
        assert "exchange" in text.split("## Topic outline")[1] and "msgs" not in text  # counted as the app counts
        assert oct(out.stat().st_mode & 0o777) == "0o600"
        prompt.value = "/export"
        await pilot.press("enter")
        await wait_for(pilot, lambda: list((data_dir / "exports").glob("bread-*.md")))
        plain = next((data_dir / "exports").glob("bread-*.md")).read_text()
        assert "## Topic outline" not in plain


async def test_streamed_reasoning_is_shown_folded_and_never_stored(server, tmp_path, minilm, data_dir):
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("The answer is 42.", reasoning=["Let me think ", "about the ", "question."],
                     chunk_delay=0.02)

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "What is the answer?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        reply = list(app.query(AssistantMessage))[-1]
        assert reply.reasoning == "Let me think about the question."
        from textual.widgets import Collapsible

        folded = reply.query_one(Collapsible)
        assert folded.collapsed and folded.title == "reasoning (6 words)"
        assert "Let me think" in str(reply.query_one(".reasoning-text").render())
        stored = app.session.tree.exchanges[0]
        assert stored.assistant.strip() == "The answer is 42."
        assert "think" not in " ".join(h.text for h in app.session.search("Let me think about the question"))
        # Ctrl+Y copies the answer without the reasoning
        await pilot.press("ctrl+y")
        assert app.clipboard.strip() == "The answer is 42."


async def test_ollamas_reasoning_field_is_shown_folded_and_a_model_that_only_thought_says_so(server, tmp_path, minilm,
                                                                                             data_dir):
    """Ollama's /v1 (and newer vLLM) stream reasoning as delta.reasoning, not
    reasoning_content: it went unread, the reply area said "the model is working" through
    a minute of thinking, and a model that thought to its max_tokens was said to have "a
    full context" (a trial)."""
    thinking = ["Okay, the user ", "wants the answer. "] * 40

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        if "only think" in req["messages"][-1]["content"]:
            return Reply("", reasoning=thinking, reasoning_field="reasoning", finish="length")
        return Reply("The answer is 42.", reasoning=["Let me think ", "about it."], reasoning_field="reasoning")

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "What is the answer?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1 and app.turn is None)
        reply = list(app.query(AssistantMessage))[-1]
        assert reply.reasoning == "Let me think about it."
        assert app.session.tree.exchanges[0].assistant.strip() == "The answer is 42."
        await type_and_send(pilot, app, "/set max_tokens 300")
        await type_and_send(pilot, app, "Now only think, please.")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Now only think, please."])
        said = notices(app)
        assert "the model spent its whole max_tokens limit (300) thinking and gave no answer" in said, said
        assert "context is full" not in said and len(app.session.tree.exchanges) == 1


async def test_an_inline_think_section_streams_into_the_folded_reasoning(server, tmp_path, minilm, data_dir):
    """A streamed "<think>…</think>" was drawn as the answer ("I am reasoning about the
    question. Ste") until the reply ended (a trial): it goes to the folded section as it
    streams, a tag split across chunks too."""
    chunks = ["<thi", "nk>I am reasoning ", "about the question. ", "Step one.</th", "ink>The answer ", "is 42."]
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("".join(chunks), chunks=chunks, chunk_delay=0.4))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "What is the answer?")
        await wait_for(pilot, lambda: app.current_reply is not None and "about the question" in app.current_reply.text)
        reply = app.current_reply
        await pilot.pause(0.3)
        assert "reasoning" not in reply.body.source and "<thi" not in reply.body.source
        assert reply.inline_reasoning.startswith("I am reasoning about the question.")
        from textual.widgets import Collapsible

        assert reply.query_one(Collapsible).collapsed
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert reply.reasoning == "I am reasoning about the question. Step one."
        assert "reasoning" not in reply.body.source and "The answer is 42." in reply.body.source
        assert app.session.tree.exchanges[0].assistant.strip() == "The answer is 42."


async def test_reasoning_closed_by_a_think_tag_the_template_opened_is_never_the_answer(server, tmp_path, minilm,
                                                                                      data_dir):
    """DeepSeek-R1's and Qwen3's chat templates open "<think>" themselves: a server that does
    not split reasoning out (llama.cpp without --reasoning-format, an older LM Studio) sends
    the reasoning, then only "</think>", then the answer. All of it was drawn as the answer
    and stored in memory, reasoning included (a trial)."""
    chunks = ["Okay, the user asks ", "about the answer. ", "Let me recall.\n</th", "ink>\n\nThe answer ", "is 42."]
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("".join(chunks), chunks=chunks, chunk_delay=0.4))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "What is the answer?")
        await wait_for(pilot, lambda: app.current_reply is not None and "The answer" in app.current_reply.text)
        reply = app.current_reply
        await pilot.pause(0.3)  # drawn as it streams: the answer alone once the tag came
        assert "Okay, the user" not in reply.body.source and "The answer" in reply.body.source, reply.body.source
        assert reply.inline_reasoning.startswith("Okay, the user asks about the answer.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert reply.reasoning == "Okay, the user asks about the answer. Let me recall."
        assert "Okay" not in reply.body.source and "</think>" not in reply.body.source
        assert app.session.tree.exchanges[0].assistant.strip() == "The answer is 42."
        await pilot.press("ctrl+y")
        assert app.clipboard.strip() == "The answer is 42."


async def test_a_stored_exchange_shown_on_open_can_be_selected_and_copied(server, tmp_path, minilm, data_dir):
    from nexus.widgets import PastExchangeView
    from trace_core import CTree

    path = tmp_path / "old.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "What is a roux?"},
              {"role": "assistant", "content": "Flour cooked in fat."}])
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: list(app.query(PastExchangeView)))
        await pilot.press("ctrl+up")
        assert isinstance(app.focused, PastExchangeView)
        await pilot.press("ctrl+y")
        assert app.clipboard == "What is a roux?\n\nFlour cooked in fat."
        await pilot.press("escape")
        assert app.focused is app.query_one("#prompt")


async def test_ctrl_down_at_the_input_and_typing_on_a_selected_message_lose_nothing(server, tmp_path, minilm,
                                                                                       data_dir):
    """Ctrl+↓ in the input selected the oldest message, and the next keys typed were lost;
    a character typed with a message selected goes on in the input (a trial)."""
    from nexus.widgets import PastExchangeView
    from trace_core import CTree

    path = tmp_path / "old.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    for q, a in (("What is a roux?", "Flour cooked in fat."), ("And a béchamel?", "A roux with milk.")):
        tree.add([{"role": "user", "content": q}, {"role": "assistant", "content": a}])
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(list(app.query(PastExchangeView))) == 2)
        prompt = app.query_one("#prompt", PromptInput)
        await pilot.press("ctrl+down", "h", "i")
        assert app.focused is prompt and prompt.text == "hi"
        await pilot.press("ctrl+up")
        assert isinstance(app.focused, PastExchangeView)
        await pilot.press(" ", "t", "h", "e", "r", "e")
        assert app.focused is prompt and prompt.text == "hi there"
        await pilot.press("ctrl+up", "ctrl+up", "ctrl+down", "ctrl+down", "ctrl+down", "!")
        assert app.focused is prompt and prompt.text == "hi there!"


async def test_a_long_draft_leaves_a_small_terminal_its_chat(server, tmp_path, minilm, data_dir):
    """At 60×18 a long draft's input took 12 rows and left the chat 2: a refusal's own
    words were cut off (a trial). The input takes a third of a small terminal at most."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(60, 18)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "\n".join(f"line {i}" for i in range(30))
        await pilot.pause(0.2)
        assert 3 <= prompt.outer_size.height <= 6
        assert app.query_one("#chat").size.height >= 8
        await pilot.resize_terminal(100, 45)
        await pilot.pause(0.2)
        assert prompt.outer_size.height == 12  # the usual bound in a big one


async def test_backspace_takes_the_character_the_user_sees(server, tmp_path, minilm, data_dir):
    """One code point at a time left a lone joiner in the draft: "a🐈‍b" from "a🐈‍⬛b"
    (a trial). An emoji of joined parts, a flag and an accented letter go whole."""
    from nexus.text import cluster_start

    assert cluster_start("a🐈\u200d⬛b", 4) == 1 and cluster_start("x🇫🇷🇩🇪", 5) == 3
    assert cluster_start("cafe\u0301!", 5) == 3 and cluster_start("👍🏽", 2) == 0
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "a🐈\u200d⬛b 🇫🇷 café"
        prompt.move_cursor((0, 4))  # after the black cat
        await pilot.press("backspace")
        assert prompt.text == "ab 🇫🇷 café"
        prompt.move_cursor((0, 5))  # after the flag
        await pilot.press("backspace")
        assert prompt.text == "ab  café"
        prompt.value = "cafe\u0301"
        prompt.move_cursor((0, 5))
        await pilot.press("backspace")
        assert prompt.text == "caf"
        await pilot.press("backspace")  # plain letters: one each, as before
        assert prompt.text == "ca"


async def test_the_line_typed_on_stays_in_sight_when_the_input_is_full(server, tmp_path, minilm, data_dir):
    """At its largest, a new line (Ctrl+J) was scrolled to before the input had room for
    it: the cursor sat under the bottom border until the next key (a trial)."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(140, 45)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        for i in range(1, 16):
            await pilot.press(*f"line {i}", "ctrl+j")
            await pilot.pause(0.05)
            row = prompt.cursor_location[0]
            top = round(prompt.scroll_offset.y)
            assert top <= row < top + prompt.scrollable_content_region.height, (i, row, top)
        from textual import events

        prompt.value = ""
        await pilot.pause(0.1)
        pasted = "".join(f"pasted {i}\n" for i in range(15))
        app.post_message(events.Paste(pasted))  # as the driver posts a bracketed paste
        await pilot.pause(0.2)
        assert prompt.text == pasted  # once
        row, top = prompt.cursor_location[0], round(prompt.scroll_offset.y)
        assert top <= row < top + prompt.scrollable_content_region.height, (row, top)


async def test_page_up_and_down_scroll_the_chat_while_typing(server, tmp_path, minilm, data_dir):
    """PageUp/PageDown with the input focused scroll the chat (they only moved the input's
    cursor: reading back needed Ctrl+↑ first); the text typed stays; back at the end the
    chat follows new text again. In the tree pane they are the tree's own keys."""
    from textual.containers import VerticalScroll

    server.respond(chat_reply("\n\n".join(f"Paragraph {i} of a long answer." for i in range(12))))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        chat = app.query_one("#chat", VerticalScroll)
        for k in range(3):
            app.query_one("#prompt").value = f"question {k}"
            await pilot.press("enter")
            await wait_for(pilot, lambda k=k: app.turn is None and len(app.session.tree.exchanges) == k + 1)
        await pilot.pause(0.2)
        end = chat.max_scroll_y
        assert end > 0 and chat.scroll_y >= end - 1
        app.query_one("#prompt").value = "half a thought"
        await pilot.press("pageup")
        await pilot.pause(0.2)
        assert chat.scroll_y < end - 5
        await pilot.press("pageup", "pagedown", "pagedown", "pagedown")
        await pilot.pause(0.2)
        assert chat.scroll_y >= chat.max_scroll_y - 1
        # key repeat: a burst of PageUps handled before any refresh moves a page each
        # (eight moved two pages in a trial: each counted from the same place)
        page = chat.scrollable_content_region.height
        for _ in range(3):
            app.action_page_chat_up()
        await pilot.pause(0.2)
        assert chat.scroll_y <= chat.max_scroll_y - 3 * page
        for _ in range(3):
            app.action_page_chat_down()
        await pilot.pause(0.2)
        assert chat.scroll_y >= chat.max_scroll_y - 1
        assert app.query_one("#prompt").text == "half a thought"
        app.query_one("#tree").focus()
        await pilot.pause(0.1)
        at = chat.scroll_y
        await pilot.press("pageup")
        await pilot.pause(0.2)
        assert chat.scroll_y == at  # the tree's key, not the chat's


def top_of_view(chat) -> tuple[object, int]:
    """The message at the top of the chat's view, and how many of its lines are above it."""
    y = chat.scroll_y
    for w in chat.children:
        r = w.virtual_region
        if r.y + r.height > y:
            return w, y - r.y
    return None, 0


async def test_a_resize_keeps_the_reading_place_in_the_chat(server, tmp_path, minilm, data_dir):
    """Reading back, a narrower or wider terminal keeps the message at the top of the
    view there: the same line number pointed at another message once every message
    wrapped anew (a trial, in a long session). Following the end, the chat stays at it."""
    from textual.containers import VerticalScroll

    server.respond(chat_reply("\n\n".join(f"Paragraph {i} of a long answer that wraps at narrow widths, "
                                           "for sure." for i in range(6))))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(140, 30)) as pilot:
        await ready(app, pilot)
        chat = app.query_one("#chat", VerticalScroll)
        for k in range(8):
            app.query_one("#prompt").value = f"question {k}"
            await pilot.press("enter")
            await wait_for(pilot, lambda k=k: app.turn is None and len(app.session.tree.exchanges) == k + 1)
        await pilot.pause(0.2)
        await pilot.resize_terminal(100, 30)  # following the end: still at it
        await pilot.pause(0.3)
        assert chat.scroll_y >= chat.max_scroll_y - 1
        await pilot.press("pageup", "pageup", "pageup")
        await pilot.pause(0.2)
        place, above = top_of_view(chat)
        assert place is not None and chat.scroll_y < chat.max_scroll_y - 20
        for size in ((70, 30), (140, 30)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.3)
            now, lines = top_of_view(chat)
            assert now is place, size
            assert abs(lines - above) <= 2


async def test_log_lines_written_while_the_log_is_hidden_fill_its_width_when_shown(server, tmp_path, minilm,
                                                                                  data_dir):
    """Ctrl+L hides the log, a line is logged, Ctrl+L shows it: the line wrapped at about
    75 columns in a 160-column log (found in a new-user trial); it fills the width now."""
    from nexus.widgets import EventLog

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(app, pilot)
        log_pane = app.query_one(EventLog)
        await pilot.press("ctrl+l")
        assert not log_pane.display
        app.log_line("word " * 40)  # 200 characters
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)
        shown = [line.text.rstrip() for line in log_pane.lines if "word" in line.text]
        assert len(shown) == 2 and len(shown[0]) > 120, shown
        # the terminal narrowed, then widened: the lines are wrapped again at each width
        # (they kept the old width: cut at the pane's edge, their end out of sight)
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.3)
        narrow = [line.text.rstrip() for line in log_pane.lines if "word" in line.text]
        assert len(narrow) >= 3 and all(len(t) <= log_pane.scrollable_content_region.width for t in narrow), narrow
        await pilot.resize_terminal(160, 40)
        await pilot.pause(0.3)
        assert len([line for line in log_pane.lines if "word" in line.text]) == 2


async def test_typing_while_the_tree_has_focus_goes_to_the_input(server, tmp_path, minilm, data_dir):
    """Ctrl+B into the tree, then typing a command: the text went nowhere (found in a
    new-user trial). The tree's own keys (arrows, Enter, space) stay the tree's."""
    from nexus.widgets import MemoryTree, PromptInput

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(140, 45)) as pilot:
        await ready(app, pilot)
        await pilot.press("ctrl+b")
        assert isinstance(app.focused, MemoryTree)
        await pilot.press("down", "space")
        assert isinstance(app.focused, MemoryTree)
        await pilot.press(*"/check")
        await pilot.pause(0.1)
        assert isinstance(app.focused, PromptInput) and app.query_one("#prompt").value == "/check"
        # a burst that reaches the tree before the input has the focus: spaces, Backspace
        # and Enter follow the letters (the spaces went to the tree: "/findryebread")
        app.query_one("#prompt").value = ""
        await pilot.press("ctrl+b")
        tree = app.query_one(MemoryTree)
        names = {"/": "slash", " ": "space"}
        for char in "/find rye breadx":
            tree.post_message(events.Key(names.get(char, char), char))  # all queued before the first is read
        tree.post_message(events.Key("backspace", "\x08"))
        tree.post_message(events.Key("enter", "\r"))
        await wait_for(pilot, lambda: "rye bread" in notices(app))
        assert app.query_one("#prompt").value == "" and "ryebread" not in notices(app)
        # a paste while the tree has the focus lands in the input too (it was dropped)
        await pilot.press("ctrl+b")
        app.query_one(MemoryTree).post_message(events.Paste("pasted into the tree"))
        await pilot.pause(0.1)
        assert app.query_one("#prompt").value == "pasted into the tree"


async def test_typed_joiners_and_direction_marks_are_sent_as_typed(server, tmp_path, minilm, data_dir):
    """TextArea types only what ``str.isprintable`` passes: a Persian word's zero-width
    non-joiner and an emoji family's joiners were dropped from typed text (trial)."""
    server.respond(chat_reply("Noted."))
    typed = "من می\u200cخواهم \U0001f469\u200d\U0001f469\u200d\U0001f467 \u200fok"
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        for ch in typed:  # one key each, as a terminal sends them
            prompt.post_message(events.Key(ch if ch.isprintable() else "unknown", ch))
        await pilot.pause()
        assert prompt.text == typed
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert user_texts(app) == [typed]


async def test_an_edit_is_on_the_input_and_esc_ends_it(server, tmp_path, minilm, data_dir):
    """/edit, Esc, the input emptied, Esc, then an unrelated message: it replaced the newest
    exchange, which left memory unsaid (a trial). The edit shows on the input's border, and
    Esc ends it: the next message is a new exchange."""
    server.respond(chat_reply("ok"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        await type_and_send(pilot, app, "My cat is Mimo.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: prompt.text == "My cat is Mimo.")
        assert "editing #0" in str(prompt.border_title) and "Esc cancels" in str(prompt.border_title)
        await pilot.press("escape")
        await wait_for(pilot, lambda: "Edit of #0 cancelled (Esc)" in notices(app))
        assert app.editing is None and not prompt.border_title and prompt.text == "My cat is Mimo."
        await pilot.press("ctrl+u")  # the input emptied, Esc again (the trial's keys): nothing more to cancel
        await pilot.press("escape")
        await type_and_send(pilot, app, "a brand new question about tea")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert [x.user for x in app.session.tree.exchanges] == ["My cat is Mimo.", "a brand new question about tea"]


async def test_an_unanswered_edit_still_replaces_its_exchange_after_a_restart(server, tmp_path, minilm, data_dir):
    """/edit #N got no answer, Nexus closed: after the restart Ctrl+R filed the edit as a
    new exchange, and the old one stayed (trial: what it replaces was held in memory only)."""
    answers = iter(["Rex is a fine name.", "Mimo too.", ""])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(next(answers, "Miso it is."), chunk_delay=0.0))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        for text in ["My dog is Rex.", "My cat is Mimo."]:
            n = len(app.session.tree.exchanges)
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: prompt.text == "My cat is Mimo.")
        prompt.value = "My cat is Miso."
        await pilot.press("enter")  # the answer is empty: kept for Ctrl+R
        await wait_for(pilot, lambda: app.session.kept == ["My cat is Miso."] and app.turn is None)
        await pilot.press("ctrl+q")
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert app.session.kept == ["My cat is Miso."]
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].user == "My cat is Miso.")
        assert [x.user for x in app.session.tree.exchanges] == ["My dog is Rex.", "My cat is Miso."]


async def test_editing_keys_in_a_burst_act_in_the_order_typed(server, tmp_path, minilm, data_dir):
    """Ctrl+U then "/quit", arriving together (a loaded machine, a fast typist): the
    editor's own bindings ran only after the key had bubbled up to the app, so "/q" was
    typed first and Ctrl+U took it with the draft; "uit" was sent (CI, a real terminal)."""
    from nexus.widgets import PromptInput

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "and a draft"
        burst = [events.Key("ctrl+u", "\x15"), *(events.Key("slash" if c == "/" else c, c) for c in "/quit")]
        burst += [events.Key("ctrl+w", "\x17"), *(events.Key(c, c) for c in "help")]
        for key in burst:  # all queued before the first is read, as the driver does
            app.post_message(key)
        await pilot.pause(0.3)
        assert prompt.value == "/help"
        # Backspace and the arrows are the editor's bindings too ("ab⌫c" was "bc" or "ac")
        prompt.value = ""
        for key in [events.Key("a", "a"), events.Key("b", "b"), events.Key("backspace", "\x7f"),
                    events.Key("c", "c"), events.Key("left", None), events.Key("x", "x")]:
            app.post_message(key)
        await pilot.pause(0.3)
        assert prompt.value == "axc"


async def test_enter_then_ctrl_q_at_once_keeps_the_message(server, tmp_path, minilm, data_dir):
    """Enter and Ctrl+Q in one burst (keys piled up while Nexus started): the quit ran
    first, the message reached the app as it went and crashed it (MountError, exit 1),
    and the message was lost. It is kept unanswered, for Ctrl+R at the next start."""
    import sqlite3

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.query_one("#prompt", PromptInput).value = "keep me please"
        app.post_message(events.Key("enter", "\r"))
        app.post_message(events.Key("ctrl+q", "\x11"))
        await wait_for(pilot, lambda: not app.is_running, 20)
    assert app.return_code == 0
    con = sqlite3.connect(tmp_path / "s.db")
    try:
        unsent = con.execute("SELECT value FROM meta WHERE key='nexus.unsent'").fetchone()
    finally:
        con.close()
    assert unsent is not None and json.loads(unsent[0]) == ["keep me please"]


def test_a_recalled_prompt_changed_is_not_thrown_away_by_down(tmp_path):
    """↑, then typing over the recalled prompt, then ↓: the new text was replaced by the
    draft from before ↑, with no undo (a trial). The changed text is the draft now; the
    draft before ↑ is one ↑ away."""
    h = PromptHistory(tmp_path / "h.jsonl")
    h.add("older prompt")
    assert h.previous("my draft") == "older prompt"
    assert h.following("an important new message") is None  # nothing newer: it stays
    assert h.previous("an important new message") == "my draft"
    assert h.previous("my draft") == "older prompt"
    assert h.following("older prompt") == "my draft"
    assert h.following("my draft") == "an important new message"
    # unchanged, the walk goes on as before
    assert h.previous("x") == "my draft" and h.following("my draft") == "x"


async def test_up_and_ctrl_u_on_a_wrapped_line(server, tmp_path, minilm, data_dir):
    """↑ on the second row of a line wrapped over two recalled an earlier prompt in place
    of the sentence being typed (a trial at 80 columns)."""
    from nexus.widgets import PromptInput

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.prompts.add("an earlier prompt")
        sentence = "a sentence long enough to wrap over two rows of the input at this width, " * 2
        prompt.value = sentence
        await pilot.pause(0.1)
        assert prompt.wrapped_document.height >= 2
        await pilot.press("up")
        assert prompt.value == sentence and prompt.cursor_location[0] == 0
        await pilot.press("down")
        assert prompt.value == sentence
        while prompt._cursor_row() > 0:
            await pilot.press("up")
        await pilot.press("up")  # from the first row: the earlier prompt
        assert prompt.value == "an earlier prompt"
        await pilot.press("down")
        assert prompt.value == sentence
        # Ctrl+U clears the whole line typed, not its last row on screen (a trial)
        prompt.value = "first line\n" + sentence
        await pilot.press("ctrl+u")
        assert prompt.value == "first line\n"


async def test_keys_right_behind_ctrl_b_go_to_the_tree(server, tmp_path, minilm, data_dir):
    """Ctrl+B, ↓ and Enter in one burst: the focus moved a moment later, so Enter sent the
    draft instead of inspecting a topic (a trial)."""
    from nexus.widgets import MemoryTree, PromptInput

    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(140, 45)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sister Ana lives in Porto.")
        await wait_for(pilot, lambda: app.session.tree is not None and len(app.session.tree.exchanges) == 1
                       and app.turn is None)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "should not be sent"
        for key in (events.Key("ctrl+b", "\x02"), events.Key("down", None), events.Key("enter", "\r")):
            app.post_message(key)
        # waited for, not paused for: on a loaded CI machine 0.5 s was not always enough
        await wait_for(pilot, lambda: isinstance(app.focused, MemoryTree))
        await pilot.pause(0.3)
        assert prompt.value == "should not be sent" and len(app.session.tree.exchanges) == 1


async def test_ctrl_k_copies_the_selected_replys_code_and_steps_back_block_by_block(server, tmp_path, minilm,
                                                                                  data_dir):
    """Ctrl+K copied the newest reply's block whatever was selected, missed a ~~~ fence and
    one a cut reply left open (copying an older reply's block instead), cut a four-backtick
    block at its inner fence, and gave the same block at every press (a trial)."""
    answers = iter(["First:\n\n~~~python\nTILDE = 1\n~~~\n\nand\n\n````md\nOuter\n```\ninner\n```\nOuter end\n````\n",
                    "Cut short:\n\n```sh\necho 'OPEN'"])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(next(answers)))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for n, text in enumerate(["show me two blocks", "and a cut one"]):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        await pilot.press("ctrl+k")
        assert app.clipboard == "echo 'OPEN'\n"  # the open fence of the newest reply
        await pilot.press("ctrl+k")
        assert app.clipboard == "Outer\n```\ninner\n```\nOuter end\n"  # the block before, whole
        await pilot.press("ctrl+k")
        assert app.clipboard == "TILDE = 1\n"
        # the first of them: the next press goes round to the last ("the one before" it has none)
        said = [n.message for n in app._notifications]
        assert said[-1] == "Code block copied (1 of 3; Ctrl+K again for the last).", said
        assert said[-2] == "Code block copied (2 of 3; Ctrl+K again for the one before).", said
        await pilot.press("ctrl+k")
        assert app.clipboard == "echo 'OPEN'\n"
        for _ in range(3):  # the first reply selected: its own blocks, last first
            await pilot.press("ctrl+up")
        assert isinstance(app.focused, AssistantMessage) and "First:" in app.focused.text
        app._code_copied = (0.0, 0, [])  # a fresh start, as after 10 s
        await pilot.press("ctrl+k")
        assert app.clipboard == "Outer\n```\ninner\n```\nOuter end\n"


async def test_copying_leaves_out_control_characters_and_the_apps_marks(server, tmp_path, minilm, data_dir):
    """Ctrl+Y put a model's raw ESC and BEL bytes (a window-title sequence) in the
    clipboard, for a terminal to obey when pasted, and a cancelled reply's copy ended
    with the app's "[reply cancelled]" (a trial)."""
    answers = iter([Reply("\x1b[31mred\x1b[0m text\tand \x1b]0;TITLE-HACK\x07 done\nline two"),
                    Reply("word " * 60, chunk_delay=0.1)])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format") else next(answers))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "colours please")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await pilot.press("ctrl+y")
        assert app.clipboard == "[31mred[0m text\tand ]0;TITLE-HACK done\nline two"
        await type_and_send(pilot, app, "count words")
        await wait_for(pilot, lambda: app.current_reply is not None and "word word" in app.current_reply.text)
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        await pilot.press("ctrl+y")
        assert app.clipboard.startswith("word") and "cancelled" not in app.clipboard


async def test_the_inputs_hint_is_never_cut_at_its_edge(server, tmp_path, minilm, data_dir):
    """A 60-column terminal drew the hint cut at the input's edge, "(Enter sends,
    Shift+Enter or Ctrl+J:" with no "new line" (a trial): the longest hint that fits is
    shown, again at each resize."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(60, 20)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)

        async def shown() -> str:
            await pilot.pause(0.2)
            return prompt.render_line(0).text.strip()

        assert await shown() == "Message, or /help  (Ctrl+J: new line)"
        await pilot.resize_terminal(120, 40)
        assert await shown() == "Message, or /help  (Enter sends, Shift+Enter or Ctrl+J: new line)"
        await pilot.resize_terminal(36, 15)
        assert await shown() == "Message, or /help"


async def test_the_completions_on_the_border_are_whole_names_and_say_how_many_more(server, tmp_path, minilm,
                                                                                  data_dir):
    """A 40-column terminal's input border cut the last completion ("/sessi…"), and past
    the eighth nothing said there were more (a trial)."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(40, 15)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        prompt.value = "/s"
        await pilot.press("tab")
        assert prompt.border_subtitle == "/search  /scenario  /save  +4 more"
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        prompt.value = "/"
        await pilot.press("tab")
        names = str(prompt.border_subtitle).split("  ")
        assert names[-1].startswith("+") and names[-1].endswith(" more") and len(names) > 9
        assert int(names[-1][1:].split()[0]) + len(names) - 1 == len(prompt.completer.complete("/"))


async def test_the_editing_border_is_never_cut_at_its_edge(server, tmp_path, minilm, data_dir):
    """A 50-column terminal drew "editing #14 · Enter replaces it · Esc cance…" on the
    input's border (a trial): the longest title that fits, again at each resize."""
    server.respond(chat_reply("ok"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(48, 20)) as pilot:
        await ready(app, pilot)
        prompt = app.query_one("#prompt", PromptInput)
        await type_and_send(pilot, app, "My cat is Mimo.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: prompt.text == "My cat is Mimo.")
        assert prompt.border_title == "editing #0 · Esc cancels"
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.2)
        assert prompt.border_title == "editing #0 · Enter replaces it · Esc cancels"
        await pilot.resize_terminal(24, 20)
        await pilot.pause(0.2)
        assert prompt.border_title == "editing #0"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.editing is None)
        assert not prompt.border_title


async def test_a_resize_while_reading_back_does_not_jump_to_the_streaming_reply(server, tmp_path, minilm,
                                                                                 data_dir):
    """Reading an earlier reply while another streamed, a wider terminal laid the chat out
    shorter, the view was pulled to its end, that took the anchor back, and the chat jumped
    to the streaming reply and followed it (a trial at 70 → 120 columns)."""
    long = " ".join(f"w{i}" for i in range(200))
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply(long + long, chunk_delay=0.05) if "slow" in req["messages"][-1]["content"]
                   else Reply(long))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(70, 30)) as pilot:
        await ready(app, pilot)
        for n in range(4):
            await type_and_send(pilot, app, f"quick {n}")
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1 and app.turn is None)
        await type_and_send(pilot, app, "slow one")
        await wait_for(pilot, lambda: app.current_reply is not None and len(app.current_reply.text) > 200)
        chat = app.query_one("#chat", ChatScroll)
        await pilot.press("pageup")
        await pilot.pause(0.3)
        reading, _ = chat.reading_place()
        assert reading is not app.current_reply and not chat.following
        await pilot.resize_terminal(120, 30)
        await pilot.pause(1.0)
        assert not chat.following and chat.reading_place()[0] is reading
        await pilot.resize_terminal(80, 30)
        await pilot.pause(1.0)
        assert not chat.following and chat.reading_place()[0] is reading
        await pilot.press("escape")

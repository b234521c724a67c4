"""Pilot tests of the Nexus app against the scripted OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from scripted_server import Reply

from nexus.app import NexusApp
from nexus.config import load_config
from nexus.replies import UNSENT_STATE
from nexus.widgets import AssistantMessage, EventLog, MemoryTree, Notice, UserMessage


def make_config(server_url: str, tmp_path: Path, over: dict | None = None):
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    cfg.set("server", "base_url", server_url)
    cfg.set("server", "api_key", "sk-test")
    cfg.set("models", "chat", "test-model")
    cfg.set("memory", "judge", "embedding")
    cfg.set("memory", "idle_reorganize_seconds", 0)
    cfg.set("web", "enabled", False)
    for (section, key), value in (over or {}).items():
        cfg.set(section, key, value)
    return cfg


def chat_reply(text: str):
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply(text, chunk_delay=0.0)
    return respond


async def wait_for(pilot, cond, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            app = pilot.app
            raise AssertionError("condition not reached; notices:\n" + notices(app) + "\nlog:\n" + log_text(app))
        await pilot.pause(0.05)


async def ready(app, pilot):
    await wait_for(pilot, lambda: app.session is not None and app.embedder_state == "ready")


async def type_and_send(pilot, app, text: str):
    inp = app.query_one("#prompt")
    inp.value = text
    await pilot.press("enter")


def log_text(app) -> str:
    return "\n".join(t for _, t in app.query_one(EventLog).history)


def notices(app) -> str:
    return "\n".join(n.plain for n in app.query(Notice))


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


async def test_a_message_streams_a_reply_and_is_remembered(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Hello! Here is **bold** and code:\n\n```python\nprint('hi')\n```"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: app.session.tree and len(app.session.tree.exchanges) == 1)
        replies = list(app.query(AssistantMessage))
        assert replies and "print('hi')" in replies[-1].text
        assert replies[-1].code_blocks() == ["print('hi')\n"]
        assert list(app.query(UserMessage))
        # streamed: the request asked for a stream, and arrived chunk by chunk
        chat = [r for r in server.chat_requests() if not r.get("response_format")]
        assert chat[-1]["stream"] is True
        # the tree pane gained the node; the log shows the retrieval report
        await wait_for(pilot, lambda: "remembered exchange #0" in log_text(app))
        tree_pane = app.query_one(MemoryTree)
        assert "ROOT (1 exchange)" in str(tree_pane.root.label)  # singular
        assert "retrieval:" in log_text(app)
        # a second message: its system prompt carries the memory of the first
        await type_and_send(pilot, app, "What is my cat called?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        system = [r for r in server.chat_requests() if not r.get("response_format")][-1]["messages"][0]["content"]
        assert "Miso" in system
        # the sentence index follows each reply, in the background
        await wait_for(pilot, lambda: app.session.tree.pending_parts() == 0)
        assert app.session.tree.vdb.message_parts(["x1-user"])  # read after the reply it follows


async def test_the_log_says_when_the_memory_block_is_the_outline(server, tmp_path, minilm, data_dir):
    """ "What do you know about me?" sent the conversation's outline, and the log said
    "retrieval: 0 exchanges in 0 branches, 457/1624 tokens": nothing recalled, and yet
    tokens sent (a trial)."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My tax report is due on March 14.")
        await wait_for(pilot, lambda: "remembered exchange #0" in log_text(app))
        await type_and_send(pilot, app, "What do you know about me?")
        await wait_for(pilot, lambda: "remembered exchange #1" in log_text(app))
        system = [r for r in server.chat_requests() if not r.get("response_format")][-1]["messages"][0]["content"]
        assert "March 14" in system  # the outline was sent
        line = [t for t in log_text(app).splitlines() if t.startswith("retrieval:")][-1]
        assert "the conversation's outline" in line and "0 exchanges" not in line, line


async def test_the_header_names_the_model_the_server_lists(server, tmp_path, minilm, data_dir):
    server.state.models = ["qwen2.5-7b-instruct", "other-model"]
    server.respond(chat_reply("Hello."))
    app = NexusApp(make_config(server.base_url, tmp_path, {("models", "chat"): ""}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        # no model configured: the start-up probe's list names it before any message
        await wait_for(pilot, lambda: " · qwen2.5-7b-instruct · " in app.sub_title)
        assert app.session.model == "qwen2.5-7b-instruct"  # the session's too: its memory asks it
        app.listed_model = app.model_found = ""  # and, unknown at start, the reply's model names it
        app.session.model = None
        app.update_header()
        assert " · auto · " in app.sub_title
        await type_and_send(pilot, app, "Hi there.")
        await wait_for(pilot, lambda: app.session.tree and len(app.session.tree.exchanges) == 1)
        await wait_for(pilot, lambda: " · qwen2.5-7b-instruct · " in app.sub_title)
        # a new session asks nothing yet: the title still names the model ("auto", a trial)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session.path.name != "s.db"
                       and app.session.tree is not None)
        await pilot.pause(0.3)
        assert " · qwen2.5-7b-instruct · " in app.sub_title, app.sub_title


async def test_an_embedding_model_listed_first_is_not_taken_for_the_chat(server, tmp_path, minilm, data_dir):
    """Ollama lists its pulls newest first and LM Studio lists its bundled embedding model
    beside the chat models: with no model named, Nexus chatted with nomic-embed-text, and
    every reply failed with "does not support chat" (a trial)."""
    server.state.models = ["nomic-embed-text:latest", "text-embedding-bge-m3", "llama3.2:3b", "qwen3:4b"]
    server.respond(chat_reply("Hello."))
    app = NexusApp(make_config(server.base_url, tmp_path, {("models", "chat"): ""}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: " · llama3.2:3b · " in app.sub_title)
        app.session.model = None  # as a session that had not heard of the list: it asks itself
        await type_and_send(pilot, app, "Hi there.")
        await wait_for(pilot, lambda: app.session.tree and len(app.session.tree.exchanges) == 1)
        assert {r["model"] for r in server.chat_requests()} == {"llama3.2:3b"}


def test_the_first_chat_model_skips_embedding_and_reranking_models():
    from nexus.lifecycle import first_chat_model

    embedders = ["text-embedding-nomic-embed-text-v1.5", "mxbai-embed-large:latest", "all-minilm:l6-v2", "bge-m3:latest",
                 "BAAI/bge-reranker-v2-m3", "intfloat/e5-mistral-7b-instruct", "thenlper/gte-large"]
    for chat in ["qwen2.5-7b-instruct", "llama3.2:3b", "meta-llama/Llama-3.1-8B-Instruct", "gemma-3-270m-it"]:
        assert first_chat_model([*embedders, chat, "other"]) == chat
    assert first_chat_model(embedders) == embedders[0]  # only embedders: the server's answer will say why
    assert first_chat_model([]) is None


async def test_help_wraps_each_description_under_itself(server, tmp_path, minilm, data_dir):
    import os

    from rich.console import Console

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/help")
        await wait_for(pilot, lambda: "Commands:" in notices(app))
        note = [n for n in app.query(Notice) if "Commands:" in n.plain][-1]
        # the keys as the README says them, not Textual's names ("ctrl+up", "escape")
        assert "Ctrl+P: command palette" in note.plain and "earlier / later prompts" in note.plain
        assert "Esc: cancel" in note.plain and "Ctrl+↑: select previous message" in note.plain
        assert "F7: select the whole input" in note.plain  # a TextArea key, not in the keymap
        console = Console(width=70, color_system=None, record=True, file=open(os.devnull, "w"))
        console.print(note.content)  # the table, as Rich draws it
        lines = console.export_text().splitlines()
        row = next(i for i, line in enumerate(lines) if line.lstrip().startswith("/delete <name>"))
        column = lines[row].index("delete a session")
        follow = lines[row + 1]  # "...never the open one)" goes on in the description's column
        assert follow[:column].strip() == "" and follow[column:].strip(), lines[row:row + 2]
        assert any(line.strip().startswith("Ctrl+B") for line in lines)  # the keys, one a line
        # a 60-column terminal's chat: "shift+enter,ct" / "rl+j"; a 40-column one's: "ctrl+l" / "eft" (trials)
        for width in range(28, 62, 2):
            narrow = Console(width=width, color_system=None, record=True, file=open(os.devnull, "w"))
            narrow.print(note.content)
            text = narrow.export_text()
            for key in ("Ctrl+J", "Shift+Enter", "PageDown", "Ctrl+←", "Ctrl+↓"):
                assert key in text, (width, key)


async def test_help_lists_every_key_bound_and_only_keys_bound(server, tmp_path, minilm, data_dir):
    """/help's keys lacked Ctrl+C, bound (copy; with nothing selected it stops the reply or
    says how to quit). Every key the app binds, and the input's own Nexus keys, are listed;
    each key listed is bound (by the app, the screen, the input or the tree pane)."""
    from nexus.keys import PROMPT_KEYS, key_said
    from nexus.treepane import MemoryTree

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/help")
        await wait_for(pilot, lambda: "Commands:" in notices(app))
        # compared as the chat names keys ("Ctrl+C", "Esc", "Shift+Enter or Ctrl+J")
        listed = {one.strip() for keys, _ in app.help_keys() for part in keys.split(" / ") for one in part.split(" or ")}
        prompt = app.query_one("#prompt")
        app_keys = {key_said(k) for k in app._bindings.key_to_bindings}
        own = {key_said(one) for k in PROMPT_KEYS for one in k.key.split(",")}
        assert "Ctrl+C" in app_keys and not (app_keys | own) - listed, (app_keys | own) - listed
        bound = (app_keys | {key_said(k) for k in app.screen._bindings.key_to_bindings}
                 | {key_said(k) for k in prompt._bindings.key_to_bindings}
                 | {key_said(k) for k in app.query_one(MemoryTree)._bindings.key_to_bindings} | {"Enter", "↑", "↓"})
        assert not listed - bound, listed - bound
        assert "Ctrl+C: copy the text selected" in [n for n in app.query(Notice) if "Commands:" in n.plain][-1].plain


async def test_a_slash_alone_lists_the_commands(server, tmp_path, minilm, data_dir):
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("slash", "enter")  # typed, as a user does: "/" and Enter
        await wait_for(pilot, lambda: "Commands:" in notices(app))
        assert "Unknown command" not in notices(app) and "/help" in notices(app)
        await type_and_send(pilot, app, "/frobnicate")  # a name that is no command is still said
        await wait_for(pilot, lambda: "Unknown command /frobnicate" in notices(app))


async def test_a_message_may_start_with_a_slash(server, tmp_path, minilm, data_dir):
    """A path is a message ("/usr/bin/python3 crashes…"), "//" sends the rest from its
    second "/", and an unknown command is given back in the input with that hint (it was
    refused, and the input cleared: such a message could not be sent at all)."""
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format") else Reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(100, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/usr/bin/python3 crashes when I run it, why?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "//tmp is full")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert [x.user for x in app.session.tree.exchanges] == ["/usr/bin/python3 crashes when I run it, why?",
                                                                "/tmp is full"]
        await type_and_send(pilot, app, "/tmp is full")
        await wait_for(pilot, lambda: "Unknown command /tmp" in notices(app))
        assert "start with // to send it as a message" in notices(app)
        assert app.query_one("#prompt").text == "/tmp is full"
        assert "Unknown command /usr" not in notices(app)
        # given back selected: a correction with the arrows keeps it, a new line typed replaces it
        # (typed after "/undo", "/edit" made "/undo/edit", which went to the model as a path)
        await pilot.press("slash", "s", "t", "a", "t", "s")
        assert app.query_one("#prompt").text == "/stats"
        await type_and_send(pilot, app, "/undo")
        await wait_for(pilot, lambda: "Unknown command /undo." in notices(app))
        await pilot.press("end", "s")
        assert app.query_one("#prompt").text == "/undos"


def test_a_reorganisation_that_changes_nothing_says_why():
    """It said "0 merged, 0 archived…  /undo-reorganize restores the tree" with nothing to
    undo and no reason (found in a new-user trial)."""
    from nexus.memory_commands import reorganize_summary

    base = {"merged": 0, "pruned": 0, "vetoed": 0, "skipped": 0, "duration_secs": 0.01}
    one = reorganize_summary({**base, "candidates": 1, "pairs": 0}, 0.55)
    assert "only topics off the active path are merged" in one and "there is 1 such" in one
    assert "/undo-reorganize" not in one
    apart = reorganize_summary({**base, "candidates": 6, "pairs": 0}, 0.7)
    assert "no two of the 6 topics off the active path (the current one" in apart  # "has left" read as "has" (a trial)
    assert "are alike enough (cosine ≥ 0.7)" in apart
    vetoed = reorganize_summary({**base, "vetoed": 2, "candidates": 6, "pairs": 2}, 0.55)
    assert "the 2 similar pairs were vetoed or skipped" in vetoed
    # "the 1 similar pairs were vetoed" (a trial: /reorganize --threshold 0.3 on drift)
    lone = reorganize_summary({**base, "vetoed": 1, "candidates": 6, "pairs": 1}, 0.3)
    assert "the 1 similar pair was vetoed or skipped" in lone, lone
    undone = reorganize_summary({**base, "kept_apart": 2, "candidates": 6, "pairs": 2}, 0.55)
    assert "the 2 similar pairs are kept apart: an undo took their merge back" in undone
    assert "vetoed or skipped" not in undone
    # an idle run after an undo: one pair vetoed, two an undo took apart (a trial said all three were vetoed)
    mixed = reorganize_summary({**base, "vetoed": 1, "kept_apart": 2, "candidates": 9, "pairs": 3}, 0.55)
    assert ("Nothing changed: of the 3 similar pairs, 1 was vetoed (the log says why), and 2 are kept apart: "
            "an undo took their merge back") in mixed, mixed
    pruned = reorganize_summary({**base, "pruned": 2, "archived": [3, 7], "candidates": 6, "pairs": 0}, 0.55)
    assert "2 archived" in pruned and "Archived: #3, #7." in pruned  # which, not only how many (a trial)
    merged = reorganize_summary({**base, "merged": 1, "candidates": 6, "pairs": 2}, 0.55)
    assert merged.endswith("/undo-reorganize restores the tree.") and "Nothing changed" not in merged


def test_two_merged_topics_of_one_name_are_told_apart_in_the_log():
    """'"Ball Python Eaten" absorbed "Ball Python Eaten"' (a trial): alike names bring the
    exchanges each held."""
    from nexus.treeinfo import reorganize_lines

    same = {"into_name": "Ball Python Eaten", "absorbed_name": "Ball Python Eaten", "similarity": 0.8,
            "judge": "embedding", "reason": "alike", "into_span": "#3–7", "absorbed_span": "#12–15"}
    other = {**same, "absorbed_name": "Snake Feeding"}
    lines = [text for text, _ in reorganize_lines({"merges": [same, other], "vetoes": [same]})]
    assert lines[0].startswith('merge: "Ball Python Eaten" (#3–7) absorbed "Ball Python Eaten" (#12–15) (cos 0.80')
    assert lines[1].startswith('merge: "Ball Python Eaten" absorbed "Snake Feeding" (cos')
    assert lines[2].startswith('veto: "Ball Python Eaten" (#3–7) and "Ball Python Eaten" (#12–15) kept apart')


def test_a_merge_line_names_the_branches_its_reason_is_about(minilm):
    """A pair judged alike can be parts of topics merged earlier in the round: the log said
    '"Roll Kubernetes Deployment" absorbed "Kubernetes Stuck CrashLoopBackOff" (cos 0.77,
    …: both named Roll Kubernetes Deployment)', false of the two it named (a trial on the
    needle scenario's 200 exchanges). The line now names the two the reason is about."""
    from nexus.treeinfo import reorganize_lines
    from trace_core.scenarios import _add_all, _tree, needle_talk

    tree = _tree("embedding", None, None, minilm, None)
    _add_all(tree, needle_talk())
    lines = [text for text, _ in reorganize_lines(tree.reorganize())]
    named = [(line, line.split("; both named ")[1][:-1]) for line in lines
             if line.startswith("merge:") and "; both named " in line]
    # the case of the trial: the two merged are not the two of that name
    assert any(line.split(" (cos")[0].count(f'"{name}"') < 2 for line, name in named), named
    for line, name in named:
        assert line.split(", embedding judge:")[0].count(f'"{name}"') >= 2, line


def test_search_results_wrap_under_their_own_text():
    import os

    from rich.console import Console

    from nexus.widgets import two_columns

    long = "ROOT → Training Marathon October  #6 user: How should I taper before the marathon? \x1b[31m"
    console = Console(width=50, color_system=None, record=True, file=open(os.devnull, "w"))
    console.print(two_columns([("Memory search: taper", [("0.71", long), ("0.55", "short")])]))
    text = console.export_text()
    lines = text.splitlines()
    assert lines[0].strip() == "Memory search: taper"
    column = lines[1].index("ROOT")
    assert lines[1].lstrip().startswith("0.71") and lines[2][:column].strip() == ""  # wrapped under itself
    assert "␛[31m" in text and "\x1b" not in text  # escapes shown, not sent


async def test_markup_and_escape_sequences_are_shown_as_text(server, tmp_path, minilm, data_dir):
    evil = "[bold red]not markup[/] \x1b[31mred\x1b[0m \x1b]0;title\x07 done"
    server.respond(chat_reply(evil))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "say something odd")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        reply = list(app.query(AssistantMessage))[-1]
        shown = reply.body.source
        assert "[bold red]not markup[/]" in shown
        assert "\x1b" not in shown and "␛[31m" in shown


def test_a_reply_of_markdown_syntax_only_is_shown_as_written():
    """The reply "-" (a small model's answer) drew as an empty line: nothing said the
    model had answered at all."""
    import io

    from rich.console import Console
    from rich.markdown import Markdown

    from nexus.text import visible_markdown

    def drawn(text: str) -> str:
        console = Console(width=40, color_system=None, record=True, file=io.StringIO())
        console.print(Markdown(text))
        return console.export_text().strip()

    for reply in ("-", "*", "#", "---", ">", "1.", "2)", "+ -"):
        assert drawn(reply) == "" or reply == "---"  # what Markdown alone draws
        assert drawn(visible_markdown(reply)) == reply
    for reply in ("- a list", "# Title", "42", "ok."):  # text with words is Markdown as ever
        assert visible_markdown(reply) == reply


async def test_the_tree_pane_leaves_the_chat_room_in_a_small_terminal_and_grows_in_a_wide_one(
        server, tmp_path, minilm, data_dir):
    """At 40 columns the tree kept 29 and the chat 9; at 250 it stayed 42 and cut names."""
    widths = {}
    for cols, rows in ((40, 12), (60, 20), (80, 24), (110, 32), (150, 40), (250, 40)):
        app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
        async with app.run_test(size=(cols, rows)) as pilot:
            await ready(app, pilot)
            widths[cols] = (app.query_one("#tree").outer_size.width, app.query_one("#chat").outer_size.width)
            if rows == 12:  # and most of its height (the log kept 4 of 12 rows, the chat 2)
                assert app.query_one("#chat").outer_size.height >= 5 and app.query_one("#log").outer_size.height <= 2
    assert widths[40][1] >= 22 and widths[60][1] >= 36  # the chat keeps most of a small terminal
    assert widths[80][0] == 28 and widths[110][0] == widths[150][0] == 42  # as before at the usual sizes
    assert 60 <= widths[250][0] <= 72


async def test_commands(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in ["My sourdough starter smells like acetone.", "How do I roll back a kubernetes deployment?",
                     "What flour is best for a sourdough starter?", "ok thanks"]:
            n = len(app.session.tree.exchanges)
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        await type_and_send(pilot, app, "/search sourdough")
        await wait_for(pilot, lambda: "Memory search: sourdough" in notices(app))
        assert "ROOT → " in notices(app)
        # each hit: its branch on a line, its message under it (one ran on beside a short path)
        found = notices(app).split("Memory search: sourdough")[1]
        assert re.findall(r"ROOT → [^\n#]*\n#\d+ (?:user|assistant): ", found), found
        assert not re.search(r"ROOT → [^\n]*#\d+ (?:user|assistant):", found), found
        await type_and_send(pilot, app, "/tree --messages")
        # exchanges, as the tree pane counts them, not the TRACE README's messages
        await wait_for(pilot, lambda: "ROOT [0:3] (4 exchanges)" in notices(app))
        await type_and_send(pilot, app, "/frobnicate")
        await wait_for(pilot, lambda: "Unknown command /frobnicate" in notices(app))
        await type_and_send(pilot, app, "/reorganize --threshold banana")
        await wait_for(pilot, lambda: "Usage: /reorganize" in notices(app))
        await type_and_send(pilot, app, "/reorganize --threshold 0.3 --prune")
        await wait_for(pilot, lambda: "Reorganised:" in notices(app))
        await pilot.pause(0.3)
        # the log says the run's counts once: "reorganize: 0 merged…" then "Reorganised: 0 merged…" (a trial)
        from nexus.widgets import EventLog

        said = [t for lv, t in app.query_one(EventLog).history if lv != "debug" and " merged, " in t]
        assert len(said) == 1 and said[0].startswith("Reorganised:"), said
        await type_and_send(pilot, app, "/undo-reorganize")
        await wait_for(pilot, lambda: "undone" in notices(app) or "Nothing undone" in notices(app))
        export = tmp_path / "my exports" / "export.json"  # a path with a space, unquoted (/load refused it)
        await type_and_send(pilot, app, f"/save {export}")
        await wait_for(pilot, lambda: export.exists())
        assert json.loads(export.read_text())["format"] == "trace-ctree"
        await type_and_send(pilot, app, f"/load {export}")
        await wait_for(pilot, lambda: "Imported" in notices(app))
        await wait_for(pilot, lambda: app.session is not None and app.session.path != tmp_path / "s.db"
                       and app.session.tree is not None and len(app.session.tree.exchanges) == 4)
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "exchanges: 4" in notices(app))
        # the label says the unit: "exchanges: 4 exchanges" said it twice
        assert re.search(r"^ *exchanges: 4$", notices(app), re.M)
        assert "Statistics of this session:\n" in notices(app)  # a heading, not run on from the output above
        assert "memory model: (none: judge embedding)" in notices(app)  # no model is asked about the tree
        # a session just opened: its history is counted now, not "0" until the first reply
        assert "last memory block: (no reply yet in this window)" in notices(app)
        history = int(re.search(r"whole history: ([\d,]+) tokens", notices(app)).group(1).replace(",", ""))
        assert history == app.session.synth.full_history_tokens() > 0
        # in words, not keys ("last_memory_tokens" read as jargon), and what waits unanswered
        assert not any(key in notices(app) for key in ("last_memory_tokens", "full_history", "memory_model",
                                                       "system_prompt"))
        assert "without an answer: none" in notices(app)
        await type_and_send(pilot, app, "/undo")
        # both undo commands: the one named alone was /undo-reorganize, for a user undoing a /retry (a trial)
        await wait_for(pilot, lambda: "Unknown command /undo. Did you mean /undo-reorganize or /undo-retry?"
                       in notices(app))
        await type_and_send(pilot, app, "/help")
        await wait_for(pilot, lambda: "/undo-reorganize" in notices(app))


async def test_escape_cancels_a_reply_and_keeps_the_partial_text(server, tmp_path, minilm, data_dir):
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("", chunks=[f"word{i} " for i in range(200)], chunk_delay=0.05)

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "count for me")
        await wait_for(pilot, lambda: app.current_reply is not None and "word3" in app.current_reply.text)
        # browsing the tree while it streams: Esc there only comes back to the input (a
        # trial's Esc in the tree pane stopped the reply)
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: app.focused is app.query_one("#tree"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.focused is app.query_one("#prompt"))
        assert app.turn is not None and not app.session.tree.exchanges
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        stored = app.session.tree.exchanges[0].assistant
        assert "word0" in stored and "[reply cancelled]" in stored and "word199" not in stored
        reply = list(app.query(AssistantMessage))[-1]
        assert "word0" in reply.text
        # Ctrl+R has nothing to send: it says /retry asks again (a trial read the bare
        # "Nothing to resend." as the message lost)
        await wait_for(pilot, lambda: app.turn is None)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "Nothing to resend: #0's reply was cut off" in notices(app))
        assert "/retry asks again" in notices(app)


async def test_a_cancelled_retry_leaves_the_exchange_it_was_to_replace(server, tmp_path, minilm, data_dir):
    """Esc (or Ctrl+Q) during /retry replaced a good answer with the partial one, marked
    cancelled (found in a trial: users press Esc exactly when they dislike the new reply)."""
    answers = iter([Reply("Biscuit is a beagle."), Reply("", chunks=[f"word{i} " for i in range(200)],
                                                         chunk_delay=0.05)])
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format") else next(answers))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My dog Biscuit is a beagle.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1 and app.turn is None)
        await type_and_send(pilot, app, "/retry")
        await wait_for(pilot, lambda: app.current_reply is not None and "word3" in app.current_reply.text)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.turn is None)
        await wait_for(pilot, lambda: "not kept" in list(app.query(AssistantMessage))[-1].note)
        assert [(x.user, x.assistant) for x in app.session.tree.exchanges] == [
            ("My dog Biscuit is a beagle.", "Biscuit is a beagle.")]
        assert app.session.kept == []


async def test_server_down_then_up(tmp_path, minilm, data_dir):
    from scripted_server import ScriptedServer

    srv = ScriptedServer()
    port = srv.port
    srv.httpd.server_close()  # nothing listens yet
    app = NexusApp(make_config(f"http://127.0.0.1:{port}/v1", tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Are you there?")
        await wait_for(pilot, lambda: "No reply" in notices(app))
        assert f"127.0.0.1:{port}" in notices(app)
        assert app.session.pending == "Are you there?"
        assert len(app.session.tree.exchanges) == 0
        # the message says it got no answer (where it stands, not just in the notice)
        await wait_for(pilot, lambda: [m.state for m in app.query(UserMessage) if m.text == "Are you there?"]
                       == [UNSENT_STATE])
        # the app stays usable
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "exchanges: 0" in notices(app))
        # the server comes up on the same port; the message is resent with a key
        with ScriptedServer(port=port) as up:
            up.respond(chat_reply("Yes, here now."))
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].user == "Are you there?"
        assert app.session.pending is None
        # sent again, the message is shown once: above its answer, not also where it failed
        assert [m.state for m in app.query(UserMessage) if m.text == "Are you there?"] == [""]


async def test_a_corrupt_session_is_reported_and_left_untouched(server, tmp_path, minilm, data_dir):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"definitely not sqlite" * 50)
    before = bad.read_bytes()
    app = NexusApp(make_config(server.base_url, tmp_path), bad, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "Cannot open the session" in notices(app))
        assert "not a SQLite database" in notices(app) and "/new" in notices(app)
        assert app.session is None
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None)
    assert bad.read_bytes() == before


async def test_tree_pane_keeps_expansion_and_marks_injected_branches(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Sure."))
    cfg = make_config(server.base_url, tmp_path, {("memory", "recent_exchanges"): 1})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in ["My sister Sarah is allergic to peanuts.", "How do I roll back a kubernetes deployment?",
                     "What is Sarah allergic to?"]:
            n = len(app.session.tree.exchanges)
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        tree_pane = app.query_one(MemoryTree)
        await wait_for(pilot, lambda: any("★" in str(n.label) for n in tree_pane.root.children))
        first = tree_pane.root.children[0]
        first.expand()
        await pilot.pause(0.1)
        app.refresh_tree()
        await pilot.pause(0.1)
        assert tree_pane.root.children[0].is_expanded


async def test_ingest_command_describes_an_image_into_memory(server, tmp_path, minilm, data_dir):
    from PIL import Image

    server.state.catalogue = {"test-model": {"type": "llm", "loaded": ["test-model"]}, "qwen2-vl": {"type": "vlm"}}

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            return Reply("A lighthouse on a rocky coast at sunset.")
        return chat_reply("ok")(req)

    server.respond(respond)
    img = tmp_path / "lighthouse.jpg"
    Image.new("RGB", (300, 200), (10, 20, 200)).save(img)
    cfg = make_config(server.base_url, tmp_path, {("models", "vision"): "qwen2-vl"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"/ingest {img}")
        await wait_for(pilot, lambda: "Ingested lighthouse.jpg" in notices(app))
        assert app.session.tree.exchanges[-1].assistant == "A lighthouse on a rocky coast at sunset."
        assert "model: load qwen2-vl" in log_text(app) and "model: load test-model" in log_text(app)
        await type_and_send(pilot, app, f"/ingest {tmp_path / 'missing.png'}")
        await wait_for(pilot, lambda: "no such file" in notices(app))
        # a glob that matches nothing is said once ("… 0 images described" under it said it twice: a trial)
        said = notices(app).count("0 images described")
        await type_and_send(pilot, app, f"/ingest {tmp_path / '*.gif'}")
        await wait_for(pilot, lambda: "No images found" in notices(app)
                       and all(w.is_finished for w in app.workers if w.name == "ingest_worker"))
        await pilot.pause(0.1)
        assert notices(app).count("0 images described") == said
        await type_and_send(pilot, app, "/ingest")
        await wait_for(pilot, lambda: "Usage: /ingest" in notices(app))


async def test_idle_consolidation_runs_in_the_background(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    cfg = make_config(server.base_url, tmp_path, {("memory", "idle_reorganize_seconds"): 0.5})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sourdough starter smells like acetone.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await wait_for(pilot, lambda: "idle: reorganising memory" in log_text(app))
        await wait_for(pilot, lambda: "reorganize:" in log_text(app) and "merged" in log_text(app))
        await wait_for(pilot, lambda: "Reorganised:" in log_text(app))
        # nobody asked and nothing changed: the log says it, the chat stays the conversation's
        # (an idle "Reorganised: 0 merged … Nothing changed" sat between exchanges: a trial)
        assert "Reorganised:" not in notices(app)


async def test_an_older_session_gets_its_sentence_index_in_the_background(server, tmp_path, minilm, data_dir):
    from trace_core import CTree

    path = tmp_path / "older.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    for u, a in [("My cat is called Miso. She is three.", "Miso is a lovely name. Three is a fun age."),
                 ("I also have a dog named Rex.", "Rex and Miso, quite the household!")]:
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}])
    assert tree.pending_parts() == 2  # as a session written before the sentence index
    tree.vdb.close()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: app.session.tree.pending_parts() == 0)
        await wait_for(pilot, lambda: "indexed the sentences of 2 earlier exchanges" in log_text(app))
        assert app.session.tree.vdb.message_parts(["x0-user"])["x0-user"][0] == [
            "My cat is called Miso.", "She is three."]


async def test_a_small_terminal_gives_the_chat_the_room(server, tmp_path, minilm, data_dir):
    """At 80 × 24 the tree pane took 42 columns, the log 10 rows, and the title lost its
    end ("embedder loading/ready") to the server's address: now narrower panes, and the
    address leaves the title first. A wide terminal keeps the full layout."""
    cfg = make_config(server.base_url, tmp_path)
    for size, tree_cols, log_rows, address in (((80, 24), 28, 5, False), ((140, 45), 42, 10, True)):
        app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
        async with app.run_test(size=size) as pilot:
            await ready(app, pilot)
            await pilot.pause(0.1)
            assert app.query_one("#tree").outer_size.width == tree_cols
            assert app.query_one("#log").outer_size.height == log_rows
            assert app.sub_title.startswith("embedder ready") if size[0] < 110 else app.sub_title.endswith("embedder ready")
            assert (server.base_url in app.sub_title) is address
            if size[0] < 110:  # which session, before the model's name (a trial lost it at 60 columns)
                assert app.sub_title.split(" · ")[:2] == ["embedder ready", "s"], app.sub_title
            assert app.query_one("#chat").size.width >= size[0] - tree_cols - 2
            # the tree pane's title keeps its counts whole (narrow: the depth goes, exchanges first)
            assert app.query_one("#tree").border_title == ("0 exchanges · 0 topics" if size[0] < 110
                                                           else "depth 0 · 0 topics · 0 exchanges")
    # resized while running: the title follows at once (it was one resize behind)
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(140, 45)) as pilot:
        await ready(app, pilot)
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.1)
        assert app.sub_title.startswith("embedder ready") and server.base_url not in app.sub_title
        await pilot.resize_terminal(140, 45)
        await pilot.pause(0.1)
        assert app.sub_title.endswith("embedder ready") and server.base_url in app.sub_title


async def test_the_tree_command_cuts_long_lines_instead_of_wrapping_them(server, tmp_path, minilm, data_dir):
    """In a narrow chat, /tree --messages wrapped its long lines to column 0, losing the
    │ guides; each line is now cut with "…" at the pane's edge."""
    server.respond(chat_reply("Feed it twice a day once it doubles reliably within six hours."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Should I feed my sourdough starter twice a day now that it is active?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/tree --messages")
        await wait_for(pilot, lambda: "ROOT [0:0] (1 exchange)" in notices(app))
        await pilot.pause(0.2)
        drawing = [n for n in app.query(Notice) if "ROOT [0:0]" in n.plain][-1]
        lines = drawing.plain.splitlines()
        assert any(len(line) > drawing.content_size.width for line in lines)  # longer than the pane
        assert drawing.content_size.height == len(lines)  # none wrapped


async def test_search_lists_no_unrelated_messages(server, tmp_path, minilm, data_dir):
    """/search listed messages at cosine 0.24-0.28 for a subject never mentioned (found in
    a new-user trial); hits start where the memory block's evidence does (0.30)."""
    from nexus.memory_service import SEARCH_FLOOR

    server.respond(chat_reply("Feed it daily with equal weights of flour and water."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "How do I keep my sourdough starter alive?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert SEARCH_FLOOR == 0.30
        assert app.session.search("my cat is hungry") == []  # the reply sits at 0.29 from it
        assert app.session.search("feeding a sourdough starter")  # what was said is found
        await type_and_send(pilot, app, "/search my cat is hungry")
        await wait_for(pilot, lambda: 'Nothing in memory matches "my cat is hungry"' in notices(app))


async def test_search_finds_the_words_themselves(server, tmp_path, minilm, data_dir):
    """/search Lübeck, /search TSSOP: "Nothing in memory matches", with the word in a
    message; /search Hoffmann ranked "What is Jonas's job?" above the Dr. Hoffmann message
    (a trial). A message holding the query's words is found, and comes first."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for n, text in enumerate(["My grandmother grew up in Lübeck and still bakes marzipan.",
                                  "The amplifier board uses a TSSOP-20 package, hard to solder.",
                                  "My dentist is Dr. Hoffmann on Elm Street.",
                                  "What is Jonas's job?"]):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        for query, text in (("Lübeck", "grew up in Lübeck"), ("TSSOP", "TSSOP-20"), ("Hoffmann", "Dr. Hoffmann")):
            hits = app.session.search(query)
            assert hits and text in hits[0].text, (query, [h.text for h in hits])
        await type_and_send(pilot, app, "/search TSSOP")
        await wait_for(pilot, lambda: "Memory search: TSSOP  (≡ holds its words)" in notices(app))
        assert app.session.search("my cat is hungry") == []  # neither its words nor its meaning


async def test_search_says_which_hit_a_later_message_corrected(server, tmp_path, minilm, data_dir):
    """"/search where does my sister live" showed Porto first, unmarked, above the message
    that corrected it (a trial): the hit says it was superseded, as the memory block does."""
    from trace_core import CTree

    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    for user, reply in (("My sister Ana lives in Porto.", "Porto is lovely."),
                        ("I bought a green bike.", "Nice."),
                        ("Actually, my sister Ana moved to Lisbon last month.", "Lisbon, noted.")):
        tree.add([{"role": "user", "content": user}, {"role": "assistant", "content": reply}])
    tree.close()
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/search where does my sister live")
        await wait_for(pilot, lambda: "Memory search: where does my sister live" in notices(app))
        said = notices(app)
        porto = said.index("#0 user: My sister Ana lives in Porto.")
        assert said[:porto].rstrip().endswith("[superseded by #2]")
        lisbon = said.index("#2 user: Actually")
        assert "superseded" not in said[said.rindex("\n", 0, lisbon - 1):lisbon]


async def test_engine_events_read_as_sentences_in_the_log(server, tmp_path, minilm, data_dir):
    """The log pane showed "TopicsFrozen(level='debug', topics=(…))"; a branch's line counted
    its lines ("4 entries", date lines too) where the inspector counted 3 exchanges."""
    from trace_core import events as tev

    server.respond(chat_reply("Miso is a lovely name."))
    app = NexusApp(make_config(server.base_url, tmp_path, {("memory", "recent_exchanges"): 0}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.post_event(tev.TopicsFrozen(("Cat Miso", "Bike Gazelle"), level="debug"))
        app.post_event(tev.GroupRenamed("Old Name", "Cat Miso · Bike Gazelle", "g1", level="debug"))
        for n, text in enumerate(["My cat is called Miso.", "How do I roll back a Kubernetes deployment?",
                                  "What is my cat called?"], 1):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n)
        await wait_for(pilot, lambda: "  branch " in log_text(app))
        logged = log_text(app)
        assert "summarised 2 topics that left the active path: Cat Miso, Bike Gazelle" in logged
        assert "group renamed: Old Name → Cat Miso · Bike Gazelle" in logged
        assert "stored exchange #0 in ROOT → " in logged
        assert "level=" not in logged and "(level" not in logged
        branch = next(line for line in logged.splitlines() if line.startswith("  branch "))
        assert branch.endswith("(1 exchange)"), branch
        # recent_exchanges = 0 sends no recent exchanges ([-0:] sent the whole history, so
        # retrieval found nothing it did not already have): the cat comes from memory
        system = [r for r in server.chat_requests() if not r.get("response_format")][-1]["messages"][0]["content"]
        assert "Most recent exchanges" not in system and "Miso" in system


async def test_commands_read_arguments_alike(server, tmp_path, minilm, data_dir):
    """A trial: "/stats extra" and "/quit now" ran while "/check extra" showed the usage;
    "/search<Tab>foo" was an unknown command; /find echoed a 5,000-character query twice;
    /load of a folder said "[Errno 21] Is a directory"."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for command in ("stats", "sessions", "clear", "help", "quit"):
            await type_and_send(pilot, app, f"/{command} extra")
            await wait_for(pilot, lambda command=command: f"Usage: /{command} (it takes no arguments)" in notices(app))
        assert app.is_running  # "/quit extra" did not quit
        await type_and_send(pilot, app, "/search\tcats")
        await wait_for(pilot, lambda: 'Nothing in memory matches "cats"' in notices(app))
        assert "Unknown command" not in notices(app)
        await type_and_send(pilot, app, "/find " + "word " * 1000)
        await wait_for(pilot, lambda: "/find word word" in notices(app))
        assert len(notices(app).split("/find word")[-1]) < 400
        await type_and_send(pilot, app, f"/load {tmp_path}")
        await wait_for(pilot, lambda: f"Cannot load {tmp_path}: it is a folder" in notices(app))
        assert "Errno" not in notices(app)


async def test_a_failed_placement_call_is_said_once_in_the_log(server, tmp_path, minilm, data_dir):
    """The memory model's failure at placement was logged twice: once as its own line,
    once in the judge's (a trial). The judge's line says it, with what decided instead."""
    def respond(req):
        if req.get("response_format") or "New exchange" in req["messages"][-1]["content"]:
            return Reply("this is not JSON")  # every memory-model call fails
        return Reply("Noted.")

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path, {("memory", "judge"): "llm"}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await wait_for(pilot, lambda: "LLM failed" in log_text(app))
        await pilot.pause(0.3)
        lines = [line for line in log_text(app).splitlines() if "no JSON object" in line]
        assert len([line for line in lines if "placement" in line or "LLM failed" in line]) == 1, lines
    from nexus.logs import log_path

    in_file = [line for line in log_path().read_text().splitlines() if "placement" in line and "no JSON" in line]
    assert in_file == [], in_file  # the file log too: the judge line says it, not the engine's line beside it
    judged = [line for line in log_path().read_text().splitlines() if "LLM failed (no JSON object" in line]
    assert len(judged) == 1, judged


async def test_the_log_pane_tags_its_levels_in_readable_words(server, tmp_path, minilm, data_dir):
    """An error line read "ERRO reply failed" (a trial): a cut word, taken for a typo."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.log_line("something went wrong", "error")
        app.log_line("a warning", "warning")
        await pilot.pause(0.2)
        drawn = [strip.text for strip in app.query_one(EventLog).lines]
        assert any(line.startswith("ERR  something went wrong") for line in drawn), drawn
        assert any(line.startswith("WARN a warning") for line in drawn) and not any("ERRO" in line for line in drawn)


async def test_the_memory_model_is_the_chat_model_the_server_lists_when_none_is_set(server, tmp_path, minilm,
                                                                                     data_dir):
    """With no memory model set ("Empty: the chat model", the config says), the tree's
    judge asked for "local-model": a server that checks names refused every call, and the
    tree fell back to embeddings unsaid (a trial). A blank id listed first is no model (the
    tree refused it after the chat had taken it: a review)."""
    server.state.models = [" ", "listed-model"]
    server.respond(chat_reply("Noted."))
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): "", ("memory", "judge"): "llm"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sister Ana lives in Porto.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "She works as a nurse there.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        judged = [r for r in server.chat_requests() if r.get("response_format")]
        assert judged and {r["model"] for r in judged} == {"listed-model"}, {r["model"] for r in judged}
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "memory model: listed-model (the chat model)" in notices(app))


async def test_stats_does_not_name_a_placeholder_as_the_memory_model(server, tmp_path, minilm, data_dir):
    """With no chat model known (the server lists none), /stats said "model: (first
    listed)" and "memory model: local-model (the chat model)": a name no server has, and
    the two lines disagreed (a trial)."""
    server.state.models = []
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): "", ("memory", "judge"): "auto"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "memory model:" in notices(app))
        said = notices(app)
        assert "local-model" not in said, said
        assert "memory model: the chat model, (first listed)" in said, said


async def test_stats_wraps_a_long_value_under_itself(server, tmp_path, minilm, data_dir):
    """At 80x24 the session's path went on the next line at the notice's edge, under the
    labels ("session:" alone, then "/tmp/…db" from column 2: a trial)."""
    import os

    from rich.console import Console

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / ("long-name-" * 6 + "s.db"), embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "Statistics of this session:" in notices(app))
        note = [n for n in app.query(Notice) if "Statistics" in n.plain][-1]
        narrow = Console(width=60, color_system=None, record=True, file=open(os.devnull, "w"))
        narrow.print(note.content)
        drawn = narrow.export_text().splitlines()
        row = next(i for i, line in enumerate(drawn) if line.strip().startswith("session:"))
        column = drawn[row].index("session:") + len("session: ")
        assert drawn[row][column:].strip(), drawn  # the path starts beside its label
        assert drawn[row + 1][:column].strip() == "" and drawn[row + 1].strip(), drawn


async def test_reorganize_and_tree_say_which_argument_they_do_not_take(server, tmp_path, minilm, data_dir):
    """"/reorganize --prnue", "/reorganize 0.5" and "/tree --bogus" answered with the usage
    alone, not saying what was wrong (a trial)."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/reorganize --prnue")
        await wait_for(pilot, lambda: "(--prnue is no option of /reorganize)" in notices(app))
        await type_and_send(pilot, app, "/reorganize 0.5")
        await wait_for(pilot, lambda: '("0.5" is not understood: the threshold goes after --threshold' in notices(app))
        await type_and_send(pilot, app, "/tree --bogus")
        await wait_for(pilot, lambda: "(--bogus is no option of /tree)" in notices(app))
        assert "Reorganised" not in notices(app)


async def test_a_session_opened_later_asks_the_listed_model_before_its_first_reply(server, tmp_path, minilm,
                                                                                  data_dir):
    """After /new (or /open), the memory model was "local-model" until the session's first
    reply: 120 of 120 judge calls of a /reorganize went out under that name (a trial). The
    chat model the server lists is known at start; every session's memory asks it."""
    server.state.models = ["listed-model"]
    server.respond(chat_reply("Noted."))
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): "", ("memory", "judge"): "llm"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: app.model_found == "listed-model")
        assert app.session.tree.model == "listed-model"  # the first session, before any reply
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.name != "s.db")
        assert app.session.tree.model == "listed-model" and app.session.model == "listed-model"
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "memory model: listed-model (the chat model)" in notices(app))


async def test_a_chat_model_the_server_does_not_list_is_said_at_start(server, tmp_path, minilm, data_dir):
    """--model gpt-9 against a server listing others: nothing was said until the first
    message failed, and its "press Ctrl+R" could never work (a trial)."""
    server.state.models = ["tiny-chat", "other-model"]
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): "gpt-9"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "does not list the chat model gpt-9 (it lists tiny-chat, other-model)"
                       in notices(app))
        assert "/model NAME picks another" in notices(app)
        # the setting it names is one the config knows (it said "chat_model": a re-trial)
        assert "chat in nexus.toml's [models] (or --model)" in notices(app)
        import dataclasses

        from nexus.config import SECTIONS

        assert "chat" in {f.name for f in dataclasses.fields(SECTIONS["models"])}
    server.state.models = ["llama3:latest"]  # Ollama's name for "llama3"
    probes = sum(r.path.rstrip("/") == "/v1/models" for r in server.state.requests)
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): "llama3"})
    app = NexusApp(cfg, tmp_path / "t.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: sum(r.path.rstrip("/") == "/v1/models" for r in server.state.requests) > probes)
        await pilot.pause(0.5)
        assert "does not list" not in notices(app)


def test_an_unknown_command_names_every_command_it_begins():
    """"/undo" was answered "Did you mean /undo-reorganize?" alone, though /undo-retry (the
    one a user undoing a /retry wants) begins with it too (a new-user trial)."""
    from nexus.commands import suggestion

    assert "Did you mean /undo-reorganize or /undo-retry?" in suggestion("undo")
    assert "Did you mean /search?" in suggestion("serch")  # a typo: the nearest, alone
    assert "Did you mean" not in suggestion("zzz")

"""One chat turn that never loses anything: queued input, one reply at a time, per-request
cancel, failures that are not answers, prompts that fit the context, storing failures.
Pilot tests against the scripted OpenAI-compatible server (real HTTP, real openai client)."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from scripted_server import Reply
from test_nexus_app import chat_reply, log_text, make_config, notices, ready, type_and_send, wait_for

from nexus.app import NexusApp
from nexus.chat import load_kept
from nexus.replies import UNSENT_STATE
from nexus.turn import says_something
from nexus.widgets import AssistantMessage, ExchangeHead, Notice, PastExchangeView, UserMessage
from trace_core.embedders import MiniLMEmbedder
from trace_core.tokens import count_tokens


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


class SlowLoading(MiniLMEmbedder):
    """The real MiniLM, slow to load as on a cold first start: the session opens when the
    test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def load(self) -> None:
        self.gate.wait(60)
        super().load()


def chat_only(fn):
    """Answer the tree's JSON calls as usual; ``fn`` answers the chat requests."""
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return fn(req)
    return respond


def user_of(req) -> str:
    return req["messages"][-1]["content"]


def chats(server) -> list[dict]:
    return [r for r in server.chat_requests() if not r.get("response_format")]


async def test_a_message_typed_before_the_session_opens_is_shown_queued_then_sent(server, tmp_path, minilm,
                                                                                   data_dir):
    server.respond(chat_reply("Welcome."))
    slow = SlowLoading()
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=slow)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_and_send(pilot, app, "Hello, early bird here.")
        assert app.embedder_state == "loading"  # the session is not open yet
        shown = [m for m in app.query(UserMessage) if m.text == "Hello, early bird here."]
        assert shown and "queued" in shown[0].state  # on screen at once, marked queued
        assert app.query_one("#prompt").value == ""
        await pilot.pause(0.3)
        assert not chats(server)
        # the session's file is open; the message says it now waits for the embedder
        await wait_for(pilot, lambda: app.session is not None)
        await wait_for(pilot, lambda: "embedding model" in shown[0].state)
        slow.gate.set()  # the session opens now
        await wait_for(pilot, lambda: app.session is not None and app.session.tree is not None
                       and len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].user == "Hello, early bird here."
        assert shown[0].state == ""
        # max_tokens is sent on every reply: 0 = auto, a quarter of the default 8192 context
        assert chats(server)[-1]["max_tokens"] == 2048


async def test_input_while_a_reply_streams_waits_its_turn(server, tmp_path, minilm, data_dir):
    def respond(req):
        word = "alpha" if "first" in user_of(req) else "beta"
        return Reply("", chunks=[f"{word}{i} " for i in range(120)], chunk_delay=0.05)

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "the first question")
        await wait_for(pilot, lambda: app.current_reply is not None and "alpha2" in app.current_reply.text)
        await type_and_send(pilot, app, "the second question")
        second = [m for m in app.query(UserMessage) if m.text == "the second question"][0]
        assert "queued" in second.state
        assert len(chats(server)) == 1  # not sent while the first streams
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        first_x, second_x = app.session.tree.exchanges
        assert first_x.user == "the first question" and "alpha119" in first_x.assistant
        assert "beta" not in first_x.assistant
        assert second_x.user == "the second question" and "beta119" in second_x.assistant
        assert "alpha" not in second_x.assistant
        replies = list(app.query(AssistantMessage))
        assert "alpha119" in replies[-2].text and "beta" not in replies[-2].text
        assert "beta119" in replies[-1].text and "alpha" not in replies[-1].text
        assert second.state == ""


async def test_escape_cancels_before_the_first_byte_and_a_late_timeout_touches_nothing(server, tmp_path, minilm,
                                                                                       data_dir):
    def respond(req):
        if "hang" in user_of(req) and len([r for r in chats(server) if "hang" in user_of(r)]) == 1:
            return Reply("too late", delay=8.0)  # the server hangs before its first byte
        return Reply("", chunks=[f"gamma{i} " for i in range(40)], chunk_delay=0.1)

    server.respond(chat_only(respond))
    cfg = make_config(server.base_url, tmp_path, {("server", "timeout"): 3})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "hang on a moment")
        hung = app.current_reply
        # from send to the first token the reply area says the model is working, and how long
        await wait_for(pilot, lambda: "the model is working — 1 s" in hung.waiting_text, timeout=5)
        await pilot.press("escape")
        started = time.monotonic()
        await wait_for(pilot, lambda: app.turn is None, timeout=5)
        assert time.monotonic() - started < 3  # neither the 3 s timeout nor the 8 s hang ended it
        assert "cancelled before the first word" in hung.note
        assert app.session.pending == "hang on a moment" and len(app.session.tree.exchanges) == 0
        # the next request streams while the first one's timeout and late answer arrive
        await type_and_send(pilot, app, "stream something")
        streaming = app.current_reply
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1, timeout=15)
        x = app.session.tree.exchanges[0]
        assert x.user == "stream something" and "gamma39" in x.assistant and "too late" not in x.assistant
        assert "gamma39" in streaming.text and "interrupted" not in streaming.note
        assert "No reply" not in notices(app)
        assert app.session.pending == "hang on a moment"  # still kept for resend
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2, timeout=15)
        assert app.session.tree.exchanges[1].user == "hang on a moment"
        assert app.session.pending is None


async def test_a_reply_ending_in_an_empty_list_item_is_stored_without_it(server, tmp_path, minilm, data_dir):
    """The bundled model began to write a memory line out again and was stopped after its
    "-": the reply was stored ending "…\n-", and that went back into the next prompt (a trial)."""
    server.respond(chat_reply("You live in Graz.\n-"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Where do I live?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].assistant == "You live in Graz."
        await wait_for(pilot, lambda: app.turn is None)
        assert app.query(AssistantMessage).last().text == "You live in Graz."


async def test_search_names_a_message_without_an_answer_that_holds_the_words(server, tmp_path, minilm, data_dir):
    """ "My deadline for the grant is Friday." stood on screen, not answered, and
    "/search --all deadline" said "Nothing in any session matches" (a trial)."""
    server.respond(chat_reply(""))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My deadline for the grant is Friday.")
        await wait_for(pilot, lambda: app.session.kept == ["My deadline for the grant is Friday."] and app.turn is None)
        for command in ("/search deadline", "/search --all Deadline grant"):
            before = notices(app).count("Not in memory yet")
            await type_and_send(pilot, app, command)
            await wait_for(pilot, lambda n=before + 1: notices(app).count("Not in memory yet") == n)
        assert "1 message without an answer holds it" in notices(app)
        await type_and_send(pilot, app, "/search holiday")
        await wait_for(pilot, lambda: 'Nothing in memory matches "holiday"' in notices(app))
        assert notices(app).count("Not in memory yet") == 2


async def test_ctrl_c_pressed_again_says_how_to_quit_once(server, tmp_path, minilm, data_dir):
    """Ctrl+C pressed two or three times, as in a terminal, stacked the same note as
    many times in the chat (a trial); after something else it is said again."""
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for _ in range(3):
            await pilot.press("ctrl+c")
            await pilot.pause()
        await wait_for(pilot, lambda: "Ctrl+C copies selected text" in notices(app))
        assert notices(app).count("Ctrl+C copies selected text") == 1
        app.chat_notice("something else")
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: notices(app).count("Ctrl+C copies selected text") == 2)


async def test_ctrl_c_copies_a_selection_stops_a_reply_or_says_how_to_quit(server, tmp_path, minilm, data_dir):
    """Ctrl+C did nothing and said nothing, idle or while a reply streamed (a trial)."""
    server.respond(chat_only(lambda req: Reply("", chunks=[f"delta{i} " for i in range(200)], chunk_delay=0.05)))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: "Ctrl+C copies selected text. Ctrl+Q quits Nexus" in notices(app))
        await type_and_send(pilot, app, "count for me")
        reply = app.current_reply
        await wait_for(pilot, lambda: "delta3" in reply.text)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.turn is None, timeout=5)
        x = app.session.tree.exchanges[0]
        assert "delta3" in x.assistant and "delta199" not in x.assistant  # stopped, the words so far kept
        prompt = app.query_one("#prompt")
        prompt.value = "copy me"
        prompt.select_all()
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: app.clipboard == "copy me")
        assert notices(app).count("Ctrl+C copies selected text") == 1
        # text selected with the mouse in the chat, the input focused: copied, no reply stopped
        prompt.value = ""
        await type_and_send(pilot, app, "count again")
        again = app.current_reply
        await wait_for(pilot, lambda: "delta3" in again.text)
        from textual.selection import Selection

        app.screen.selections = {w: Selection(None, None) for w in reply.walk_children() if w.allow_select}
        await pilot.pause()
        assert app.screen.get_selected_text()
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: "delta3" in app.clipboard)
        assert app.turn is not None  # still streaming
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.turn is None)
        assert notices(app).count("Ctrl+C copies selected text") == 1


async def test_escape_cancels_while_the_server_is_asked_which_model_it_has(server, tmp_path, minilm, data_dir):
    """No chat model set: the first reply asks the server to list its models first. A
    server that stalls there held the turn 120 s, Esc ignored under "(Esc cancels)" (a trial)."""
    server.respond(chat_only(lambda req: Reply("Here.")))
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): ""})
    server.state.models_delay = 30.0  # from the start: its check at start gets no answer either
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Are you there?")
        await wait_for(pilot, lambda: app.current_reply is not None)
        hung = app.current_reply
        await wait_for(pilot, lambda: "waiting for the model server" in hung.waiting_text, timeout=10)
        await pilot.press("escape")
        started = time.monotonic()
        await wait_for(pilot, lambda: app.turn is None, timeout=5)
        assert time.monotonic() - started < 3
        assert "cancelled before the first word" in hung.note
        assert app.session.pending == "Are you there?" and not app.session.tree.exchanges
        server.state.models_delay = 0.0
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)


async def test_ctrl_r_that_fails_again_says_once_what_still_waits(server, tmp_path, minilm, data_dir):
    """Each Ctrl+R whose message came back empty again added "N more messages without an
    answer: Ctrl+R again sends the next": four in a row read as four messages sent (trial)."""
    server.respond(chat_only(lambda req: Reply("", chunk_delay=0.0)))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in ("first question", "second question", "third question"):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        for _ in range(3):
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        assert app.session.kept and not app.session.tree.exchanges
        said = notices(app)
        assert said.count("more messages wait without an answer") == 1, said
        assert ("2 more messages wait without an answer: Ctrl+R sends the next once this one is answered "
                "(/drop forgets this one if it fails again).") in said


async def test_ctrl_r_sends_the_message_its_newest_hint_is_under(server, tmp_path, minilm, data_dir):
    """Ctrl+R resends the message whose failure was said last (its "Ctrl+R" hint is right
    under it), not an older unanswered one; the resent message leaves its empty "(no
    answer)" box behind. After a reopen, an old unanswered message waits its turn while a
    new one that was cancelled goes first (it sent the old one before)."""
    answers = {"text": ""}
    server.respond(chat_only(lambda req: Reply("too late", delay=8.0) if "intervals" in user_of(req)
                             else Reply(answers["text"], chunk_delay=0.0)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in ("ok thanks", "What flour suits a rye starter?"):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        empty = [r for r in app.query(AssistantMessage) if r.note.startswith("(no answer")]
        assert len(empty) == 2
        answers["text"] = "Whole rye flour."
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].user == "What flour suits a rye starter?"
        assert app.session.kept == ["ok thanks"]
        # answered: the note under it says what is left, not "once this one is answered"
        await wait_for(pilot, lambda: notices(app).count("1 more message waits without an answer: Ctrl+R sends "
                                                         "the next.") == 1)
        assert "once this one is answered" not in notices(app)
        assert [r for r in app.query(AssistantMessage) if r.note.startswith("(no answer")] == empty[:1]
        assert [m.text for m in app.query(UserMessage)].count("What flour suits a rye starter?") == 1

    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Tell me about intervals for marathoners.")
        await wait_for(pilot, lambda: app.current_reply is not None and "working" in app.current_reply.waiting_text)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.turn is None)
        server.respond(chat_only(lambda req: Reply("Fast, then slow.", chunk_delay=0.0)))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert app.session.tree.exchanges[1].user == "Tell me about intervals for marathoners."
        assert app.session.kept == ["ok thanks"]


async def test_after_an_outage_ctrl_r_sends_this_windows_failures_before_an_earlier_runs(server, tmp_path, minilm,
                                                                                           data_dir):
    """A and B failed in an outage: Ctrl+R sent B (its hint), then an unanswered message of
    an earlier run, and A came eleven presses later (a trial)."""
    state = {"down": True}
    server.respond(chat_only(lambda req: Reply("", status=500) if state["down"] else
                             Reply(f"answer to {user_of(req)}", chunk_delay=0.0)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "an old question")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["an old question"])
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "question A")
        await type_and_send(pilot, app, "question B")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox and len(app.session.kept) == 3)
        state["down"] = False
        for n in (1, 2, 3):
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n and app.turn is None)
        assert [x.user for x in app.session.tree.exchanges] == ["question B", "question A", "an old question"]


async def test_failures_are_reported_in_words_kept_and_never_stored(server, tmp_path, minilm, data_dir):
    script = [
        (Reply(body="<html><body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>"),
         ["text/html", "502 Bad Gateway"]),
        (Reply("", chunks=["half ", "a ", "sentence "], drop=True),
         ["Reply interrupted: the reply stream ended before the server finished", "stays above (not stored)"]),
        (Reply(status=400, error="Requested tokens (9000) exceed context window of 8192"),
         ["did not fit the model's context at the server, which holds 8,192 tokens", "exceed context window of 8192",
          "lower models.context_tokens"]),
        (Reply(status=500, body="<html><title>oops</title>Internal failure in the model</html>"),
         ["HTTP 500", "Internal failure in the model"]),
        (Reply(body="data: {not json at all\n\n", content_type="text/event-stream"),
         ["sent a broken reply (not valid JSON: expecting property name enclosed in double quotes at character 1)"]),
        (Reply(body="data: <html><body>Proxy error: upstream reset</body></html>\n\n",
               content_type="text/event-stream"),  # no JSON at all: what came is quoted
         ["sent a broken reply (not valid JSON: expecting value at character 0: “<html><body>Proxy error: upstream "
          "reset</body></html>”)"]),
        (Reply("", chunks=[]), None),  # empty
        (Reply("", chunks=["   ", "\n\n"]), None),  # whitespace only
        (Reply("", chunks=["<think>hmm</think>", "  "]), "(only reasoning, no answer after it — Ctrl+R to retry)"),
        (Reply("", chunks=["<think>Okay, the user ", "asks me something"]), "(only reasoning, no answer after it — "
                                                                             "Ctrl+R to retry)"),  # never closed
        (Reply("", chunks=["User", ":\n"]), None),  # a bare role label (the bundled model's): no answer
        (Reply("", chunks=["user"]), None),  # …without its colon
        (Reply("", chunks=["Me", ":"]), None),  # a chat label alone, with its colon (a trial stored "Me:")
        (Reply("", chunks=["[2026-12-03]"]), None),  # the memory block's date line, copied
        (Reply("", chunks=[" | "]), None),  # a symbol
    ]
    step = {"i": 0}
    server.respond(chat_only(lambda req: script[min(step["i"], len(script) - 1)][0]))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for i, (_reply, words) in enumerate(script):
            step["i"] = i
            before = notices(app)
            text = f"message number {i}"
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
            new = notices(app)[len(before):]
            if words is None or isinstance(words, str):  # an empty answer: the note under it says what came
                reply = list(app.query(AssistantMessage))[-1]
                assert reply.note == (words or "(no answer — Ctrl+R to retry)"), reply.note
            else:
                assert ("No reply" in new or "Reply interrupted" in new) and "kept" in new, new
                for w in words:
                    assert w in new, (w, new)
            assert app.session.kept[-1] == text and app.session.pending == text  # the one the hint is under
            assert len(app.session.tree.exchanges) == 0  # a failure is never stored as an answer
        # the partial was shown; a failure with no text leaves no empty reply box
        assert "half a sentence" in list(app.query(AssistantMessage))[0].text
        assert "finish_reason" not in notices(app)  # the protocol's field names are no words for a user
        # a good reply after all that: stored, and nothing like "(empty reply)" reached memory
        server.respond(chat_reply("A real answer."))
        await type_and_send(pilot, app, "one more try")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].assistant.startswith("A real answer")
        assert all("(empty reply)" not in m["content"] for m in app.session.tree.conversation)


async def test_the_prompt_fits_the_context_and_a_message_too_long_is_refused(server, tmp_path, minilm, data_dir):
    server.respond(chat_only(lambda req: Reply(" ".join(["reply"] * 70))))  # about 105 tokens
    over = {("models", "context_tokens"): 900, ("models", "max_tokens"): 120,
            ("memory", "recent_exchanges"): 3, ("memory", "memory_token_budget"): 400}
    app = NexusApp(make_config(server.base_url, tmp_path, over), tmp_path / "s.db", embed_fn=minilm)
    room = 900 - 120 - 32
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for k in range(4):
            n = len(app.session.tree.exchanges)
            await type_and_send(pilot, app, f"Message {k} about sailing boats. " + "words of padding " * 35)
            await wait_for(pilot, lambda n=n: len(app.session.tree.exchanges) == n + 1)
        for req in chats(server):
            assert req["max_tokens"] == 120
            system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
            assert count_tokens(system) + count_tokens(user) <= room
        await wait_for(pilot, lambda: "oldest recent message(s)" in log_text(app))
        assert "memory block limited to" in log_text(app)
        sent = len(chats(server))
        await type_and_send(pilot, app, "x" * 4000)  # 1,000 tokens: more than the whole context
        await wait_for(pilot, lambda: "Not sent: your message is about 1,000 tokens" in notices(app))
        assert len(chats(server)) == sent  # refused before sending
        assert "not sent" not in notices(app).split("Not sent: your message")[1]  # said once
        assert "not sent: your message" in log_text(app) and "reply failed" not in log_text(app)
        assert len(app.session.tree.exchanges) == 4
        # not kept for Ctrl+R (it would be refused again): back in the input, to shorten
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "x" * 4000)
        assert "x" * 4000 not in [m.text for m in app.query(UserMessage)]
        # selected, so one key clears it (a trial took 32,000 Backspaces to clear a refused paste)
        assert "back in the input, selected" in notices(app)
        await pilot.press("backspace")
        assert app.query_one("#prompt").value == ""


async def test_a_message_the_servers_own_tokenizer_counts_over_the_context_is_refused(server, tmp_path, minilm,
                                                                                     data_dir):
    """8,000 characters of Japanese are about 2,000 tokens by characters / 4 and 4,500 by
    gemma's tokenizer: sent, the bundled server answered an empty stream, and Ctrl+R sent
    it again for ever (a trial). A server that counts (llama-cpp-python's
    /extras/tokenize/count) is asked for a large message; a short one is not."""
    server.respond(chat_only(lambda req: Reply("Noted.")))
    server.state.tokens_per_char = 0.6
    over = {("models", "context_tokens"): 4096, ("models", "max_tokens"): 256}
    app = NexusApp(make_config(server.base_url, tmp_path, over), tmp_path / "s.db", embed_fn=minilm)
    japanese = "今日は天気がいいので、公園で犬と散歩しました。" * 350  # 8,050 characters
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My dog is called Biscuit.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        counted_before = [r for r in server.state.requests if r.path == "/extras/tokenize/count"]
        assert counted_before == []  # a short message: the estimate is enough
        sent = len(chats(server))
        await type_and_send(pilot, app, japanese)
        await wait_for(pilot, lambda: "Not sent: your message is about 4,831 tokens" in notices(app))
        assert len(chats(server)) == sent and len(app.session.tree.exchanges) == 1
        assert app.session.pending is None  # refused, not kept for a Ctrl+R that fails again
        await wait_for(pilot, lambda: app.query_one("#prompt").value == japanese)
        app.query_one("#prompt").value = ""
        # one that fits by the server's count goes, and the memory block makes room for it
        await type_and_send(pilot, app, japanese[:3000])
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        system = chats(server)[-1]["messages"][0]["content"]
        assert count_tokens(system) + int(3000 * 0.6) + 1 <= 4096 - 256


async def test_a_failure_while_storing_is_shown_kept_and_stored_again_with_ctrl_r(server, tmp_path, minilm,
                                                                                  data_dir):
    from trace_core import CTree

    server.respond(chat_reply("Kept safe."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "first, stored normally")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        # SQLite refuses writes on this connection, as on a read-only file
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")
        await type_and_send(pilot, app, "second, the store fails")
        await wait_for(pilot, lambda: "could not be stored" in notices(app))
        assert "read-only" in notices(app) and "press Ctrl+R" in notices(app)  # as the other notes say it (it read "ctrl+r")
        assert [(u, r.strip()) for u, r in app.session.unstored] == [("second, the store fails", "Kept safe.")]
        assert app.is_running and len(app.session.tree.exchanges) == 1  # memory agrees with the file
        await pilot.press("ctrl+r")  # stores it again; the model is not asked again
        await wait_for(pilot, lambda: "Stored 1 kept exchange" in notices(app))
        assert len(chats(server)) == 2 and not app.session.unstored
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert [x.user for x in tree.exchanges] == ["first, stored normally", "second, the store fails"]
    tree.vdb.close()


async def test_vision_busy_holds_messages_until_drain_outbox(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Back again."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        app.vision_busy = True  # /ingest holds the vision model
        await type_and_send(pilot, app, "are you there?")
        waiting = [m for m in app.query(UserMessage) if m.text == "are you there?"][0]
        assert "waiting" in waiting.state and "vision model" in waiting.state
        await pilot.pause(0.5)
        assert not chats(server)
        app.vision_busy = False
        app.drain_outbox()
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert waiting.state == ""


async def test_leaving_while_a_reply_streams_stores_the_message_and_the_partial_reply(server, tmp_path, minilm,
                                                                                      data_dir):
    from trace_core import CTree

    server.respond(chat_only(lambda req: Reply("", chunks=[f"delta{i} " for i in range(300)], chunk_delay=0.05)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "count slowly")
        await wait_for(pilot, lambda: app.current_reply is not None and "delta3" in app.current_reply.text)
        await type_and_send(pilot, app, "and this one is still queued")
        await pilot.press("ctrl+q")
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    xs = tree.exchanges
    assert [x.user for x in xs] == ["count slowly"]  # the queued one is no exchange: nobody answered it
    assert "delta0" in xs[0].assistant and "[reply cancelled]" in xs[0].assistant
    assert "delta299" not in xs[0].assistant
    tree.vdb.close()
    # reopened, the queued message is shown unanswered, and Ctrl+R sends it
    server.respond(chat_only(lambda req: Reply("Sent at last.")))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: any(m.text == "and this one is still queued" and m.state == UNSENT_STATE
                                          for m in app.query(UserMessage)))
        assert ("1 message above has no answer yet: press Ctrl+R to send it."
                in notices(app))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert app.session.tree.exchanges[1].user == "and this one is still queued"
        assert [m.text for m in app.query(UserMessage)].count("and this one is still queued") == 1
        assert user_of(chats(server)[-1]) == "and this one is still queued"
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert load_kept(tree.vdb) == []  # answered: no longer kept
    tree.vdb.close()


async def test_edit_takes_back_the_newest_message_when_it_got_no_answer(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "an answered message")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        server.respond(chat_only(lambda req: Reply("")))  # the model answers nothing
        await type_and_send(pilot, app, "a message with a typo in it")
        await wait_for(pilot, lambda: app.session.pending == "a message with a typo in it")
        await wait_for(pilot, lambda: [m.state for m in app.query(UserMessage)][-1:] == [UNSENT_STATE])
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "a message with a typo in it")
        # kept until the edit is sent: in the window, for Ctrl+R and in the file
        assert "editing your message with no answer" in app.query_one("#prompt").border_title
        assert app.session.pending == "a message with a typo in it"
        assert "a message with a typo in it" in [m.text for m in app.query(UserMessage)]
        server.respond(chat_reply("Fixed."))
        app.query_one("#prompt").value = ""
        await type_and_send(pilot, app, "a message without the typo")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert [x.user for x in app.session.tree.exchanges] == ["an answered message", "a message without the typo"]
        assert app.session.pending is None  # the edited one replaced the unanswered one
        assert "a message with a typo in it" not in [m.text for m in app.query(UserMessage)]
        assert not app.query_one("#prompt").border_title
        # its "(no answer — Ctrl+R to retry)" box went with it (it stayed: a review)
        assert not [r for r in app.query(AssistantMessage) if "no answer" in r.note]
    from trace_core import CTree

    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert load_kept(tree.vdb) == []
    tree.vdb.close()


async def test_a_reply_that_copies_its_memory_block_out_is_no_answer(server, tmp_path, minilm, data_dir):
    """Asked what it remembers, the bundled model said its memory block back; stored as
    the answer, the next block nested old memory in new (a trial, through the proxy)."""
    def respond(req):
        ask = req["messages"][-1]["content"]
        return Reply(req["messages"][0]["content"] if "remember" in ask else "Noted.")

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My sister Ana lives in Porto.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "What do you remember about my sister Ana?")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox
                       and app.session.pending == "What do you remember about my sister Ana?")
        assert "Ana lives in Porto" in app.session.last_sent[1]  # the block it copied held the fact
        assert len(app.session.tree.exchanges) == 1  # kept for Ctrl+R, not stored


async def test_esc_during_an_edit_of_a_message_with_no_answer_keeps_it(server, tmp_path, minilm, data_dir):
    """/edit took an unanswered message out of the kept list and Esc did not put it back:
    Ctrl+R said "Nothing to resend", and the next write of the list (Ctrl+R sending
    another) dropped it from the file for good (a trial). And Ctrl+R sending the very
    message being edited left the edit on: Enter then stored the edited words beside the
    original, unsaid (a trial)."""
    server.respond(chat_only(lambda req: Reply("")))  # the model answers nothing
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    queued, edited = "Queued one, should stay.", "Kept message X: what is a good recipe?"
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in (queued, edited):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda t=text: app.turn is None and not app.outbox and t in app.session.kept)
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: app.query_one("#prompt").value == edited)
        await pilot.press("escape")  # unchanged: the input is cleared, the message stays kept
        await wait_for(pilot, lambda: "Edit cancelled" in notices(app))
        assert app.editing_kept is None and not app.query_one("#prompt").border_title
        assert app.query_one("#prompt").value == ""
        assert app.session.kept == [queued, edited]
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: app.editing_kept == edited)
        server.respond(chat_reply("Pasta."))
        await pilot.press("ctrl+r")  # sends the one being edited, as it was; the list is written again
        await wait_for(pilot, lambda: "Ctrl+R sent the message you were editing as it was" in notices(app))
        assert app.editing_kept is None and not app.query_one("#prompt").border_title
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        assert app.session.kept == [queued]
    from trace_core import CTree

    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert load_kept(tree.vdb) == [queued]  # the other one is still in the file
    assert [x.user for x in tree.exchanges] == [edited]
    tree.vdb.close()


async def test_messages_queued_behind_a_server_that_went_away_wait_for_it(server, tmp_path, minilm, data_dir,
                                                                          monkeypatch):
    """The server died with 16 messages queued: each was sent and failed within a second,
    16 notes of "cannot reach", and they came back one Ctrl+R at a time, last first (a
    trial). Now they wait, and go in the order written once the server answers again."""
    from nexus import replies

    monkeypatch.setattr(replies, "SERVER_RECHECK_SECONDS", 0.3)
    down = threading.Event()

    def respond(req):
        if down.is_set():  # the connection drops before any answer: "cannot reach the model server"
            raise ConnectionAbortedError("the server went away")
        return Reply("Watered.", delay=1.0)

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    written = [f"Note {k}: the plant on shelf {k} needs water." for k in range(1, 5)]
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in written:  # the first is answered slowly; the others queue behind it
            await type_and_send(pilot, app, text)
        await wait_for(pilot, lambda: len(app.outbox) == 3)
        down.set()
        server.state.models = []  # and its model list says nothing (what Nexus asks to see it back)
        await wait_for(pilot, lambda: "The model server is not answering" in notices(app))
        await pilot.pause(1.0)
        assert "the 2 messages queued after this one wait, and go in order when it answers again" in notices(app)
        assert [x.user for x in app.session.tree.exchanges] == written[:1]
        assert notices(app).count("cannot reach the model server") == 1  # the second one only, said once
        assert "Your message is kept — it goes again, first, when the model server answers." in notices(app)
        assert [item.text for item in app.outbox] == written[2:]
        assert all("the model server is not answering" in item.shown.state for item in app.outbox)
        down.clear()
        server.state.models = ["test-model"]
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 4, timeout=30)
        assert [x.user for x in app.session.tree.exchanges] == written  # in the order written
        assert "The model server answers again" in notices(app) and app.session.pending is None


async def test_a_failed_message_is_still_kept_after_a_restart(tmp_path, minilm, data_dir):
    from scripted_server import ScriptedServer

    srv = ScriptedServer()
    port = srv.port
    srv.httpd.server_close()  # nothing listens
    path = tmp_path / "s.db"
    app = NexusApp(make_config(f"http://127.0.0.1:{port}/v1", tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        # the advice is about the server it was pointed at, not LM Studio's (a trial)
        await wait_for(pilot, lambda: f"Start the model server at http://127.0.0.1:{port}/v1" in notices(app))
        assert "LM Studio" not in notices(app)
        await type_and_send(pilot, app, "Are you there?")
        await wait_for(pilot, lambda: "No reply" in notices(app))
        await pilot.press("ctrl+q")
    with ScriptedServer(port=port) as up:
        up.respond(chat_only(lambda req: Reply("Yes.")))
        app = NexusApp(make_config(up.base_url, tmp_path), path, embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            await wait_for(pilot, lambda: app.session.pending == "Are you there?")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
            assert app.session.pending is None


async def test_a_message_kept_unanswered_is_drawn_where_it_was_written_when_the_session_reopens(
        server, tmp_path, minilm, data_dir):
    """A message that failed between two answered ones was drawn under both once the session
    was opened again, as if written last. It is drawn where it was written: the file keeps
    which exchange came after it."""
    failed: list[str] = []

    def respond(req):
        if user_of(req) == "Second question." and not failed:
            failed.append(user_of(req))
            return Reply(status=500, error="the model crashed")
        return Reply(f"Answered: {user_of(req)}")

    server.respond(chat_only(respond))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for text in ("First question.", "Second question.", "Third question."):
            await type_and_send(pilot, app, text)
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2 and app.turn is None and not app.outbox,
                       timeout=15)
        assert app.session.kept == ["Second question."]
        await pilot.press("ctrl+q")
    again = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with again.run_test(size=(120, 40)) as pilot:
        await ready(again, pilot)
        await wait_for(pilot, lambda: any(m.state == UNSENT_STATE for m in again.query(UserMessage)))
        drawn = [(w.exchange.user if isinstance(w, PastExchangeView) else w.text)
                 for w in again.query_one("#chat").children if isinstance(w, (PastExchangeView, UserMessage))]
        assert drawn == ["First question.", "Second question.", "Third question."]
        assert "1 message above has no answer yet" in notices(again)
        await pilot.press("ctrl+r")  # sent again, it goes below, as in the window it failed in
        await wait_for(pilot, lambda: len(again.session.tree.exchanges) == 3 and again.turn is None)
        assert [x.user for x in again.session.tree.exchanges][-1] == "Second question."
        assert not [m for m in again.query(UserMessage) if m.state == UNSENT_STATE]


async def test_a_session_switch_first_stores_the_reply_in_flight(server, tmp_path, minilm, data_dir):
    from trace_core import CTree

    server.respond(chat_only(lambda req: Reply("", chunks=[f"omega{i} " for i in range(300)], chunk_delay=0.05)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "tell me a long story")
        await wait_for(pilot, lambda: app.current_reply is not None and "omega3" in app.current_reply.text)
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session.path != path
                       and app.embedder_state == "ready" and app.turn is None)
        assert app.is_running
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    xs = tree.exchanges
    assert [x.user for x in xs] == ["tell me a long story"]
    assert "omega0" in xs[0].assistant and "[reply cancelled]" in xs[0].assistant
    tree.vdb.close()


async def test_a_reply_with_a_lone_surrogate_is_shown_and_kept_and_the_app_runs_on(server, tmp_path, minilm,
                                                                                    data_dir):
    server.respond(chat_only(lambda req: Reply("", chunks=["broken \ud800 text ", "ends here"])))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "say something broken")
        await wait_for(pilot, lambda: app.turn is None and (len(app.session.tree.exchanges) == 1
                                                             or app.session.unstored))
        await pilot.pause(0.3)
        assert app.is_running
        reply = list(app.query(AssistantMessage))[-1]
        assert "\ud800" not in reply.body.source and "ends here" in reply.body.source
        if app.session.unstored:  # the store refused it: said in words, kept for Ctrl+R
            assert "could not be stored" in notices(app)
        else:
            assert "ends here" in app.session.tree.exchanges[0].assistant


async def test_a_model_that_only_thought_and_an_error_mid_stream_are_said_as_such(server, tmp_path, minilm,
                                                                                   data_dir):
    """A reasoning model that spent max_tokens thinking was "the model's context is full"
    (the prompt was 96 tokens), and an error event mid-stream was "APIError: upstream
    exploded mid stream" (a trial)."""
    server.respond(chat_only(lambda req: Reply("", reasoning=["Let me think", " about bees."] * 30, finish="length")))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/set max_tokens 500")
        await type_and_send(pilot, app, "Tell me about bees")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Tell me about bees"])
        said = notices(app)
        assert "the model spent its whole max_tokens limit (500) thinking and gave no answer; /set max_tokens " \
               "raises it" in said and "context is full" not in said, said
        server.respond(chat_only(lambda req: Reply("Bees are", error_event="upstream exploded mid stream")))
        await type_and_send(pilot, app, "/drop")
        await type_and_send(pilot, app, "And wasps?")
        await wait_for(pilot, lambda: "upstream exploded mid stream" in notices(app))
        said = notices(app)
        assert f"the model server at {server.base_url} reported an error during the reply: upstream exploded " \
               "mid stream" in said and "APIError" not in said, said
        assert not app.session.tree.exchanges


async def test_a_reply_cut_before_its_first_word_names_the_limit(server, tmp_path, minilm, data_dir):
    """/set max_tokens 1: every reply read "(no answer — Ctrl+R to retry)", with no word
    of the limit that caused it (trial)."""
    server.respond(chat_only(lambda req: Reply("", finish="length")))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/set max_tokens 1")
        await type_and_send(pilot, app, "Tell me about bees")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Tell me about bees"])
        assert "No reply: the max_tokens limit (1) ended the reply before its first word; /set max_tokens " \
               "raises it." in notices(app), notices(app)
        assert "context is full" not in notices(app) and not app.session.tree.exchanges


async def test_a_cut_reply_says_so_once_and_a_failed_one_leaves_no_empty_box(server, tmp_path, minilm, data_dir):
    server.respond(chat_only(lambda req: Reply("Bees make honey and", finish="length")))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/set max_tokens 5")  # reached: the reply is longer than 5 characters
        await type_and_send(pilot, app, "Tell me about bees")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await pilot.pause(0.2)
        reply = app.query(AssistantMessage).last()
        # stored with its mark, in the words the note says live (a reopened one reads the mark)
        assert f"[{reply.note}]" in app.session.tree.exchanges[0].assistant
        assert "[reply cut at the max_tokens limit (" in app.session.tree.exchanges[0].assistant
        assert "max_tokens limit" in reply.note and "[reply cut" not in reply.body.source  # shown once, as the note
        boxes = len(app.query(AssistantMessage))
        server.respond(chat_only(lambda req: Reply("", status=500, body="upstream exploded")))
        await type_and_send(pilot, app, "And wasps?")
        await wait_for(pilot, lambda: "No reply" in notices(app))
        await pilot.pause(0.2)
        assert len(app.query(AssistantMessage)) == boxes  # no empty "no reply" box above the notice


async def test_quitting_before_the_first_token_keeps_the_message_unanswered(server, tmp_path, minilm, data_dir):
    """Ctrl+Q (or a closed terminal) while the model has said nothing: no exchange whose
    reply is only "[reply cancelled]"; the message is kept to send again."""
    from trace_core import CTree

    server.respond(chat_only(lambda req: Reply("too late", delay=8.0)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "And what about Athens?")
        await wait_for(pilot, lambda: app.turn is not None and "working" in app.current_reply.waiting_text)
        await pilot.press("ctrl+q")
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert tree.exchanges == [] and load_kept(tree.vdb) == ["And what about Athens?"]
    tree.vdb.close()


async def test_quitting_while_a_slow_memory_model_files_the_exchange_stores_it_at_once(server, tmp_path, minilm,
                                                                                       data_dir):
    """The reply was on screen and the LLM judge was still deciding where to file it:
    Ctrl+Q waited for the memory model's 30 s timeout, and a closed terminal (1 s) lost
    the reply (a trial). Leaving gives the memory model up: the embedding judge files it."""
    from trace_core import CTree

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}', delay=25.0)  # a memory model that never answers in time
        return Reply("Your locker code is noted.")

    server.respond(respond)
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path, {("memory", "judge"): "llm"}), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My locker code is 4711.")
        await wait_for(pilot, lambda: any(r.body and r.body.get("response_format") for r in server.state.requests))
        assert app.session.tree.exchanges == []  # still being filed
        started = time.monotonic()
        await pilot.press("ctrl+q")
    assert time.monotonic() - started < 5
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert [(x.user, x.assistant) for x in tree.exchanges] == [("My locker code is 4711.",
                                                                 "Your locker code is noted.")]
    assert load_kept(tree.vdb) == []
    tree.vdb.close()


async def test_a_message_queued_while_the_memory_model_files_the_last_exchange_says_so(server, tmp_path, minilm,
                                                                                      data_dir):
    """The reply had finished, yet the next message said "sent when the reply before it
    ends" for 19 s while a slow memory model placed the exchange (a trial): it says what
    it waits for."""
    from nexus.widgets import UserMessage

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}', delay=1.5)
        return Reply("Noted.")

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path, {("memory", "judge"): "llm"}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My locker code is 4711.")
        await wait_for(pilot, lambda: any(r.body and r.body.get("response_format") for r in server.state.requests))
        await type_and_send(pilot, app, "And my bike lock is 1982.")
        queued = app.query(UserMessage).last()
        await pilot.pause(0.1)
        assert "sent once the last exchange is filed in memory" in queued.state
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        assert queued.state == ""


async def test_the_notes_about_unanswered_messages_stay_true_after_a_new_failure(server, tmp_path, minilm, data_dir):
    """Three messages kept from last time, then a fourth fails: the note over the three
    said "4 messages above … send the first" (the 4th is below it, and Ctrl+R sends the
    newest failure); the failure's "press Ctrl+R" stayed over its answer, and after /drop
    (a trial). Each note now says what is so."""
    import json

    from nexus.chat import UNSENT_KEY
    from nexus.widgets import Notice
    from trace_core import CTree

    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.vdb.set_meta(UNSENT_KEY, json.dumps(["First?", "Second?", "Third?"]))
    tree.vdb.close()
    server.respond(chat_only(lambda req: Reply("", status=500, body="upstream exploded")))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 60)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "3 messages above have no answer yet" in notices(app))
        await type_and_send(pilot, app, "Fourth?")
        await wait_for(pilot, lambda: "Your message is kept" in notices(app) and app.turn is None)
        await pilot.pause(0.2)
        said = notices(app)
        assert "3 messages above have no answer yet: Ctrl+R sends them again, one each time." in said, said
        assert "4 messages above" not in said
        server.respond(chat_reply("Four."))
        await pilot.press("ctrl+r")  # the newest failure goes first
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].user == "Fourth?"
        await pilot.pause(0.2)
        failure = next(n for n in app.query(Notice) if "upstream exploded" in n.plain)
        assert "Sent again since, and answered." in failure.plain and "press Ctrl+R" not in failure.plain
        server.respond(chat_only(lambda req: Reply("", status=500, body="down again")))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "down again" in notices(app) and app.turn is None)
        # the note of this Ctrl+R said "sends the next once this one is answered": it failed,
        # and Ctrl+R sends it again first (a re-trial)
        assert "2 more messages wait without an answer: Ctrl+R sends this one again first" in notices(app)
        await pilot.press("ctrl+r")  # the same message fails a second time: two notes of it
        await wait_for(pilot, lambda: notices(app).count("down again") == 2 and app.turn is None)
        await type_and_send(pilot, app, "/drop")
        await wait_for(pilot, lambda: "Dropped" in notices(app))
        failures = [n for n in app.query(Notice) if "down again" in n.plain]
        assert len(failures) == 2
        assert all("Dropped since with /drop." in n.plain and "press Ctrl+R" not in n.plain for n in failures)


async def test_a_huge_fast_reply_is_drawn_in_batches_and_stored(server, tmp_path, minilm, data_dir):
    """A server that ignores max_tokens sent 2,000 lines in under a second: drawn a chunk
    at a time, each draw parsing the reply's last block again, it held the screen 81 s
    and Ctrl+Q 68 s (a trial). Chunks are drawn in batches (stored in 1.4 s here, against
    none within 10 minutes before)."""
    from nexus.widgets import AssistantMessage

    lines = [f"Line {i} of a very long reply that goes on and on.\n" for i in range(2000)]
    server.respond(chat_only(lambda req: Reply("", chunks=lines)))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Go on")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1, timeout=120)
        reply = app.query(AssistantMessage).last()
        assert app.session.tree.exchanges[0].assistant == "".join(lines).strip()
        assert reply.draws <= 100  # not one per chunk
        assert "Line 1999 of a very long reply" in reply.body.source


async def test_quitting_mid_reply_says_what_it_waits_for(server, tmp_path, minilm, data_dir):
    """A stalled server can hold the way out for seconds (11 s with a stopped bundled
    model, in a trial): the chat says why nothing seems to happen."""
    import asyncio

    server.respond(chat_only(lambda req: Reply("too late", delay=8.0)))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "q.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Still there?")
        await wait_for(pilot, lambda: app.turn is not None and "working" in app.current_reply.waiting_text)
        assert "Quitting" not in notices(app)
        leaving = asyncio.create_task(app.leave())
        await wait_for(pilot, lambda: "Quitting: the reply in progress is stopped and stored" in notices(app))
        await leaving


async def test_a_message_sent_before_the_session_opens_survives_quitting_then_waits_for_ctrl_r(
        server, tmp_path, minilm, data_dir):
    """Enter while the session still waits for the bundled model, then Ctrl+Q: there is
    no session to keep the message in yet; it is kept beside the file, and the next start
    shows it "not answered" and sends it with Ctrl+R (it was lost before)."""
    from nexus import parked, sessions
    from nexus.local_model import LocalModel
    from trace_core import CTree
    from trace_core.local_llm import LocalLLMServer

    gate = threading.Event()

    class NeverReady(LocalLLMServer):  # the bundled server, still loading when the user quits
        def start(self, timeout: float = 120) -> LocalLLMServer:
            gate.wait(30)
            return self

    server.respond(chat_only(lambda req: Reply("Rye is fine.")))
    path = tmp_path / "s.db"
    local = LocalModel(NeverReady()).begin()
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm, local_model=local)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await type_and_send(pilot, app, "Can I feed my starter rye flour?")
            assert app.session is None
            queued = [m for m in app.query(UserMessage) if m.text == "Can I feed my starter rye flour?"]
            assert queued and "queued" in queued[0].state
            await pilot.press("ctrl+q")
    finally:
        gate.set()
    assert parked.read(path) == ["Can I feed my starter rye flour?"]
    assert not chats(server)
    assert not path.exists()  # the session's file was not made yet: the next start resumes it all the same
    assert sessions.last_session() == path

    app = NexusApp(make_config(server.base_url, tmp_path), None, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        shown = [m for m in app.query(UserMessage) if m.text == "Can I feed my starter rye flour?"]
        assert shown and shown[0].state == UNSENT_STATE
        assert not parked.parked_path(path).exists()  # in the session file now
        assert load_kept(app.session.tree.vdb) == ["Can I feed my starter rye flour?"]
        assert "1 message above has no answer yet" in notices(app)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert "no answer yet" not in notices(app)  # the note went with the message it was about
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert tree.exchanges[0].user == "Can I feed my starter rye flour?" and load_kept(tree.vdb) == []
    tree.vdb.close()


async def test_a_command_typed_while_the_session_opens_runs_in_its_turn(server, tmp_path, minilm, data_dir):
    """`/set max_tokens 30` then a message, typed while the session waits for the bundled
    model: the command waits in the queue (it was refused, "no session is open"), then
    runs before the message goes."""
    from nexus.local_model import LocalModel
    from trace_core.local_llm import LocalLLMError, LocalLLMServer

    gate = threading.Event()

    class SlowToFail(LocalLLMServer):  # the bundled server, starting slowly, then failing
        def start(self, timeout: float = 120) -> LocalLLMServer:
            gate.wait(30)
            raise LocalLLMError("the local llama.cpp server exited with code 1")

    server.respond(chat_only(lambda req: Reply("Bees make honey.")))
    local = LocalModel(SlowToFail()).begin()
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm, local_model=local)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_and_send(pilot, app, "/set max_tokens 30")
        await type_and_send(pilot, app, "Tell me about bees")
        assert app.session is None and app.session_opening
        queued = [m for m in app.query(UserMessage) if m.text == "/set max_tokens 30"]
        assert queued and "runs when the session is open" in queued[0].state
        gate.set()
        await wait_for(pilot, lambda: app.session is not None and len(app.session.tree.exchanges) == 1)
        assert chats(server)[-1]["max_tokens"] == 30
        assert "needs a session" not in notices(app)
        assert not [m for m in app.query(UserMessage) if m.text == "/set max_tokens 30"]  # ran: no longer queued
        # the chat reads in the order things happened: the command's answer, then the message and its reply
        shown = [w for w in app.query_one("#chat").children if w.display]
        said = next(k for k, w in enumerate(shown) if isinstance(w, Notice) and "max_tokens = 30" in w.plain)
        asked = next(k for k, w in enumerate(shown) if isinstance(w, UserMessage) and w.text == "Tell me about bees")
        assert said < asked < next(k for k, w in enumerate(shown) if isinstance(w, AssistantMessage))


async def test_a_message_typed_while_no_session_could_open_waits_for_the_next_one(server, tmp_path, minilm,
                                                                                   data_dir):
    """The session file is not a session (random bytes): a message typed then waits,
    saying for what; quitting keeps it for the next session that opens — not beside the
    foreign file, which is never resumed at the next start (found in a new-user trial)."""
    from nexus import parked, sessions

    server.respond(chat_only(lambda req: Reply("Blue.")))
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 40)
    before = garbage.read_bytes()
    app = NexusApp(make_config(server.base_url, tmp_path), garbage, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: "Cannot open the session" in notices(app))
        await wait_for(pilot, lambda: "embedder not loaded" in app.sub_title)  # not "loading" for good
        await type_and_send(pilot, app, "What colour is the sky?")
        shown = [m for m in app.query(UserMessage) if m.text == "What colour is the sky?"]
        await wait_for(pilot, lambda: "no session is open" in shown[0].state)
        await pilot.press("ctrl+q")
    assert garbage.read_bytes() == before and not parked.parked_path(garbage).exists()
    assert sessions.last_session() != garbage

    app = NexusApp(make_config(server.base_url, tmp_path), None, embed_fn=minilm)  # the next start: a new session
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        shown = [m for m in app.query(UserMessage) if m.text == "What colour is the sky?"]
        assert shown and shown[0].state == UNSENT_STATE
        assert load_kept(app.session.tree.vdb) == ["What colour is the sky?"]
        assert not parked.parked_path(sessions.no_session_path()).exists()
        # where it came from is said (it turned up in another session without a word)
        await wait_for(pilot, lambda: "1 message typed while no session could be opened is kept in this one."
                       in notices(app))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)


async def test_a_message_queued_before_new_stays_in_its_session(server, tmp_path, minilm, data_dir):
    """Typed while a reply streams, then /new: the queued message belongs to the
    conversation it was typed in — kept there unsent, not sent as the first message of
    the new, empty session (found in a new-user trial)."""
    from nexus import sessions
    from trace_core import CTree

    server.respond(chat_only(lambda req: Reply("", chunks=["Paris ", "is ", "the ", "capital."],
                                                 chunk_delay=0.6)))
    path = tmp_path / "s.db"
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "What is the capital of France?")
        await wait_for(pilot, lambda: app.turn is not None)
        await type_and_send(pilot, app, "And of Spain?")
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != path)
        await pilot.pause(1.0)
        assert app.session.tree.exchanges == [] and not app.outbox
        assert "1 message you queued stayed in s" in notices(app)
        new = app.session_path
    assert not [r for r in chats(server) if "Spain" in user_of(r)]
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert load_kept(tree.vdb)[-1] == "And of Spain?"
    tree.vdb.close()
    assert sessions.last_session() == new


async def test_a_refused_rename_says_so_without_closing_the_session(server, tmp_path, minilm, data_dir):
    """/rename to a name that is taken: said at once, under the command; the session is
    not closed and opened again for it (its notice was buried above the history)."""
    from nexus import sessions

    server.respond(chat_only(lambda req: Reply("Hi.")))
    taken = sessions.sessions_dir() / "taken.db"
    taken.write_bytes(b"")
    app = NexusApp(make_config(server.base_url, tmp_path), sessions.sessions_dir() / "mine.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        session = app.session
        await type_and_send(pilot, app, "/rename taken")
        await pilot.pause(0.3)
        assert "Not renamed: a session named taken already exists." in notices(app)
        assert app.session is session and app.session_path.stem == "mine"


async def test_a_resent_message_with_a_partial_reply_stays_above_it(server, tmp_path, minilm, data_dir):
    """The question of an interrupted reply keeps its place over the partial text (it
    moved down with the resend, and the partial text read as the answer to the message
    before it)."""
    script = {"n": 0}

    def respond(req):
        script["n"] += 1
        if script["n"] == 1:
            return Reply("", chunks=["Once upon ", "a time "], drop=True)  # the stream breaks
        return Reply("The whole poem.", chunk_delay=0.0)

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Write a poem about the sea.")
        await wait_for(pilot, lambda: "Reply interrupted" in notices(app))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        chat = list(app.query_one("#chat").children)
        asked = [w for w in chat if isinstance(w, UserMessage)]
        replies = [w for w in chat if isinstance(w, AssistantMessage)]
        assert [m.text for m in asked] == ["Write a poem about the sea."] * 2
        assert asked[0].state == "sent again below"
        assert chat.index(asked[0]) < chat.index(replies[0]) < chat.index(asked[1]) < chat.index(replies[1])
        assert "Once upon" in replies[0].text and "The whole poem" in replies[1].text


async def test_a_reply_that_only_says_the_sessions_system_text_again_is_no_answer(server, tmp_path, minilm,
                                                                                   data_dir):
    """After `/system Answer in one short sentence.` the bundled model answered "Answer in
    one short sentence." twice, and both were stored as answers (a trial)."""
    said = iter(["Answer in one short sentence.", "answer in one short sentence", "Porto, next June."])
    server.respond(chat_only(lambda req: Reply(next(said))))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/system Answer in one short sentence.")
        await wait_for(pilot, lambda: app.session.settings.system == "Answer in one short sentence.")
        for _ in range(2):
            await type_and_send(pilot, app, "Where is Ana's wedding?")
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
            assert list(app.query(AssistantMessage))[-1].note == "(no answer — Ctrl+R to retry)"
            assert len(app.session.tree.exchanges) == 0
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].assistant == "Porto, next June."
        # the instruction's words in an answer of its own are an answer
        assert says_something("One short sentence: Porto.", "Answer in one short sentence.")


def test_a_prompts_options_are_answers_not_an_echo():
    """A prompt listing its options ("Positive", "A") made an answer of one of them "say
    nothing", and a one-letter line took that letter out of every word (a review)."""
    assert says_something("Positive", "Answer with exactly one of:\nPositive\nNegative\nNeutral")
    assert says_something("B", "Answer with the letter only.\nA\nB\nC")
    assert says_something("bad", "Answer.\nA\nB\nC\nD")
    assert not says_something("Answer with the letter only.", "Answer with the letter only.\nA\nB\nC")
    # the memory block's and the recent window's lines said back, short ones too
    given = "## Sister Porto\n[2026-12-06]\n- User: My sister Ana lives in Porto.\nAssistant: Noted."
    assert not says_something(given, given) and says_something("Porto.", given)


async def test_edit_takes_the_newest_message_written_not_a_retried_one(server, tmp_path, minilm, data_dir):
    """A message got no answer, then /retry regenerated the exchange before it and
    /undo-retry put that back: /edit took the retried exchange, not the message with no
    answer (a trial)."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "an answered message")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        server.respond(chat_only(lambda req: Reply("")))
        await type_and_send(pilot, app, "What is the capital of Australia?")
        await wait_for(pilot, lambda: app.session.pending == "What is the capital of Australia?")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        server.respond(chat_reply("Noted again."))
        await type_and_send(pilot, app, "/retry")
        await wait_for(pilot, lambda: app.session.tree.exchanges[0].assistant == "Noted again.")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        await type_and_send(pilot, app, "/undo-retry")
        await wait_for(pilot, lambda: "Put back version" in notices(app))
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "What is the capital of Australia?")
        assert "Editing your message that got no answer" in notices(app)
        # after /clear no bubble says which message had no answer: the session does (a
        # trial's /edit then took the answered #0)
        app.query_one("#prompt").value = ""
        server.respond(chat_only(lambda req: Reply("")))
        await type_and_send(pilot, app, "What is the capital of Australia?")
        await wait_for(pilot, lambda: app.session.pending == "What is the capital of Australia?")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        await type_and_send(pilot, app, "/clear")
        await wait_for(pilot, lambda: not list(app.query(UserMessage)))
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: "Editing your message that got no answer" in notices(app))
        assert app.query_one("#prompt").value == "What is the capital of Australia?"
        assert app.session.pending == "What is the capital of Australia?"  # kept until the edit is sent


async def test_an_edit_that_can_no_longer_replace_its_exchange_says_so(server, tmp_path, minilm, data_dir):
    """/edit said "Enter sends it in place of the old exchange"; when another exchange was
    stored meanwhile the message went as a new one, and nothing said so (a trial)."""
    server.respond(chat_only(lambda req: Reply("")))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "a message that gets no answer")
        await wait_for(pilot, lambda: app.session.pending == "a message that gets no answer")
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        server.respond(chat_reply("Noted."))
        await type_and_send(pilot, app, "an answered message")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "an answered message")
        await pilot.press("ctrl+r")  # the unanswered one is sent again and stored after it
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        app.query_one("#prompt").value = ""
        await type_and_send(pilot, app, "an answered message, edited")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 3)
        assert "#0 is no longer the newest exchange: this message is sent as a new one." in notices(app)
        assert [x.user for x in app.session.tree.exchanges] == [
            "an answered message", "a message that gets no answer", "an answered message, edited"]


async def test_a_system_prompt_too_big_for_the_context_is_refused_and_named_when_it_fills_it(server, tmp_path,
                                                                                            minilm, data_dir):
    """A 60 KB /system prompt was taken, then every message was refused as "your message is
    about 8 tokens, more than the model's context holds" (a trial)."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path, {("models", "context_tokens"): 2048}), tmp_path / "s.db",
                   embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        big = "Always answer as a pirate would. " * 400  # about 3,300 tokens
        app.query_one("#prompt").value = "/system " + big
        await pilot.press("enter")
        await wait_for(pilot, lambda: "System prompt not set: it is about" in notices(app))
        assert app.session.settings.system == ""
        # the text is back in the input to shorten (it was gone: a trial)
        await wait_for(pilot, lambda: app.query_one("#prompt").value.strip() == ("/system " + big).strip())
        # selected: one Backspace clears it, and Ctrl+Z brings it back (the notice says so:
        # a trial lost 2,700 words to one key)
        assert "Ctrl+Z brings it back" in notices(app)
        await pilot.press("backspace")
        assert app.query_one("#prompt").value == ""
        await pilot.press("ctrl+z")
        assert app.query_one("#prompt").value.strip() == ("/system " + big).strip()
        app.query_one("#prompt").value = ""
        await type_and_send(pilot, app, "/system --clear extra")
        await wait_for(pilot, lambda: "Usage: /system [text|--clear]" in notices(app))
        assert app.session.settings.system == ""
        # one set while the context was larger (another model, a smaller /set context) is named
        app.session.set_system_prompt(big[:6000])
        await type_and_send(pilot, app, "hello")
        await wait_for(pilot, lambda: "and this session's system prompt (about" in notices(app))
        assert "/system --clear removes it" in notices(app) and len(app.session.tree.exchanges) == 0
        # a reasonable one is taken
        await type_and_send(pilot, app, "/system Answer briefly.")
        await wait_for(pilot, lambda: app.session.settings.system == "Answer briefly.")


async def test_a_server_that_never_answered_is_waited_for_in_words(tmp_path, minilm, data_dir):
    """A server that takes the connection and never answers: the title said "no model
    server" while the reply said "the model is working" for two minutes (a trial)."""
    import socket

    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)  # connections are taken by the kernel; nothing ever answers
    url = f"http://127.0.0.1:{mute.getsockname()[1]}/v1"
    try:
        app = NexusApp(make_config(url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            await wait_for(pilot, lambda: not app.server_answered, timeout=15)
            await type_and_send(pilot, app, "hello?")
            await wait_for(pilot, lambda: app.current_reply is not None
                           and "waiting for the model server" in app.current_reply.waiting_text)
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.turn is None)
            assert app.session.pending == "hello?"  # kept for Ctrl+R
    finally:
        mute.close()


async def test_an_edit_refused_as_too_long_goes_on_as_an_edit(server, tmp_path, minilm, data_dir):
    """/edit, then a paste too long for the context: refused, back in the input; its
    shorter words then went as a new exchange, the edit forgotten unsaid (a trial)."""
    server.respond(chat_reply("Noted."))
    over = {("models", "context_tokens"): 900, ("models", "max_tokens"): 120}
    app = NexusApp(make_config(server.base_url, tmp_path, over), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1 and app.turn is None)
        await type_and_send(pilot, app, "/edit")
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "My cat is called Miso.")
        app.query_one("#prompt").value = "x" * 4000
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Not sent: your message is about 1,000 tokens" in notices(app))
        assert "Still editing #0" in notices(app)
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "x" * 4000)
        app.query_one("#prompt").value = ""
        await type_and_send(pilot, app, "My cat is called Tama.")
        await wait_for(pilot, lambda: app.session.tree.exchanges[-1].user == "My cat is called Tama.")
        assert [x.user for x in app.session.tree.exchanges] == ["My cat is called Tama."]


async def test_a_message_too_long_is_refused_at_enter_not_after_the_reply_before_it(server, tmp_path, minilm,
                                                                                    data_dir):
    """Sent while a reply streamed, a paste too long for the context was queued and only
    refused when its turn came, a minute on (a trial). The estimate refuses it at Enter."""
    server.respond(chat_only(lambda req: Reply("", chunks=[f"w{i} " for i in range(400)], chunk_delay=0.05)))
    over = {("models", "context_tokens"): 900, ("models", "max_tokens"): 120}
    app = NexusApp(make_config(server.base_url, tmp_path, over), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Write me a long essay.")
        await wait_for(pilot, lambda: app.current_reply is not None and "w3" in app.current_reply.text)
        app.query_one("#prompt").value = "x" * 4000
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Not sent: your message is about 1,000 tokens" in notices(app))
        assert app.turn is not None and "w399" not in app.current_reply.text  # the reply still streams
        assert not app.outbox and "x" * 4000 not in [m.text for m in app.query(UserMessage)]
        await wait_for(pilot, lambda: app.query_one("#prompt").value == "x" * 4000)


async def test_drop_forgets_the_message_ctrl_r_would_send_next(server, tmp_path, minilm, data_dir):
    """A message that fails each time it is sent again stood before the others for good:
    Ctrl+R sent it first every time, and nothing let it go (a trial)."""
    server.respond(chat_only(lambda req: Reply("")))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/drop")
        await wait_for(pilot, lambda: "Nothing to drop" in notices(app))
        for text in ("the doomed message", "the good message"):
            await type_and_send(pilot, app, text)
            await wait_for(pilot, lambda text=text: text in app.session.kept)
            await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        assert app.session.pending == "the good message"  # the newest failure first
        await type_and_send(pilot, app, "/drop")
        await wait_for(pilot, lambda: 'Dropped "the good message"' in notices(app))
        assert app.session.kept == ["the doomed message"]
        assert any(m.state.startswith("dropped") for m in app.query(UserMessage) if m.text == "the good message")
        server.respond(chat_reply("Answered."))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        assert app.session.tree.exchanges[0].user == "the doomed message" and app.session.kept == []
    # the file forgot it too: a restart does not bring it back
    again = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with again.run_test(size=(120, 40)) as pilot:
        await ready(again, pilot)
        assert again.session.kept == [] and "no answer yet" not in notices(again)


async def test_a_server_gone_mid_session_is_said_in_one_sentence(server, tmp_path, minilm, data_dir):
    """"…(is it running?): Connection error.. Your message is kept" (trial)."""
    server.respond(chat_reply("First."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "hello")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        server.httpd.shutdown()
        server.httpd.server_close()
        await type_and_send(pilot, app, "are you there?")
        await wait_for(pilot, lambda: "No reply:" in notices(app), timeout=60)
        said = notices(app)
        assert "Your message is kept" in said and ".." not in said


async def test_a_reply_that_stalls_mid_stream_says_so_then_that_it_broke_off(server, tmp_path, minilm, data_dir):
    """Text came, then nothing: the reply looked alive until the client's timeout, whose
    note said the server "did not answer" (a trial). It now says it waits, then that the
    server stopped sending mid-reply; the text that came stays, the message is kept."""
    server.respond(chat_only(lambda req: Reply("", chunks=["The sea ", "is wide "], stall=30)))
    cfg = make_config(server.base_url, tmp_path, {("server", "timeout"): 3.0})  # the stall is said after 1.5 s
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Describe the sea.")
        await wait_for(pilot, lambda: app.current_reply is not None and "is wide" in app.current_reply.text)
        reply = app.current_reply
        await wait_for(pilot, lambda: reply.stalled.display, timeout=5)
        assert re.fullmatch(r"⋯ no new text for [12] s — Esc stops it, the partial text is kept", reply.stalled_text)
        await wait_for(pilot, lambda: app.turn is None, timeout=10)
        said = notices(app)
        assert re.search(f"Reply interrupted: the model server at {re.escape(server.base_url)} stopped sending "
                         r"mid-reply \(no new text for [34] s\)\. The text that came stays above \(not stored\)\. "
                         "Your message is kept — press Ctrl\\+R", said), said
        assert "did not answer" not in said
        assert not reply.stalled.display and reply.note == "reply interrupted" and "is wide" in reply.text
        assert app.session.kept == ["Describe the sea."] and not app.session.tree.exchanges


async def test_escape_on_a_stalled_reply_keeps_its_partial_text(server, tmp_path, minilm, data_dir):
    """What the stall line says Esc does: the reply stops, stored as far as it got, marked."""
    server.respond(chat_only(lambda req: Reply("", chunks=["The sea ", "is wide "], stall=30)))
    cfg = make_config(server.base_url, tmp_path, {("server", "timeout"): 30.0})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Describe the sea.")
        await wait_for(pilot, lambda: app.current_reply is not None and "is wide" in app.current_reply.text)
        reply = app.current_reply
        reply.stall_after = 1.0  # not the 15 s a user waits
        await wait_for(pilot, lambda: reply.stalled.display, timeout=5)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.turn is None and len(app.session.tree.exchanges) == 1, timeout=5)
        assert app.session.tree.exchanges[0].assistant == "The sea is wide \n\n[reply cancelled]"
        assert not reply.stalled.display and reply.note == "reply cancelled: partial text kept"


async def test_a_server_killed_mid_reply_is_said_so_and_the_queued_message_waits_for_it(
        server, tmp_path, minilm, data_dir, monkeypatch):
    """The model server killed mid-reply (its connection reset as it wrote): said "cannot
    reach the model server (is it running?)" under the half reply it had just sent. Now:
    the connection was lost mid-reply, the text that came stays; the message queued
    behind it waits for the server instead of being sent to fail, and both go once it
    answers again."""
    from nexus import replies

    monkeypatch.setattr(replies, "SERVER_RECHECK_SECONDS", 0.3)
    down = threading.Event()
    died: list[int] = []

    def respond(req):
        if down.is_set():  # nothing listens any more: "cannot reach the model server"
            raise ConnectionAbortedError("the server went away")
        if user_of(req) == "Write a poem about the sea." and not died:
            died.append(1)
            down.set()
            server.state.models = []  # its model list says nothing either (what Nexus asks to see it back)
            return Reply("", chunks=["Once upon ", "a time "], stall=2.0, die=True)
        return Reply(f"Answered: {user_of(req)}")

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Write a poem about the sea.")
        await wait_for(pilot, lambda: app.current_reply is not None and "a time" in app.current_reply.text)
        await type_and_send(pilot, app, "And one about the hills.")
        await wait_for(pilot, lambda: "Reply interrupted" in notices(app), timeout=10)
        said = notices(app)
        assert (f"Reply interrupted: the connection to the model server at {server.base_url} was lost mid-reply. "
                "The text that came stays above (not stored). Your message is kept — it goes again, first, when the "
                "model server answers.") in said
        assert "Ctrl+R" not in said  # the server-wait sends it: one thing said
        assert "1 queued message waits for it" in log_text(app)
        assert ("The model server is not answering: the 1 message queued after this one waits, and goes when it "
                "answers again") in said
        await pilot.pause(1.0)
        assert "cannot reach" not in notices(app)  # the queued one was not sent to fail
        assert [item.text for item in app.outbox] == ["And one about the hills."]
        assert "the model server is not answering" in app.outbox[0].shown.state
        assert not app.session.tree.exchanges and app.session.kept == ["Write a poem about the sea."]
        down.clear()
        server.state.models = ["test-model"]
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2, timeout=30)
        assert [x.user for x in app.session.tree.exchanges] == ["Write a poem about the sea.",
                                                                "And one about the hills."]
        assert not app.session.kept
        await wait_for(pilot, lambda: app.turn is None and not app.outbox)
        # the notes of the outage stay above the answers, and say what became of it (they sat
        # under both answers, still saying the server was not answering: a review)
        chat = list(app.query_one("#chat").children)
        first_answer = next(k for k, w in enumerate(chat) if isinstance(w, ExchangeHead))
        assert not [w.plain for w in chat[first_answer:] if isinstance(w, Notice)]
        said = notices(app)
        assert "is not answering" not in said and "Sent again since, and answered." in said
        assert said.count("The model server answers again: the waiting messages go now, in order.") == 1


async def test_a_proxy_saying_its_upstream_cannot_be_reached_is_not_taken_for_the_server_gone(
        server, tmp_path, minilm, data_dir):
    """What a failure says of the server was read out of its words: a proxy's HTTP 502
    "cannot reach the model server at http://gpu-box:8000/v1" (its own upstream, its words
    said back) was taken for Nexus's server gone, and the message queued behind it was held
    "waiting — the model server is not answering" while the server answered. The failure's
    kind comes from the error caught (an HTTP status here), not from its text."""
    upstream = "cannot reach the model server at http://gpu-box:8000/v1 (is it running?)"

    def respond(req):
        if user_of(req) == "First question.":
            return Reply(status=502, error=upstream, delay=1.0)
        return Reply(f"Answered: {user_of(req)}")

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "First question.")
        await type_and_send(pilot, app, "Second question.")
        await wait_for(pilot, lambda: "No reply" in notices(app), timeout=10)
        assert upstream in notices(app)  # its words are still said
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1, timeout=3)
        assert [x.user for x in app.session.tree.exchanges] == ["Second question."]
        assert "not answering" not in notices(app) and not app.server_waiting
        assert "press Ctrl+R to send it again" in notices(app)


async def test_a_message_that_kills_the_server_again_when_it_is_back_is_not_sent_a_third_time(
        server, tmp_path, minilm, data_dir, monkeypatch):
    """A server that crashes on one message and is restarted at once: the message was sent
    again each time it came back, crashing it for ever. It is sent again once; failing so
    again, it stays kept for Ctrl+R."""
    from nexus import replies

    monkeypatch.setattr(replies, "SERVER_RECHECK_SECONDS", 0.3)
    down = threading.Event()
    asked: list[str] = []

    def back() -> None:
        server.state.models = ["test-model"]
        down.clear()

    def respond(req):
        if down.is_set():
            raise ConnectionAbortedError("the server went away")
        asked.append(user_of(req))
        if user_of(req) == "The message it crashes on.":
            down.set()
            server.state.models = []
            threading.Timer(3.0, back).start()  # restarted by its supervisor (1.5 s: under load the check after the crash came after it)
            return Reply("", chunks=["Once ", "upon "], stall=1.0, die=True)
        return Reply(f"Answered: {user_of(req)}")

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "The message it crashes on.")
        await wait_for(pilot, lambda: app.current_reply is not None and "upon" in app.current_reply.text)
        await type_and_send(pilot, app, "Another message.")
        await wait_for(pilot, lambda: asked.count("The message it crashes on.") == 2, timeout=15)
        await wait_for(pilot, lambda: app.turn is None and not app.outbox and not down.is_set(), timeout=15)
        await pilot.pause(2.0)
        assert asked.count("The message it crashes on.") == 2
        last = [n.plain for n in app.query(Notice) if "Reply interrupted" in n.plain][-1]
        assert last.endswith("Your message is kept — press Ctrl+R to send it again.")  # not waited for again
        assert app.session.kept[0] == "The message it crashes on." and not app.server_waiting


async def test_a_server_killed_as_it_wrote_a_reply_without_chunks_is_said_gone(server, tmp_path, minilm, data_dir,
                                                                              monkeypatch):
    """A server whose stream ends with its connection (no chunked body), killed mid-reply:
    the stream just ends, said "ended before the server finished it (the connection
    dropped, the prompt did not fit, …)", and the next message was sent to fail (a
    terminal trial). Nothing listening there any more, it is said gone; the next message
    waits for it, and both go once it answers again."""
    from scripted_server import ScriptedServer

    from nexus import replies

    monkeypatch.setattr(replies, "SERVER_RECHECK_SECONDS", 0.3)

    def respond(req):
        threading.Timer(0.2, server.stop).start()  # killed: it listens no more
        return Reply("", chunks=["Once upon ", "a time "], stall=1.0, drop=True)

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Write a poem about the sea.")
        await wait_for(pilot, lambda: "Reply interrupted" in notices(app), timeout=10)
        said = notices(app)
        assert (f"Reply interrupted: the connection to the model server at {server.base_url} was lost mid-reply, "
                "and nothing answers there now (did it stop or crash?). The text that came stays above") in said
        assert "Your message is kept — it goes again, first, when the model server answers." in said
        assert "Ctrl+R" not in said
        # said once: the note above says the message goes again, this one what else waits
        assert ("The model server is not answering: what you send meanwhile waits, and goes after the message "
                "above when it answers again (Nexus asks every 0.3 s).") in said
        assert said.count("when the model server answers") + said.count("sent again when it answers") == 1
        await type_and_send(pilot, app, "And one about the hills.")
        await pilot.pause(1.0)
        assert "cannot reach" not in notices(app)  # not sent to fail
        assert [item.text for item in app.outbox] == ["And one about the hills."]
        assert "the model server is not answering" in app.outbox[0].shown.state
        with ScriptedServer(server.port) as again:  # restarted
            again.respond(chat_only(lambda req: Reply(f"Answered: {user_of(req)}")))
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2, timeout=30)
            assert [x.user for x in app.session.tree.exchanges] == ["Write a poem about the sea.",
                                                                    "And one about the hills."]


async def test_a_server_back_for_one_message_says_that_one_goes(server, tmp_path, minilm, data_dir, monkeypatch):
    """The server killed mid-reply with nothing queued behind it: when it answered again the
    note said "the waiting messages go now, in order" over the one message that went."""
    from scripted_server import ScriptedServer

    from nexus import replies

    monkeypatch.setattr(replies, "SERVER_RECHECK_SECONDS", 0.3)

    def respond(req):
        threading.Timer(0.2, server.stop).start()  # killed: it listens no more
        return Reply("", chunks=["Once upon ", "a time "], stall=1.0, drop=True)

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Write a poem about the sea.")
        await wait_for(pilot, lambda: app.server_waiting, timeout=10)
        with ScriptedServer(server.port) as again:  # restarted
            again.respond(chat_only(lambda req: Reply(f"Answered: {user_of(req)}")))
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1, timeout=30)
        said = notices(app)
        assert "The model server answers again: the waiting message goes now." in said
        assert "messages go now" not in said


async def test_ctrl_r_while_the_server_is_waited_for_keeps_the_order_written(server, tmp_path, minilm, data_dir,
                                                                             monkeypatch):
    """The server killed mid-reply with a message queued, another typed while it is waited
    for, then Ctrl+R: the kept message went to the end of the queue, answered after the
    two written after it. It goes first, as it was written first."""
    from nexus import replies

    monkeypatch.setattr(replies, "SERVER_RECHECK_SECONDS", 0.3)
    down = threading.Event()
    died: list[int] = []

    def respond(req):
        if down.is_set():
            raise ConnectionAbortedError("the server went away")
        if user_of(req) == "First." and not died:
            died.append(1)
            down.set()
            server.state.models = []
            return Reply("", chunks=["Once upon ", "a time "], stall=1.0, die=True)
        return Reply(f"Answered: {user_of(req)}")

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "First.")
        await wait_for(pilot, lambda: app.current_reply is not None and "a time" in app.current_reply.text)
        await type_and_send(pilot, app, "Second.")
        await wait_for(pilot, lambda: app.server_waiting, timeout=10)
        await type_and_send(pilot, app, "Third.")
        await pilot.press("ctrl+r")
        await pilot.pause(0.3)
        assert [item.text for item in app.outbox] == ["First.", "Second.", "Third."]
        waiting = [m.text for m in app.query(UserMessage) if "not answering" in m.state]
        assert waiting == ["First.", "Second.", "Third."]  # shown in that order too
        down.clear()
        server.state.models = ["test-model"]
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 3, timeout=30)
        assert [x.user for x in app.session.tree.exchanges] == ["First.", "Second.", "Third."]
        assert not app.session.kept


def lm_studio_context(n_ctx: int, answer: str):
    """A server whose model was loaded with ``n_ctx`` tokens of context (as LM Studio loads
    most at 4,096): a longer prompt is refused in its words."""
    def respond(req):
        size = sum(len(m["content"]) for m in req["messages"]) // 4
        if size > n_ctx:
            return Reply(status=400, error=f"Trying to keep the first {size} tokens when context the overflows. "
                         f"However, the model is loaded with context length of only {n_ctx} tokens, which is not "
                         "enough. Try to load the model with a larger context length, or provide a shorter input")
        return Reply(answer)
    return chat_only(respond)


async def test_a_server_context_smaller_than_planned_is_taken_and_ctrl_r_then_fits(server, tmp_path, minilm,
                                                                                  data_dir):
    """Nexus planned for 8,192 tokens; LM Studio had loaded the model with 4,096. Once the
    recent replies filled the prompt past that, every message failed with the server's
    "context length of only 4096 tokens", and Ctrl+R sent it to fail the same way (a trial)."""
    server.respond(chat_only(lambda req: Reply("A long answer about sailing. " * 170)))  # ~1,230 tokens
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        for k in range(3):
            await type_and_send(pilot, app, f"Tell me about sailing, part {k}.")
            await wait_for(pilot, lambda k=k: len(app.session.tree.exchanges) == k + 1 and app.turn is None)
        server.respond(lm_studio_context(4096, "Tacking is turning the bow through the wind."))
        await type_and_send(pilot, app, "And what is tacking? " + "Some detail of my boat. " * 150)
        await wait_for(pilot, lambda: app.turn is None and app.session.kept)
        said = notices(app)
        assert "did not fit the model's context at the server, which holds 4,096 tokens" in said, said
        assert "fits its prompts to 4,096 from now on" in said and "models.context_tokens = 4096" in said, said
        assert app.config.section("models").context_tokens == 4096
        assert len(app.session.tree.exchanges) == 3  # nothing of the refusal is stored
        await pilot.press("ctrl+r")  # the same message, now fitted to the server's context
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 4 and app.turn is None)
        assert app.session.tree.exchanges[3].assistant.startswith("Tacking is turning")
        last = chats(server)[-1]
        assert sum(len(m["content"]) for m in last["messages"]) // 4 <= 4096


async def test_a_prompt_the_server_counts_longer_than_the_estimate_plans_for_less(server, tmp_path, minilm,
                                                                                 data_dir):
    """llama.cpp refused a prompt of Japanese text as 9,412 tokens where Nexus's estimate
    (characters / 4) made it 4,700, within the same 8,192 context: nothing said what to
    change, and Ctrl+R failed the same way. Its count says by how much to plan for less."""
    def respond(req):
        size = sum(len(m["content"]) for m in req["messages"])  # a token a character
        if size > 8192:
            return Reply(status=400, body=json.dumps({"error": {
                "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": size, "n_ctx": 8192,
                "message": f"request ({size} tokens) exceeds the available context size (8192 tokens), try "
                           "increasing it"}}), content_type="application/json")
        return Reply("了解しました。")

    server.respond(chat_only(respond))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "日本語の長い文章です。" * 800)  # 8,800 characters: 2,200 tokens by the estimate
        await wait_for(pilot, lambda: app.turn is None and app.session.kept)
        said = notices(app)
        assert "which holds 8,192 tokens; it counted the prompt as" in said, said
        fit = app.config.section("models").context_tokens
        assert fit < 8192 and f"fits its prompts to {fit:,} from now on" in said, said
        assert "HTTP 400" not in said


class StatusError(Exception):
    def __init__(self, status: int, body) -> None:
        super().__init__("error")
        self.status_code, self.body = status, body


@pytest.mark.parametrize("body, context, prompt", [
    ({"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 9412, "n_ctx": 8192,
                "message": "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"}},
     8192, 9412),
    ({"error": {"code": 400, "type": "exceed_context_size_error",
                "message": "the request exceeds the available context size, try increasing it"}}, None, None),
    ({"object": "error", "type": "BadRequestError", "code": 400,
      "message": "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens (4608 in the "
                 "messages, 512 in the completion). Please reduce the length of the messages or completion."},
     4096, 4608),
    ({"error": "Trying to keep the first 5020 tokens when context the overflows. However, the model is loaded with "
               "context length of only 4096 tokens, which is not enough."}, 4096, None),
    ({"error": {"message": "Requested tokens (9000) exceed context window of 8192"}}, 8192, None),
])
def test_each_servers_words_for_a_prompt_too_long_are_read(body, context, prompt):
    from nexus.turn import Overflow, context_overflow

    assert context_overflow(StatusError(400, body)) == Overflow(context, prompt)


@pytest.mark.parametrize("status, body", [
    (400, {"error": {"message": "max_tokens must be at least 1, got -5"}}),
    (404, {"error": "No models loaded. Please load a model in the developer page or use the 'lms load' command."}),
    (503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}),
])
def test_other_refusals_are_no_context_overflow(status, body):
    from nexus.turn import context_overflow

    assert context_overflow(StatusError(status, body)) is None


async def test_a_reply_the_server_cut_short_of_max_tokens_is_not_said_cut_at_max_tokens(server, tmp_path, minilm,
                                                                                        data_dir):
    """Ollama stops a reply at its num_predict, LM Studio at its response length, llama.cpp
    when its context fills: a reply of twelve words said "reply cut at the max_tokens limit
    (2048)", which it never came near; and a model cut while thinking "spent its whole
    max_tokens limit (2048) thinking" after ten words of it (a trial)."""
    server.respond(chat_only(lambda req: Reply("Paris is the capital of France and it is known for", finish="length")))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "What is Paris?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1 and app.turn is None)
        reply = app.query(AssistantMessage).last()
        assert reply.note == "reply cut by the server (~13 tokens)", reply.note
        stored = app.session.tree.exchanges[0].assistant
        assert stored.endswith("known for \n\n[reply cut by the server (~13 tokens)]") and "max_tokens" not in stored
        said = notices(app)
        assert "The model server ended the reply after about 13 tokens, short of the max_tokens limit (2048): its " \
               "own reply-length limit" in said, said
        server.respond(chat_only(lambda req: Reply("", reasoning=["Okay, the user asks ", "about Lyon."],
                                                   finish="length")))
        await type_and_send(pilot, app, "And Lyon?")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["And Lyon?"])
        said = notices(app)
        assert "No reply: the model server stopped the model while it was still thinking, after about 9 tokens — " \
               "short of the max_tokens limit (2048): its own reply-length limit or a full context did" in said, said
        assert "spent its whole" not in said and len(app.session.tree.exchanges) == 1
        server.respond(chat_only(lambda req: Reply("Lyon is on the Rhône and it", finish="length")))
        await type_and_send(pilot, app, "/drop")
        await type_and_send(pilot, app, "Lyon, then?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2 and app.turn is None)
        assert notices(app).count("The model server ended the reply") == 1  # the why once; each reply its note
        assert app.query(AssistantMessage).last().note.startswith("reply cut by the server (~")


async def test_a_busy_server_s_retry_after_is_said(server, tmp_path, minilm, data_dir):
    """HTTP 429 with Retry-After: 20 (a rate-limiting proxy in front of vLLM; Ollama's 503
    "server busy") said "answered HTTP 429: Too many requests … press Ctrl+R", and a Ctrl+R
    at once failed the same way: the wait it asked for was never said (a trial)."""
    server.respond(chat_only(lambda req: Reply(status=429, error="Too many requests", headers={"Retry-After": "20"})))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Hello?")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Hello?"])
        said = notices(app)
        assert "answered HTTP 429: Too many requests — it asks for 20 s before the next request. Your message is " \
               "kept" in said, said
        server.respond(chat_only(lambda req: Reply(status=503, error="server busy, please try again.  maximum "
                                                   "pending requests exceeded")))
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "maximum pending requests exceeded" in notices(app) and app.turn is None)
        assert notices(app).count("it asks for") == 1  # no Retry-After: no wait made up
        assert not app.session.tree.exchanges


async def test_a_server_silent_past_the_timeout_says_how_long_and_what_to_do(server, tmp_path, minilm, data_dir):
    """LM Studio and Ollama load a model at its first message, minutes for a big one: the
    reply failed as "did not answer in time: Request timed out." — the client's words
    twice, not how long it waited nor what to do (a trial)."""
    server.respond(chat_only(lambda req: Reply("Loaded at last.", delay=4)))
    cfg = make_config(server.base_url, tmp_path, {("server", "timeout"): 2.0})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Hello, slow server")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Hello, slow server"])
        said = notices(app)
        assert f"No reply: the model server at {server.base_url} sent no reply in 2 s (server.timeout) — a model it " \
               "is still loading can take longer: Ctrl+R once it has loaded, or raise server.timeout in nexus.toml" \
               in said, said
        assert "Request timed out" not in said and not app.session.tree.exchanges


async def test_the_timeout_names_the_resend_key_as_bound(server, tmp_path, minilm, data_dir):
    """The timeout's advice said "Ctrl+R once it has loaded" after resend = "f8", beside
    "press F8 to send it again": Ctrl+R did nothing (two changes met: a review)."""
    server.respond(chat_only(lambda req: Reply("Loaded at last.", delay=4)))
    cfg = make_config(server.base_url, tmp_path, {("server", "timeout"): 2.0})
    cfg.set("keys", "resend", "f8")
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Hello, slow server")
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Hello, slow server"])
        said = notices(app)
        assert "can take longer: F8 once it has loaded" in said and "Ctrl+R" not in said, said

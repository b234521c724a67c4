"""nexus proxy: the real ``openai`` client → the proxy (uvicorn, real HTTP) → the scripted
upstream on 127.0.0.1. Real session files; MiniLM, except the 4 × 50 load test."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time

import httpx
import openai
import pytest
import uvicorn
from scripted_server import Reply

from nexus import serve_cli
from nexus.memory_service import MemoryService, session_path
from nexus.proxy import MemoryProxy, SessionPool, StreamWatch, with_memory
from trace_core import CTree
from trace_core.invariants import check_invariants

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def make_pool(embed, default="default") -> SessionPool:
    return SessionPool(lambda name: MemoryService.open(session_path(name), embed_fn=embed, judge="embedding"),
                       default)


@contextlib.contextmanager
def running_proxy(pool: SessionPool, upstream: str, token: str | None = None, max_body: int | None = None):
    """The proxy app under uvicorn on a free loopback port, in a thread."""
    app = MemoryProxy(pool, upstream, "upstream-key").app(token, max_body)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "proxy did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        pool.close()


def stored(name: str, embed) -> CTree:
    return CTree.open(str(session_path(name)), embed_fn=embed, judge="embedding")


def client(base_url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)


# --- units ----------------------------------------------------------------------------------


def test_an_image_shown_with_text_is_noted_in_what_is_stored():
    """A question asked about an image was stored as its text alone (found in a new-user
    trial); an image alone is no text to remember."""
    from nexus.proxy import content_text

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert content_text([{"type": "text", "text": "What is in this photo?"}, image]) == "What is in this photo?\n[image]"
    assert content_text([image]) == ""
    assert content_text([{"type": "text", "text": "plain"}]) == "plain"


def test_memory_goes_into_the_system_message():
    msgs = [{"role": "user", "content": "hi"}]
    assert with_memory(msgs, "") is msgs
    assert with_memory(msgs, "MEM") == [{"role": "system", "content": "MEM"}, {"role": "user", "content": "hi"}]
    sys_msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert with_memory(sys_msgs, "MEM")[0]["content"] == "Be brief.\n\nMEM"
    assert sys_msgs[0]["content"] == "Be brief."  # the request's own list is not changed
    parts = [{"role": "system", "content": [{"type": "text", "text": "A"}]}, {"role": "user", "content": "q"}]
    assert with_memory(parts, "MEM")[0]["content"][-1] == {"type": "text", "text": "MEM"}


def test_stream_watch_needs_done_and_spots_errors():
    w = StreamWatch()
    w.feed(b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\ndata: {"choices":[{"del')
    w.feed(b'ta":{"content":"lo"}}]}\n\n')
    assert w.answer == "Hello" and not w.done
    w.feed(b"data: [DONE]\n\n")
    assert w.done
    bad = StreamWatch()
    bad.feed(b'data: {"error": {"message": "context overflow"}}\n\n')
    assert bad.failed == "context overflow"


def test_stream_watch_keeps_the_first_choice_and_passes_over_odd_chunks():
    """n=2 stored "ParisRome is is sunny rainy"; a chunk whose delta was a string or whose
    choice was a number ended the relay with a traceback (a trial)."""
    w = StreamWatch()
    for index, word in ((0, "Paris"), (1, "Rome"), (0, " is sunny"), (1, " is rainy")):
        w.feed(f'data: {{"choices":[{{"index":{index},"delta":{{"content":"{word}"}}}}]}}\n\n'.encode())
    w.feed(b'data: {"choices":[{"delta":"just a string"}]}\n\ndata: {"choices":[7]}\n\n')
    w.feed(b'data: {"choices":"none"}\n\ndata: [DONE]\n\n')
    assert w.answer == "Paris is sunny" and w.done


def test_the_proxy_log_keeps_the_http_clients_urls_out():
    """The memory model's client logged "POST http://alice:pw-SECRET@…" at INFO (a trial)."""
    from nexus.proxy import quiet_logging

    names = ("", "trace_core", "nexus.proxy", "httpx", "httpx2", "httpcore", "openai")
    levels = {n: logging.getLogger(n).level for n in names}
    quiet_logging()
    logging.getLogger().setLevel(logging.INFO)  # as a proxy's own process has it (pytest's handlers kept basicConfig's off)
    try:
        for client in ("httpx", "httpx2", "openai"):
            assert not logging.getLogger(client).isEnabledFor(logging.INFO)
    finally:  # the rest of the run logs as before
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


# --- through real HTTP -------------------------------------------------------------------------


def test_chat_not_streamed_then_streamed_remembers_and_recalls(data_dir, minilm, server):
    server.respond(lambda req: Reply("Noted: your sister Ana lives in Lisbon."
                                     if "sister" in req["messages"][-1]["content"] else "She lives in Lisbon."))
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        r = c.chat.completions.create(model="test-model", messages=[
            {"role": "user", "content": "My sister Ana lives in Lisbon."}])
        assert r.choices[0].message.content == "Noted: your sister Ana lives in Lisbon."
        assert server.chat_requests()[-1]["model"] == "test-model"
        stream = c.chat.completions.create(model="test-model", stream=True, messages=[
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where does Ana live?"}])
        text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
        assert text.strip() == "She lives in Lisbon."
        # the upstream got the memory block inside the client's own system message
        sent = server.chat_requests()[-1]["messages"]
        assert sent[0]["role"] == "system" and sent[0]["content"].startswith("Be brief.")
        assert "Ana lives in Lisbon" in sent[0]["content"] and len(sent) == 2
        assert [m.id for m in c.models.list().data] == ["test-model"]  # passed through
        assert ("GET", "/v1/models") in server.calls()
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [
        ("My sister Ana lives in Lisbon.", "Noted: your sister Ana lives in Lisbon."),
        ("Where does Ana live?", "She lives in Lisbon.")]
    tree.vdb.close()


def test_a_regenerated_answer_replaces_the_rejected_one(data_dir, minilm, server, caplog):
    """A client's "regenerate" sends the same messages again. The rejected answer was
    recalled as memory for its own retry and the question stored twice (a trial); now it
    is left out of the block and the new answer takes its place. The same words asked
    again after the answer (the client holds it) are a new exchange."""
    answers = iter(["Noted.", "Your sister is called Bob.", "Your sister is Ana.", "Ana, as before."])
    server.respond(lambda req: Reply(next(answers)))
    first = [{"role": "user", "content": "My sister is called Ana and she lives in Porto."}]
    ask = {"role": "user", "content": "What is my sister called?"}
    caplog.set_level(logging.INFO, logger="nexus")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        c.chat.completions.create(model="m", messages=first)
        history = first + [{"role": "assistant", "content": "Noted."}]
        wrong = c.chat.completions.create(model="m", messages=history + [ask]).choices[0].message.content
        assert wrong == "Your sister is called Bob."
        stream = c.chat.completions.create(model="m", stream=True, messages=history + [ask])  # regenerate
        assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices).strip() == "Your sister is Ana."
        sent = server.chat_requests()[-1]["messages"][0]["content"]
        assert "Ana" in sent and "Bob" not in sent  # the rejected answer is no memory of its retry
        again = history + [ask, {"role": "assistant", "content": "Your sister is Ana."}, ask]
        c.chat.completions.create(model="m", messages=again)
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [
        (first[0]["content"], "Noted."), (ask["content"], "Your sister is Ana."), (ask["content"], "Ana, as before.")]
    check_invariants(tree)
    tree.vdb.close()
    assert "regenerated" in caplog.text


def test_the_same_question_after_other_messages_is_a_new_exchange(data_dir, minilm, server):
    """Two one-shot requests with the same question and other notes, within a minute: the
    second replaced the first as a "regenerate" (a trial). Only the same earlier messages
    make one."""
    answers = iter(["Lunch with Bob, Tuesday.", "Dentist on Friday at 9am."])
    server.respond(lambda req: Reply(next(answers)))
    ask = {"role": "user", "content": "Summarize my notes in one line."}
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        for notes in ("Today's notes: lunch with Bob on Tuesday.", "Today's notes: dentist Friday 9am."):
            c.chat.completions.create(model="m", messages=[{"role": "system", "content": notes}, ask])
    tree = stored("default", minilm)
    assert [x.assistant for x in tree.exchanges] == ["Lunch with Bob, Tuesday.", "Dentist on Friday at 9am."]
    tree.vdb.close()


def test_the_same_words_about_other_images_are_new_exchanges(data_dir, minilm, server):
    """Three captions asked in the same words about three images: each replaced the one
    before as a "regenerate", images being "[image]" alike in the text (a review)."""
    answers = iter(["A red square.", "A blue circle.", "A cat.", "A cat on a mat."])
    server.respond(lambda req: Reply(next(answers)))

    def ask(url: str) -> list:
        return [{"role": "system", "content": "Caption images."},
                {"role": "user", "content": [{"type": "text", "text": "Describe this photo"},
                                             {"type": "image_url", "image_url": {"url": url}}]}]

    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        for image in ("data:image/png;base64,AAAA", "data:image/png;base64,BBBB", "https://example.com/cat.jpg",
                      "https://example.com/cat.jpg"):  # the last: the same request again, a regenerate
            c.chat.completions.create(model="m", messages=ask(image))
    tree = stored("default", minilm)
    assert [x.assistant for x in tree.exchanges] == ["A red square.", "A blue circle.", "A cat on a mat."]
    tree.vdb.close()


def _sse(*events: dict, done: str = "data: [DONE]\n\n") -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + done


def test_tool_steps_prefills_and_answers_that_say_nothing(data_dir, minilm, server, caplog):
    """A tool loop's first step ("Let me check…" with a tool call) was kept as the answer,
    then the loop's answer again; a prefill's start was lost; a bare "User:" and the
    client's system prompt said back were kept; a stream whose [DONE] had no newline after
    it was not (a trial). Each: as Nexus would keep it, or not at all."""
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    step = json.dumps({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me check the weather for you.", "tool_calls": [call]}}]})
    streamed_step = _sse({"choices": [{"index": 0, "delta": {"content": "Checking."}, "finish_reason": None}]},
                         {"choices": [{"index": 0, "delta": {"tool_calls": [dict(call, index=0)]},
                                       "finish_reason": "tool_calls"}]})
    unended = _sse({"choices": [{"index": 0, "delta": {"content": "Oslo is sunny."}, "finish_reason": "stop"}]},
                   done="data: [DONE]")
    server.script(Reply(body=step, content_type="application/json"),
                  Reply(body=streamed_step, content_type="text/event-stream"),
                  Reply("It is sunny and 20C in Oslo."),
                  Reply(" Paris."),
                  Reply("User:"),
                  Reply("Answer in one short sentence."),
                  Reply(body=unended, content_type="text/event-stream"))
    ask = {"role": "user", "content": "What's the weather in Oslo?"}
    caplog.set_level(logging.INFO, logger="nexus")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        first = c.chat.completions.create(model="m", messages=[ask])
        assert first.choices[0].message.tool_calls[0].function.name == "weather"
        list(c.chat.completions.create(model="m", stream=True, messages=[ask]))
        loop = [ask, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny, 20C"}]
        c.chat.completions.create(model="m", messages=loop)
        c.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}])
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "what is up"}])
        c.chat.completions.create(model="m", messages=[{"role": "system", "content": "Answer in one short sentence."},
                                                       {"role": "user", "content": "My brother Tom is a pilot."}])
        text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="m", stream=True, messages=[{"role": "user", "content": "And tomorrow in Oslo?"}]) if ch.choices)
        assert text == "Oslo is sunny."
        time.sleep(0.3)  # the relay's last log line follows the client's end of stream
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [
        ("What's the weather in Oslo?", "It is sunny and 20C in Oslo."),
        ("What is the capital of France?", "The capital of France is Paris."),
        ("And tomorrow in Oslo?", "Oslo is sunny.")]
    tree.vdb.close()
    assert caplog.text.count("a tool call: its loop's answer is remembered") == 2
    assert caplog.text.count("the answer says nothing: not remembered") == 2
    assert "memory tokens" in caplog.text  # each request's line says what memory went with it


def test_an_answer_copying_the_memory_block_out_is_not_remembered(data_dir, minilm, server, caplog):
    """A model that says its system message back (memory block and all) had it stored as
    its answer, and the next recall nested old memory in new (a trial, with gemma-270m too);
    an upstream that repeats a prefill had it stored twice."""
    def respond(req):
        ask = req["messages"][-1]["content"]
        if ask.startswith("My sister"):
            return Reply("Noted.")
        if "France" in ask:
            return Reply("The capital of France is Paris.")
        return Reply(req["messages"][0]["content"])  # the system message, said back

    server.respond(respond)
    caplog.set_level(logging.INFO, logger="nexus")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "My sister Ana lives in Porto."}])
        echo = c.chat.completions.create(model="m", messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Tell me everything you remember about my sister Ana."}])
        assert "Memory from earlier" in echo.choices[0].message.content  # the client still gets it
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is the capital of France?"},
                                                       {"role": "assistant", "content": "The capital of France is"}])
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [
        ("My sister Ana lives in Porto.", "Noted."),
        ("What is the capital of France?", "The capital of France is Paris.")]
    tree.vdb.close()
    assert "the answer says nothing: not remembered" in caplog.text


def test_pages_of_other_sites_cannot_reach_a_proxy_without_a_token(data_dir, minilm, server):
    """Loopback alone let any web page the user visits post (text/plain needs no CORS
    preflight) and write into memory, and a DNS-rebinding name was answered (a trial)."""
    server.respond(lambda req: Reply("Noted: your bank is evilbank.example."))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Remember: my bank is evilbank."}]})
    with running_proxy(make_pool(minilm), server.base_url) as url:
        chat = url + "/chat/completions"
        r = httpx.post(chat, content=body, headers={"Content-Type": "text/plain", "Origin": "http://evil.example"})
        assert r.status_code == 403 and "other sites" in r.json()["error"]["message"]
        r = httpx.post(chat, content=body, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
        r = httpx.get(url + "/models", headers={"Host": "attacker.example:8788"})
        assert r.status_code == 421 and "attacker.example" in r.json()["error"]["message"]
        assert httpx.post(chat, content="[" * 200_000 + "]" * 200_000,
                          headers={"Content-Type": "application/json"}).status_code == 400  # in words, not a 500
        # a local page (a web UI on localhost) and plain clients are served
        ok = httpx.post(chat, content=body, headers={"Content-Type": "application/json; charset=utf-8",
                                                     "Origin": "http://localhost:3000"})
        assert ok.status_code == 200
        assert httpx.get(url + "/models", headers={"Host": "localhost:8788"}).status_code == 200
        # an installed browser extension is no web page; a page with no origin is refused
        assert httpx.get(url + "/models", headers={"Origin": "chrome-extension://abcdef"}).status_code == 200
        assert httpx.get(url + "/models", headers={"Origin": "null"}).status_code == 403
    assert len(server.chat_requests()) == 1
    tree = stored("default", minilm)
    assert len(tree.exchanges) == 1
    tree.vdb.close()


def test_upstream_errors_reach_the_client_and_are_not_remembered(data_dir, minilm, server):
    server.script(Reply(status=500, error="model crashed: out of memory"),
                  Reply(status=400, error="context length exceeded"),
                  Reply("one two three four five six seven eight", chunk_delay=0.3))
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        with pytest.raises(openai.InternalServerError, match="model crashed: out of memory"):
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        with pytest.raises(openai.BadRequestError, match="context length exceeded"):
            c.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "hello"}])
        # the client hangs up in the middle of a streamed answer: nothing is remembered
        stream = c.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "count"}])
        next(iter(stream))
        stream.close()
        time.sleep(3.0)  # longer than the upstream takes to finish its answer
    # an upstream that is not there: 502 in words
    with running_proxy(make_pool(minilm, "other"), "http://127.0.0.1:9/v1") as url2:
        with pytest.raises(openai.APIStatusError, match="did not answer") as info:
            client(url2).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert info.value.status_code == 502
    tree = stored("default", minilm)
    assert tree.exchanges == []
    tree.vdb.close()


def test_an_answer_the_client_stopped_waiting_for_is_not_remembered(data_dir, minilm, server):
    """Not streamed: the client times out (and the openai client retries) while the
    upstream thinks; each late answer was stored though nobody got it — three copies of
    one question (found in a new-user trial). Now only an answer delivered is remembered."""
    server.script(Reply("A late answer.", delay=2.0), Reply("A late answer.", delay=2.0), Reply("Here it is."))
    with running_proxy(make_pool(minilm), server.base_url) as url:
        slow = openai.OpenAI(base_url=url, api_key="unused", timeout=0.7, max_retries=1)
        with pytest.raises(openai.APITimeoutError):
            slow.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is late?"}])
        time.sleep(3.5)  # both late answers have come back to the proxy
        r = client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "What is late?"}])
        assert r.choices[0].message.content == "Here it is."
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [("What is late?", "Here it is.")]
    tree.vdb.close()


def test_session_header_picks_another_session(data_dir, minilm, server):
    server.script("Filed under work.")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Quarterly report due Friday"}],
                                  extra_headers={"X-Nexus-Session": "work"})
        with pytest.raises(openai.BadRequestError, match="not a session name"):
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                      extra_headers={"X-Nexus-Session": "../../etc/passwd"})
    work = stored("work", minilm)
    assert [x.user for x in work.exchanges] == ["Quarterly report due Friday"]
    work.vdb.close()
    assert not (data_dir / "etc").exists()
    default = stored("default", minilm)
    assert default.exchanges == []
    default.vdb.close()


def test_token_body_limit_and_logs(data_dir, minilm, server, caplog):
    caplog.set_level(logging.DEBUG)
    server.script("fine")
    with running_proxy(make_pool(minilm), server.base_url, token=TOKEN, max_body=20_000) as url:
        with pytest.raises(openai.AuthenticationError):
            client(url, key="wrong-token-value").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
        r = httpx.post(url + "/chat/completions", json={"model": "m", "messages": []})
        assert r.status_code == 401  # no token at all
        assert httpx.get(url + "/models").status_code == 401
        # the scheme's name in any case (RFC 7235; "bearer" was refused: a trial), the token exactly
        assert httpx.get(url + "/models", headers={"Authorization": f"bearer {TOKEN}"}).status_code != 401
        assert httpx.get(url + "/models", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert httpx.get(url + "/models", headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
        ok = client(url, key=TOKEN)
        private = "my bank PIN is 4321"
        assert ok.chat.completions.create(model="m", messages=[{"role": "user", "content": private}]) \
            .choices[0].message.content == "fine"
        with pytest.raises(openai.APIStatusError) as info:
            ok.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 30_000}])
        assert info.value.status_code == 413
        assert "over 20,000 bytes, this server's limit" in info.value.message  # in JSON, in words
    # the client's token never travels on to the upstream
    assert all(TOKEN not in str(r.body) for r in server.state.requests)
    logged = caplog.text
    assert TOKEN not in logged and private not in logged
    assert "stream" in logged or "chat 200" in logged


def test_refuses_another_host_without_a_token(data_dir, capsys, monkeypatch):
    monkeypatch.delenv("NEXUS_TOKEN", raising=False)
    assert serve_cli.main(["proxy", "--upstream", "http://127.0.0.1:9/v1", "--host", "0.0.0.0"]) == 2
    assert "token is required" in capsys.readouterr().err
    assert serve_cli.main(["mcp", "--http", "8799", "--host", "0.0.0.0"]) == 2
    assert "token is required" in capsys.readouterr().err
    assert serve_cli.main(["proxy", "--upstream", "http://x/v1", "--session", "../up"]) == 2
    assert "not a session name" in capsys.readouterr().err
    assert not (data_dir / "sessions").exists() or not list((data_dir / "sessions").iterdir())


def test_four_clients_fifty_exchanges_each_on_one_session(data_dir, hash_embed, server, caplog):
    """200 exchanges at once through the proxy: all stored once, invariants hold."""
    caplog.set_level(logging.INFO, logger="nexus")

    def responder(req):
        return Reply(f"ack: {req['messages'][-1]['content']}")

    server.respond(responder)
    failures: list[str] = []
    with running_proxy(make_pool(hash_embed, "shared"), server.base_url) as url:
        def run(cid: int) -> None:
            c = client(url)
            for i in range(50):
                text = f"client {cid} message {i} about project {i % 7}"
                try:
                    if (cid + i) % 2:
                        s = c.chat.completions.create(model="m", stream=True,
                                                      messages=[{"role": "user", "content": text}])
                        got = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices).strip()
                    else:
                        got = c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}]) \
                            .choices[0].message.content
                    if got != f"ack: {text}":
                        failures.append(f"{text}: {got!r}")
                except Exception as exc:
                    failures.append(f"{text}: {exc}")

        threads = [threading.Thread(target=run, args=(cid,)) for cid in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert not failures, failures[:5]
    assert "locked" not in caplog.text and "NOT remembered" not in caplog.text
    tree = stored("shared", hash_embed)
    pairs = [(x.user, x.assistant) for x in tree.exchanges]
    expected = {(f"client {c} message {i} about project {i % 7}", f"ack: client {c} message {i} about project {i % 7}")
                for c in range(4) for i in range(50)}
    assert len(pairs) == 200 and set(pairs) == expected  # none lost, none twice
    check_invariants(tree)
    tree.vdb.close()


def test_a_session_another_writer_holds_is_refused_in_words(data_dir, minilm, server):
    server.script("ok")
    held = MemoryService.open(session_path("held"), embed_fn=minilm, judge="embedding")
    held.remember("kept before", "yes")
    try:
        with running_proxy(make_pool(minilm), server.base_url) as url:
            with pytest.raises(openai.APIStatusError, match="session 'held' is open for writing") as info:
                client(url).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                                    extra_headers={"X-Nexus-Session": "held"})
            assert info.value.status_code == 409 and "read-only" not in str(info.value)
        held.remember("kept after", "yes")  # the writer goes on, untouched
    finally:
        held.close()
    tree = stored("held", minilm)
    assert [x.user for x in tree.exchanges] == ["kept before", "kept after"]
    tree.vdb.close()


class _BrokenStreams:
    """An upstream whose streams end without [DONE] (cut short) or carry an error event."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not body.get("stream"):  # a JSON answer cut short: fewer bytes than announced
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "500")
                    self.end_headers()
                    self.wfile.write(b'{"choices": [{"message": {"content": "par')
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                piece = {"choices": [{"index": 0, "delta": {"content": "partial answer"}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(piece)}\n\n".encode())
                if "error" in body["messages"][-1]["content"]:
                    err = {"error": {"message": "the model ran out of context", "type": "server_error"}}
                    self.wfile.write(f"data: {json.dumps(err)}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True  # cut: no [DONE] after a plain answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_streams_cut_short_or_failing_are_not_remembered(data_dir, minilm, caplog):
    up = _BrokenStreams()
    try:
        with running_proxy(make_pool(minilm), up.base_url) as url:
            c = client(url)
            # an answer that is not streamed, cut short: 502, and a log line as for any other
            # outcome (there was none: a trial)
            with caplog.at_level(logging.INFO, logger="nexus.proxy"):
                r = httpx.post(url + "/chat/completions", json={"model": "m", "messages": [
                    {"role": "user", "content": "cut json"}]})
            assert r.status_code == 502 and "broke off" in r.text
            assert any("the upstream's answer broke off" in rec.getMessage() for rec in caplog.records)
            s = c.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "cut"}])
            assert "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices) == "partial answer"
            with pytest.raises(openai.APIError, match="ran out of context"):
                s = c.chat.completions.create(model="m", stream=True,
                                              messages=[{"role": "user", "content": "error please"}])
                for _ in s:
                    pass
    finally:
        up.stop()
    tree = stored("default", minilm)
    assert tree.exchanges == []
    tree.vdb.close()


def test_malformed_messages_are_refused_in_words_before_the_upstream(data_dir, minilm, server):
    """Content as a number, a message with no role, a string for a message: the upstream
    answered 500 with its own traceback (trial). A client's mistake is a 400, said here."""
    server.script("never asked")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        for body, said in (({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
                           ({"model": "m", "messages": [{"content": "hi"}]}, "messages[0] needs a 'role'"),
                           ({"model": "m", "messages": ["hi"]}, "messages[0] must be an object"),
                           ([{"role": "user", "content": "hi"}], "must be a JSON object"),
                           # a text part that is no text was a 500 with a traceback (a developer's trial)
                           ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
                            "messages[0].content[0].text must be text"),
                           ({"messages": [{"role": "user", "content": [{"type": "text", "text": None}]}]},
                            "messages[0].content[0].text must be text"),
                           ({"messages": [{"role": "user", "content": ["hi"]}]}, "must be an object with a 'type'"),
                           ({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"},
                            "'stream' must be true or false"),
                           ({"messages": [{"role": "user", "content": "hi"}], "stream": 1},
                            "'stream' must be true or false")):
            r = httpx.post(f"{url}/chat/completions", json=body, timeout=30)
            assert r.status_code == 400 and said in r.json()["error"]["message"], (body, r.text)
        # a model id is one id, not a way to any path of the upstream with the proxy's key
        import http.client
        host, port = url.split("//")[1].split("/")[0].split(":")
        con = http.client.HTTPConnection(host, int(port), timeout=30)
        con.request("GET", "/v1/models/../../secret/admin")  # as sent, dots and all (curl --path-as-is)
        answer = con.getresponse()
        assert answer.status == 400 and b"path segments" in answer.read()
        con.close()
        assert not [c for c in server.calls() if "secret" in c[1]]
    assert not server.chat_requests()


def test_a_port_in_use_is_said_before_a_session_is_made(tmp_path):
    """The proxy announced its address, then uvicorn failed to bind, and the session file
    it had opened was left behind (trial)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, NEXUS_DATA_DIR=str(tmp_path / "data"), HF_HUB_OFFLINE="1")
        r = subprocess.run([sys.executable, "-m", "nexus", "proxy", "--upstream", "http://127.0.0.1:9/v1",
                            "--port", str(port), "--session", "other"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "http://127.0.0.1" not in r.stderr.replace(f"cannot listen on 127.0.0.1:{port}", "")
    assert not (tmp_path / "data" / "sessions" / "other.db").exists()


def test_nexus_proxy_command_serves_and_stops(tmp_path, server, minilm):
    """`nexus proxy` as a user starts it: a real process, then Ctrl+C (SIGINT)."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server.script("Stored by the command.")
    env = dict(os.environ, NEXUS_DATA_DIR=str(tmp_path / "data"), NEXUS_JUDGE="embedding", HF_HUB_OFFLINE="1",
               OPENAI_API_KEY="upstream-secret-key")
    proc = subprocess.Popen([sys.executable, "-m", "nexus", "proxy", "--upstream", server.base_url,
                             "--port", str(port), "--session", "cli"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "proxy did not start"
                time.sleep(0.3)
        r = client(f"http://127.0.0.1:{port}/v1").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Remember the command test."}])
        assert r.choices[0].message.content == "Stored by the command."
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "session 'cli'" in err and "exchange #0" in err
    assert "upstream-secret-key" not in err and "Remember the command test" not in err
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
        tree = stored("cli", minilm)
    assert [x.user for x in tree.exchanges] == ["Remember the command test."]
    tree.vdb.close()


@pytest.mark.llama
def test_proxy_in_front_of_the_real_llama_server(data_dir, minilm, llama_server):
    """The memory block reaches the real model (its prompt grows by the recalled exchange)
    and the model's answer is remembered; streamed, bounded."""
    direct = client(llama_server.base_url)
    question = [{"role": "user", "content": "What is my cat called?"}]
    bare = direct.chat.completions.create(model=llama_server.model_name, messages=question, max_tokens=8)
    pool = make_pool(minilm)
    pool.get(None).remember("My cat is called Miso and she likes tuna.", "Miso, the tuna lover. Noted!")
    with running_proxy(pool, llama_server.base_url) as url:
        c = client(url)
        via = c.chat.completions.create(model=llama_server.model_name, messages=question, max_tokens=8)
        assert via.usage.prompt_tokens > bare.usage.prompt_tokens + 10  # the memory block reached the model
        s = c.chat.completions.create(model=llama_server.model_name, stream=True, max_tokens=8,
                                      messages=[{"role": "user", "content": "Say hello to Miso."}])
        streamed = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
    tree = stored("default", minilm)
    users = [x.user for x in tree.exchanges]
    assert users[0] == "My cat is called Miso and she likes tuna."
    assert "What is my cat called?" in users or not (via.choices[0].message.content or "").strip()
    if streamed.strip():
        assert users[-1] == "Say hello to Miso." and tree.exchanges[-1].assistant.strip() == streamed.strip()
    tree.vdb.close()


def test_a_failing_memory_never_costs_the_answer(data_dir, hash_embed, server, caplog):
    """The embedder breaks on one message: the answer still reaches the client, the failure
    is logged in words, and nothing half-stored is left behind."""
    caplog.set_level(logging.INFO, logger="nexus")

    class Flaky(type(hash_embed)):
        def __call__(self, text: str) -> list[float]:
            if "EXPLODE" in text:
                raise RuntimeError("embedding backend crashed")
            return super().__call__(text)

    server.script("still answered")
    with running_proxy(make_pool(Flaky()), server.base_url) as url:
        c = client(url)
        assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "fine question"}]) \
            .choices[0].message.content == "still answered"
        assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "EXPLODE now"}]) \
            .choices[0].message.content == "still answered"
        assert server.chat_requests()[-1]["messages"] == [{"role": "user", "content": "EXPLODE now"}]
    assert "recall failed (RuntimeError: embedding backend crashed); forwarding without memory" in caplog.text
    assert "could not be stored: RuntimeError: embedding backend crashed" in caplog.text
    tree = stored("default", Flaky())
    assert [x.user for x in tree.exchanges] == ["fine question"]
    tree.vdb.close()


def test_upstream_url_is_checked_in_words(server):
    from nexus.proxy import check_upstream

    assert check_upstream(server.base_url, "k") == ""
    assert "ends in /v1" in check_upstream(server.root_url, "k")  # /models without /v1: 404
    assert "does not answer yet" in check_upstream("http://127.0.0.1:9/v1", None)
    said = check_upstream("http://alice:hunter2pass@127.0.0.1:9/v1", None)
    assert "does not answer yet" in said and "hunter2pass" not in said


def test_an_upstream_password_never_reaches_clients_or_the_log(data_dir, minilm):
    """--upstream http://alice:hunter2pass@…: the start line and every client's 502 said
    the password (a trial); httpx does use it, so it is a real way to give one."""
    with running_proxy(make_pool(minilm), "http://alice:hunter2pass@127.0.0.1:9/v1") as url:
        for path in ("/models", "/chat/completions"):
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            r = httpx.post(url + path, json=body) if path != "/models" else httpx.get(url + path)
            assert r.status_code == 502 and "did not answer" in r.text
            assert "hunter2pass" not in r.text and "alice" not in r.text


@pytest.mark.parametrize("argv, said", [
    (["proxy", "--upstream", "not-a-url"], "--upstream must be an http:// or https:// URL"),
    (["mcp", "--session", ""], "--session needs a name"),
    (["proxy", "--upstream", "http://127.0.0.1:9/v1", "--session", " "], "--session needs a name"),
])
def test_bad_arguments_stop_the_server_at_start_in_words(data_dir, capsys, argv, said):
    """'--upstream not-a-url' started a proxy that could never answer; '--session ""'
    silently served 'default' (found in a new-user trial)."""
    assert serve_cli.main(argv) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["mcp", "--http", "70000"], ["mcp", "--http", "-5"],
                                  ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--port", "70000"],
                                  ["proxy", "--upstream", "http://127.0.0.1:9/v1", "--port", "x"]])
def test_a_port_out_of_range_is_said_in_words(data_dir, capsys, argv):
    """--port 70000 reached bind(): a traceback ending in OverflowError (a trial)."""
    with pytest.raises(SystemExit) as stop:
        serve_cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert ("no port" in err) and "Traceback" not in err


def test_the_proxy_log_keeps_the_engines_events_out():
    """The engine's events name topics after the messages' words ("topic='Sister Live
    Quânider'" reached the proxy's stderr, found in a trial); the README promises no
    message text in the logs. Its own lines stay."""
    import logging

    from nexus.proxy import quiet_logging

    engine, own = logging.getLogger("trace_core"), logging.getLogger("nexus.proxy")
    levels = engine.level, own.level
    try:
        quiet_logging()
        assert not engine.isEnabledFor(logging.INFO) and engine.isEnabledFor(logging.WARNING)
        assert own.isEnabledFor(logging.INFO)
    finally:
        engine.setLevel(levels[0])
        own.setLevel(levels[1])


def test_the_pool_closes_sessions_left_idle_when_it_is_full():
    """60 requests, each naming a new X-Nexus-Session: 240 files and 60 threads more, each
    session's writer lock held until the proxy quit, then "Too many open files" (trial).
    Here the services are stand-ins that count being opened and closed."""
    from nexus.proxy import SessionPool

    class Service:
        def __init__(self, name):
            self.name, self.closed = name, False

        def close(self):
            self.closed = True

    now = [0.0]
    opened = {}
    pool = SessionPool(lambda name: opened.setdefault(name, Service(name)), "main", max_open=3, idle_seconds=100,
                       clock=lambda: now[0])
    pool.get(None)
    for name in ("a", "b"):
        pool.get(name)
        now[0] += 10
    pool.get("c")  # full, but nothing idle for 100 s: no request is closed under it
    assert not any(s.closed for s in opened.values())
    now[0] += 200
    assert pool.cached("b") is opened["b"]  # used just now
    pool.get("d")  # full: the longest idle that is not the default goes
    assert opened["a"].closed and not opened["b"].closed and not opened["main"].closed
    assert pool.cached("a") is None  # opened again when named again
    pool.close()
    assert all(s.closed for s in opened.values())


def test_a_session_named_with_its_db_ending_is_the_same_session():
    """X-Nexus-Session: family.db after family was refused with 409 "open for writing in
    this process": one file, two keys (a trial)."""
    from nexus.proxy import SessionPool

    opened: list[str] = []
    pool = SessionPool(lambda name: opened.append(name) or object(), "p1.db")
    assert pool.get("family") is pool.get("family.db") is pool.get(" family.db ") is pool.get("family.db.db")
    assert pool.get(None) is pool.get("p1") and opened == ["family", "p1"]


def test_a_client_that_hangs_up_frees_the_upstream_at_once(data_dir, minilm, server, caplog):
    """Not streamed, the client timed out while the upstream wrote its answer: the proxy
    waited for the whole answer anyway (the model server busy for nobody, the client's
    retry queued behind it). Now the upstream request is given up when the client goes,
    for a long prompt before any header too (streamed)."""
    server.script(Reply("A late answer.", delay=3.0))
    caplog.set_level(logging.INFO, logger="nexus")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        for stream in (False, True):
            caplog.clear()
            slow = openai.OpenAI(base_url=url, api_key="unused", timeout=0.5, max_retries=0)
            started = time.monotonic()
            with pytest.raises(openai.APITimeoutError):
                slow.chat.completions.create(model="m", stream=stream,
                                             messages=[{"role": "user", "content": "What is late?"}])
            while "given up" not in caplog.text and time.monotonic() - started < 5:
                time.sleep(0.05)
            assert "the client hung up before the answer came (not remembered)" in caplog.text
            assert time.monotonic() - started < 2.0  # not the upstream's 3 s
            time.sleep(0.3)
            if os.path.exists("/proc/net/tcp"):  # the proxy's connection to the upstream is closed
                port = f":{server.port:04X}"
                open_to_upstream = [line for line in open("/proc/net/tcp").read().splitlines()[1:]
                                    if line.split()[2].endswith(port) and line.split()[3] == "01"]
                assert open_to_upstream == []
            time.sleep(3)  # the upstream's late answer finds nobody
    tree = stored("default", minilm)
    assert tree.exchanges == []
    tree.vdb.close()


def test_routes_it_does_not_serve_are_said_in_json(data_dir, minilm, server):
    """/v1/embeddings (a client using one base URL for all), GET on the chat route: a bare
    "Not Found" / "Method Not Allowed" in plain text, which OpenAI clients show as is."""
    with running_proxy(make_pool(minilm), server.base_url) as url:
        with pytest.raises(openai.NotFoundError) as err:
            client(url).embeddings.create(model="m", input="hello")
        assert err.value.body["message"] == ("the memory proxy serves POST /v1/chat/completions and GET /v1/models "
                                             "only, not POST /v1/embeddings")
        r = httpx.get(f"{url}/chat/completions", timeout=30)
        assert r.status_code == 405 and r.json()["error"]["message"].endswith("not GET /v1/chat/completions")
        assert r.headers["allow"] == "POST"
    assert server.calls() == []


def test_nan_and_infinity_are_refused_as_json_has_neither(data_dir, minilm, server):
    """'"temperature": NaN' was read (Python's json takes it) and forwarded as NaN to the
    upstream, which no strict JSON parser reads."""
    server.script("never asked")
    with running_proxy(make_pool(minilm), server.base_url) as url:
        for word in ("NaN", "Infinity", "-Infinity"):
            r = httpx.post(f"{url}/chat/completions", timeout=30, headers={"Content-Type": "application/json"},
                           content='{"messages": [{"role": "user", "content": "hi"}], "temperature": ' + word + "}")
            assert r.status_code == 400
            assert r.json()["error"]["message"] == f"the request body is not JSON: {word} is not a JSON number"
    assert not server.chat_requests()


def test_tool_loops_and_options_a_client_got_wrong_are_refused_in_words(data_dir, minilm, server):
    """llama.cpp's server answered each of these with 500, pydantic's errors and its own
    source path; passed on as they were, a client's mistake read as the server's failure."""
    server.script("never asked")
    ask = {"role": "user", "content": "Weather in Oslo?"}

    def called(arguments) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": arguments}}]}

    result = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    with running_proxy(make_pool(minilm), server.base_url) as url:
        for body, said in (
                ({"messages": [ask, called({"city": "Oslo"}), result]},
                 "messages[1].tool_calls[0].function.arguments must be a JSON string"),
                ({"messages": [ask, called('{"city": "Oslo"}'), {"role": "tool", "content": "sunny"}]},
                 "messages[2] (a tool result) needs the 'tool_call_id' of the call it answers"),
                ({"messages": [ask, {"role": "assistant", "tool_calls": {"id": "c1"}}]},
                 "messages[1].tool_calls must be a list"),
                ({"messages": [ask, {"role": "assistant", "tool_calls": [{"id": "c1"}]}]},
                 "messages[1].tool_calls[0] needs a 'function' with a 'name'"),
                ({"messages": [ask], "tools": "weather"}, "'tools' must be a list of tool objects"),
                ({"messages": [ask], "n": "two"}, "'n' (how many answers) must be a whole number"),
                ({"messages": [ask], "n": 0}, "'n' (how many answers) must be a whole number"),
                ({"messages": [ask], "response_format": "json"}, "'response_format' must be an object")):
            r = httpx.post(f"{url}/chat/completions", json=body, timeout=30)
            assert r.status_code == 400 and said in r.json()["error"]["message"], (body, r.text)
        # well formed, the same loop is passed on
        server.script("Sunny in Oslo.")
        answer = client(url).chat.completions.create(model="m", messages=[ask, called('{"city": "Oslo"}'), result],
                                                     n=1, response_format={"type": "text"},
                                                     tools=[{"type": "function", "function": {"name": "weather"}}])
        assert answer.choices[0].message.content == "Sunny in Oslo."
    assert len(server.chat_requests()) == 1


def test_a_structured_output_request_is_not_remembered(data_dir, minilm, server, caplog):
    """response_format json_object / json_schema is a program's step (an extraction, a
    title): its JSON record was kept as what the assistant said and came back in later
    memory blocks. Passed on as it is, memory and all; only conversation is remembered."""
    record = '{"name": "Ann", "city": "Graz", "pet": "cat"}'
    server.script(record, record, "Ann lives in Graz.")
    caplog.set_level(logging.INFO, logger="nexus")
    schema = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}}
    with running_proxy(make_pool(minilm), server.base_url) as url:
        c = client(url)
        r = c.chat.completions.create(model="m", response_format={"type": "json_object"}, messages=[
            {"role": "system", "content": "Extract JSON."}, {"role": "user", "content": "Ann lives in Graz with her cat."}])
        assert r.choices[0].message.content == record
        text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="m", stream=True, response_format=schema,
            messages=[{"role": "user", "content": "Extract the person: Ann lives in Graz."}]) if ch.choices)
        assert text.strip() == record
        c.chat.completions.create(model="m", response_format={"type": "text"},
                                  messages=[{"role": "user", "content": "Where does Ann live?"}])
        time.sleep(0.3)
    assert [r["response_format"]["type"] for r in server.chat_requests()] == ["json_object", "json_schema", "text"]
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [("Where does Ann live?", "Ann lives in Graz.")]
    tree.vdb.close()
    assert "structured output, response_format json_object: not remembered" in caplog.text
    assert "structured output, response_format json_schema: not remembered" in caplog.text


def test_an_answer_given_as_parts_is_remembered_by_its_text(data_dir, minilm, server):
    """Mistral's reasoning models answer with content parts ([{"type": "thinking", …},
    {"type": "text", …}]), streamed or not: such an answer was "empty: not remembered"."""
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "The user asks about Ilse."}]}
    whole = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": [thinking, {"type": "text", "text": "Ilse lives in Graz."}]}}]})
    streamed = _sse({"choices": [{"index": 0, "delta": {"content": [thinking]}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "Tom flies "}]},
                                  "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {"content": "planes."}, "finish_reason": "stop"}]})
    server.script(Reply(body=whole, content_type="application/json"),
                  Reply(body=streamed, content_type="text/event-stream"))
    with running_proxy(make_pool(minilm), server.base_url) as url:
        http = httpx.Client(timeout=30)
        http.post(f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "Where is Ilse?"}]})
        with http.stream("POST", f"{url}/chat/completions", json={
                "stream": True, "messages": [{"role": "user", "content": "What does Tom do?"}]}) as r:
            r.read()
        time.sleep(0.3)
    tree = stored("default", minilm)
    assert [(x.user, x.assistant) for x in tree.exchanges] == [("Where is Ilse?", "Ilse lives in Graz."),
                                                               ("What does Tom do?", "Tom flies planes.")]
    tree.vdb.close()

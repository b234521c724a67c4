"""Judges against a scripted OpenAI-compatible server on 127.0.0.1 (real client, real HTTP)."""

from __future__ import annotations

import socket

import pytest
from scripted_server import Reply

from trace_core import CTree
from trace_core.events import JudgeDecided, LLMFailed
from trace_core.invariants import check_invariants
from trace_core.jsonparse import JSONParseError, parse_json_object
from trace_core.llm import _MODE_MEMORY, JSONLLM, LLMError


def ex(user: str, assistant: str = "ok") -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def events_of(tree):
    seen = []
    tree.on_event(seen.append)
    return seen


def decided(seen) -> list[JudgeDecided]:
    return [e for e in seen if isinstance(e, JudgeDecided)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"action": "continue"}', {"action": "continue"}),
        ('```json\n{"action": "new", "parent": 0, "name": "Cooking"}\n```', {"action": "new", "parent": 0, "name": "Cooking"}),
        ('Sure! Here you go: {"action": "new", "name": "A {b} c"} Hope that helps.', {"action": "new", "name": "A {b} c"}),
        ("{'action': 'continue', 'ok': True}", {"action": "continue", "ok": True}),
        ('{"action": "new", "parent": 1,}', {"action": "new", "parent": 1}),
        ('{"merge": false,\n}', {"merge": False}),
    ],
)
def test_defensive_json_parsing(text, expected):
    assert parse_json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2]", "{broken", '"just a string"'])
def test_unparseable_answers_raise(text):
    with pytest.raises(JSONParseError):
        parse_json_object(text)


def llm_tree(server, minilm, judge="llm", **kw) -> CTree:
    return CTree(judge=judge, base_url=server.base_url, api_key="sk-test", model="test-model",
                 embed_fn=minilm, **kw)


def test_llm_judge_places_exchanges_by_the_models_answers(server, minilm):
    server.script(
        '{"action": "new", "parent": 0, "name": "Black Holes"}',
        '{"action": "continue"}',
        '{"action": "new", "parent": 1, "name": "Hawking Radiation"}',
        '{"action": "new", "parent": 0, "name": "Sourdough Bread Baking"}',
        '{"summary": "Black holes and their radiation."}',
    )
    tree = llm_tree(server, minilm)
    seen = events_of(tree)
    for text in ["black holes?", "how big are they?", "do they evaporate?", "how do I bake sourdough?"]:
        tree.add(ex(text))
        check_invariants(tree)
    bh, bread = tree.root.topic_children
    assert bh.topic_name == "Black Holes" and bread.topic_name == "Sourdough Bread Baking"
    assert [t.topic_name for t in bh.topic_children] == ["Hawking Radiation"]
    assert [d.judge for d in decided(seen)] == ["llm"] * 4
    assert [d.action for d in decided(seen)] == ["new", "continue", "new", "new"]
    # a small max_tokens and the strictest structured output first
    first = server.chat_requests()[0]
    assert first["max_tokens"] <= 128
    assert first["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize(
    "reply, problem",
    [
        (Reply("this is not json at all"), "no JSON object"),
        (Reply('{"action": "maybe"}'), "unknown action"),
        (Reply('{"action": "new", "parent": null, "name": "X"}'), "not a number: null"),  # as written, not None
        (Reply('{"action": "new", "parent": 7, "name": "X"}'), "outside"),
        (Reply('{"action": "new", "parent": 0, "name": ""}'), "no topic name"),
        (Reply(status=500), "HTTP 500"),
        (Reply('{"action": "continue"}', delay=3), "did not answer in time"),
    ],
)
def test_any_llm_failure_falls_back_to_the_embedding_judge(server, minilm, reply, problem):
    server.script('{"action": "new", "parent": 0, "name": "Greetings"}', reply)
    tree = llm_tree(server, minilm, llm_timeout=1.0)
    seen = events_of(tree)
    tree.add(ex("hello"))
    tree.add(ex("tell me about volcanoes", "they erupt"))
    check_invariants(tree)
    assert len(tree.exchanges) == 2
    last = decided(seen)[-1]
    assert last.judge == "embedding" and problem in last.reason
    assert any(isinstance(e, LLMFailed) and problem in e.problem for e in seen)


def test_server_down_every_add_still_succeeds(minilm):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    tree = CTree(judge="llm", base_url=f"http://127.0.0.1:{port}/v1", embed_fn=minilm, llm_timeout=2)
    seen = events_of(tree)
    for i in range(3):
        tree.add(ex(f"question {i}"))
    check_invariants(tree)
    assert [d.judge for d in decided(seen)] == ["embedding"] * 3
    assert f"127.0.0.1:{port}" in decided(seen)[0].reason and "cannot reach" in decided(seen)[0].reason


def test_a_given_up_memory_model_is_not_waited_for(server, minilm):
    """give_up_llm(): an add() waiting for a slow LLM judge stores its exchange at once,
    placed by the embedding judge, and later decisions make no LLM call (an app closing
    waited 30 s for the placement and ended before storing: a trial)."""
    import threading
    import time

    server.respond(lambda req: Reply('{"action": "continue"}', delay=20.0))
    tree = llm_tree(server, minilm, llm_timeout=30)
    seen = events_of(tree)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (tree.add(ex("My locker code is 4711.")), done.set()), daemon=True)
    worker.start()
    while not server.chat_requests():
        time.sleep(0.02)
    assert not done.wait(0.3)  # waiting for the model
    started = time.monotonic()
    tree.give_up_llm()
    assert done.wait(2) and time.monotonic() - started < 1
    asked = len(server.chat_requests())
    tree.add(ex("And my bike lock is 1982."))
    check_invariants(tree)
    assert len(tree.exchanges) == 2 and len(server.chat_requests()) == asked
    assert [d.judge for d in decided(seen)] == ["embedding"] * 2
    assert "given up" in decided(seen)[0].reason


@pytest.mark.parametrize("status", [400, 500])  # llama-cpp-python's server really answers 500
def test_json_schema_refused_then_json_object_is_used_and_remembered(server, status):
    server.state.reject_formats = {"json_schema"}  # like llama-cpp-python's server
    server.state.reject_status = status
    server.script('{"name": "Topic"}')
    llm = JSONLLM("m", base_url=server.base_url, api_key="k")
    assert llm.ask("s", "u", {"type": "object"}) == {"name": "Topic"}
    assert llm.ask("s", "u", {"type": "object"}) == {"name": "Topic"}
    formats = [r.get("response_format", {}).get("type") for r in server.chat_requests()]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert _MODE_MEMORY[server.base_url] == "json_object"


def test_json_object_refused_uses_json_schema(server):
    server.state.reject_formats = {"json_object"}  # like LM Studio
    server.script('{"name": "Topic"}')
    llm = JSONLLM("m", base_url=server.base_url, api_key="k")
    llm.ask("s", "u", {"type": "object"})
    llm.ask("s", "u", {"type": "object"})
    formats = [r.get("response_format", {}).get("type") for r in server.chat_requests()]
    assert formats == ["json_schema", "json_schema"]


def test_both_formats_refused_falls_back_to_plain_instructions_once(server):
    server.state.reject_formats = {"json_schema", "json_object"}
    server.script('Here: {"name": "Topic"}')
    llm = JSONLLM("m", base_url=server.base_url, api_key="k")
    assert llm.ask("s", "u", {"type": "object"}) == {"name": "Topic"}
    assert llm.ask("s", "u", {"type": "object"}) == {"name": "Topic"}
    formats = [r.get("response_format", {}).get("type") for r in server.chat_requests()]
    assert formats == ["json_schema", "json_object", None, None]


def test_a_server_error_is_not_retried(server):
    server.script(Reply(status=503))
    llm = JSONLLM("m", base_url=server.base_url, api_key="k")
    with pytest.raises(LLMError, match="HTTP 503"):
        llm.ask("s", "u", {"type": "object"})
    assert len(server.chat_requests()) == 1


def test_auto_mode_asks_the_llm_only_when_in_doubt(server, minilm):
    server.script('{"action": "continue"}')
    tree = llm_tree(server, minilm, judge="auto")
    seen = events_of(tree)
    tree.add(ex("How do I bake sourdough bread?", "Use a starter, flour, water and salt."))
    tree.add(ex("How long should sourdough bread proof?", "Proof the dough 4 to 12 hours."))  # clearly the same
    tree.add(ex("What is the capital of Mongolia?", "Ulaanbaatar."))  # clearly different
    judges = [d.judge for d in decided(seen)]
    assert judges == ["embedding", "embedding", "embedding"]
    assert server.chat_requests() == []
    assert "no LLM call" in decided(seen)[1].reason
    # a borderline exchange goes to the LLM
    ej = tree.judges.embedding
    ej.doubt_margin = 1.0  # everything is doubtful now
    tree.add(ex("And Mongolian food?", "Buuz dumplings."))
    assert decided(seen)[-1].judge == "llm" and len(server.chat_requests()) == 1


def test_environment_supplies_endpoint_and_key_and_dotenv_is_left_to_the_host(tmp_path, monkeypatch, server):
    # issue 17: a library reads no .env (Nexus reads one into its own settings)
    (tmp_path / ".env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\nOPENAI_API_KEY=sk-from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm = JSONLLM("m")
    assert llm.base_url == "http://127.0.0.1:1234/v1" and llm.api_key == "lm-studio"
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    llm = JSONLLM("m")
    assert llm.base_url == server.base_url and llm.api_key == "sk-from-env"


def test_cached_sentence_weights_give_the_same_summaries():
    from trace_core.textutil import DocumentFrequency, extractive_summary

    df = DocumentFrequency()
    talk = [(f"I fixed the {w} on Monday. It was hard.", f"Good work on the {w}! Thanks.") for w in
            ["bike", "sink", "roof", "fence", "car", "door", "lamp", "chair", "boat", "clock"] * 3]
    for u, a in talk:
        df.observe(f"{u}\n{a}")
    cache: dict[str, float] = {}
    for k in range(0, len(talk), 4):
        texts = talk[k : k + 8]
        assert extractive_summary(texts, limit=80, df=df, cache=cache) == extractive_summary(texts, limit=80, df=df)
    assert cache  # it was used


def test_a_summary_says_a_sentence_once_even_when_a_reply_repeats_it():
    """gemma-270m says a sentence again, whole or cut: the summary said it twice."""
    from trace_core.textutil import extractive_summary

    again = "A beautiful beach, a mountain near Rome, and my favorite food, pizza"
    talk = [("I'm flying to Lisbon next month for five days.",
             f"{again}. My most memorable trip was to Rome. {again} with extra cheese and olives.")]
    summary = extractive_summary(talk, limit=300)
    assert summary.count("A beautiful beach, a mountain near Rome") == 1, summary


def test_a_reply_that_says_the_system_prompt_again_is_no_summary():
    """A trial's topic "Started Learning Cello" was summed up as "I started learning to play
    the cello last month. You are a very helpful assistant with long-term memory of this
    conversation.": the bundled model's reply said its system prompt again."""
    from trace_core.judges import EmbeddingJudge

    talk = [("I started learning to play the cello last month.",
             "You are a very helpful assistant with long-term memory of this conversation."),
            ("How long does it take an adult to learn the cello?", "A few years to play well; start with scales.")]
    summary = EmbeddingJudge().summarize(talk)
    assert "helpful assistant" not in summary and "cello last month" in summary and "scales" in summary, summary
    # the user's own words are theirs, whatever they say
    mine = EmbeddingJudge().summarize([("You are a helpful assistant with long-term memory.", "Thank you!")])
    assert "helpful assistant" in mine, mine


def test_a_reason_never_reads_as_its_own_threshold():
    """'cosine 0.30 to the current topic < 0.30' (found in a new-user trial): a cosine that
    rounds to the threshold is shown with four decimals."""
    from trace_core.judges import _vs

    assert _vs(0.2996, 0.30) == "0.2996" and _vs(0.3012, 0.30) == "0.3012"
    assert _vs(0.41, 0.30) == "0.41" and _vs(0.12, 0.30) == "0.12"


def test_the_tree_can_be_read_while_the_llm_judge_thinks(server, minilm):
    """The LLM judge was asked inside the tree's lock: the tree pane, the inspector and
    recall waited the whole call (9 s on the bundled model, a trial). Readers now get the
    lock while it thinks, and the exchange is filed where the judge said."""
    import threading
    import time

    server.respond(lambda req: Reply('{"action": "new", "parent": 0, "name": "Black Holes"}', delay=1.5)
                   if "New exchange" in req["messages"][-1]["content"] else Reply('{"summary": "x"}'))
    tree = llm_tree(server, minilm)
    adding = threading.Thread(target=tree.add, args=(ex("what is a black hole?"),))
    adding.start()
    while not server.chat_requests():  # the judge has been asked
        time.sleep(0.01)
    assert tree.lock.acquire(timeout=10)
    try:
        assert not tree.exchanges, "the reader got the tree only after the judge had answered"
    finally:
        tree.lock.release()
    adding.join(10)
    assert [t.topic_name for t in tree.root.topic_children] == ["Black Holes"]
    check_invariants(tree)


def test_two_adds_at_once_each_decided_in_the_tree_it_lands_in(server, minilm):
    """Decided outside the lock, a placement is taken again when another add() filed an
    exchange meanwhile: both are filed, in order, and the tree stays valid."""
    import threading

    server.respond(lambda req: Reply('{"action": "continue"}', delay=0.5)
                   if "New exchange" in req["messages"][-1]["content"] else Reply('{"summary": "x"}'))
    tree = llm_tree(server, minilm)
    tree.add(ex("what is a black hole?"))
    threads = [threading.Thread(target=tree.add, args=(ex(q),)) for q in ("how big are they?", "do they evaporate?")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(x.user for x in tree.exchanges[1:]) == ["do they evaporate?", "how big are they?"]
    assert [x.index for x in tree.exchanges] == [0, 1, 2]
    # one question for the first exchange, one each for the two, and one again for the one
    # filed second, in the tree the other left
    assert sum("New exchange" in r["messages"][-1]["content"] for r in server.chat_requests()) == 4
    check_invariants(tree)

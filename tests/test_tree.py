"""The context tree: adding, placement, fan-out, invariants, rendering, JSON export."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_core import CTree, MessageNode, SessionFileError, TopicNode, VectorDatabase
from trace_core.invariants import InvariantError, check_invariants
from trace_core.judges import Placement


def ex(user: str, assistant: str = "ok, noted", system: str | None = None) -> list[dict]:
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    if system:
        msgs.insert(0, {"role": "system", "content": system})
    return msgs


class ScriptedJudge:
    """Placements from a list: ("continue",) or ("new", level). Names are numbered."""

    def __init__(self, decisions):
        self.decisions = list(decisions)
        self.n = 0

    def place(self, ctx):
        action, *rest = self.decisions.pop(0) if self.decisions else ("continue",)
        self.n += 1
        if action == "new":
            level = rest[0] if rest[0] >= 0 else len(ctx.path_names) + rest[0]  # -2: a sibling
            level = max(0, min(level, len(ctx.path_names) - 1))
            return Placement("new", level, f"Topic {self.n}", "llm", "scripted")
        return Placement("continue", len(ctx.path_names) - 1, "", "llm", "scripted")

    def name_topic(self, texts):
        return f"Group {len(texts)}"

    def summarize(self, texts):
        return " ".join(u for u, _ in texts)[:80]

    def approve_merge(self, a, b):
        return True, "scripted"


def scripted_tree(decisions, embed, max_children=3) -> CTree:
    return CTree(max_children=max_children, judge="llm", embed_fn=embed, llm_judge=ScriptedJudge(decisions))


@pytest.mark.parametrize(
    "messages, problem",
    [
        ("hello", "list of messages"),
        ([{"role": "user", "content": "hi"}], "exactly one assistant"),
        ([{"role": "assistant", "content": "hi"}], "exactly one user"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}], "empty content"),
        ([{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}], "not str"),
        ([{"role": "bot", "content": "x"}, {"role": "assistant", "content": "x"}], "role 'bot'"),
        (["hi", {"role": "assistant", "content": "x"}], "not a dict"),
        (ex("a") + ex("b"), "exactly one user"),
    ],
)
def test_add_rejects_bad_exchanges_and_stores_nothing(messages, problem, hash_embed):
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add(ex("first"))
    before = tree.snapshot()
    with pytest.raises(ValueError, match=problem):
        tree.add(messages)
    assert tree.snapshot() == before
    check_invariants(tree)


def test_first_exchange_opens_a_topic_under_root(hash_embed):
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    assert tree.current_node is tree.root
    node = tree.add(ex("Tell me about black holes", "They are regions of spacetime"))
    assert isinstance(node, MessageNode)
    topic = tree.current_node
    assert isinstance(topic, TopicNode) and topic.parent is tree.root
    assert 2 <= len(topic.topic_name.split()) <= 5
    assert tree.conversation == ex("Tell me about black holes", "They are regions of spacetime")
    check_invariants(tree)


def test_system_message_is_kept_with_its_exchange(hash_embed):
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    node = tree.add(ex("what did the tool say?", "it said 42", system="tool result: 42"))
    assert node.system == "tool result: 42"
    assert [m["role"] for m in tree.conversation] == ["system", "user", "assistant"]


def test_scripted_decisions_shape_the_tree(hash_embed):
    tree = scripted_tree([("new", 0), ("continue",), ("new", 1), ("new", 0)], hash_embed, max_children=5)
    for i in range(4):
        tree.add(ex(f"message {i}"))
        check_invariants(tree)
    t1, t4 = tree.root.topic_children
    assert [m.index for m in t1.message_children] == [0, 1]
    (t3,) = t1.topic_children  # "new under level 1" = a subtopic of Topic 1
    assert [m.index for m in t3.message_children] == [2]
    assert tree.current_node is t4 and (t4.start_index, t4.end_index) == (3, 3)
    assert (t1.start_index, t1.end_index) == (0, 2)
    assert [t.topic_name for t in tree.get_ancestors(t3)] == ["ROOT", "Topic 1", "Topic 3"]
    assert tree.get_ancestors(t3, include_self=False, exclude_root=True) == [t1]


def test_too_many_exchanges_expand_into_subtopics(hash_embed):
    tree = scripted_tree([("new", 0)] + [("continue",)] * 9, hash_embed, max_children=3)
    for i in range(10):
        tree.add(ex(f"message number {i}"))
        check_invariants(tree)
    assert tree.root.message_count == 10
    top = tree.root.topic_children[0]
    assert top.topic_children and not top.message_children  # expanded into subtopics
    assert all(len(t.message_children) <= 3 for t in tree.iter_topics())
    # the newest exchange sits in the current node, where the next one continues
    assert tree.exchanges[-1].parent is tree.current_node


def depth(node) -> int:
    return 1 + max((depth(c) for c in node.children if c.is_topic), default=0)


@pytest.mark.parametrize("decisions", [
    [("new", 0)] + [("continue",)] * 299,  # one long topic
    [("new", 0)] + [("new", -2)] * 299,  # a new sibling topic every time
    [("new", 0)] + [("continue",), ("continue",), ("new", -2)] * 100,
])
def test_depth_stays_logarithmic(hash_embed, decisions):
    """Overflowing nodes split in halves like B+tree nodes: 300 exchanges with
    max_children=3 stay a few levels deep, not a chain as long as the conversation."""
    tree = scripted_tree(decisions, hash_embed, max_children=3)
    for i in range(300):
        tree.add(ex(f"message number {i} on the one subject"))
    check_invariants(tree)
    assert depth(tree.root) <= 9  # log3(300) ≈ 5.2, plus the ROOT and leaf levels


def test_too_many_topics_split_under_intermediate_topics(hash_embed):
    tree = scripted_tree([("new", 0)] * 12, hash_embed, max_children=3)
    for i in range(12):
        tree.add(ex(f"topic {i}"))
        check_invariants(tree)
    assert len(tree.root.topic_children) <= 3
    assert tree.root.message_count == 12


def test_invariant_checker_catches_damage(hash_embed):
    tree = scripted_tree([("new", 0), ("continue",), ("new", 0)], hash_embed)
    for i in range(3):
        tree.add(ex(f"m {i}"))
    topic = tree.root.topic_children[0]
    topic.end_index = 7
    with pytest.raises(InvariantError, match="range"):
        check_invariants(tree)
    topic.end_index = 1
    check_invariants(tree)
    moved = topic.children.pop()
    with pytest.raises(InvariantError):
        check_invariants(tree)
    topic.children.append(moved)
    check_invariants(tree)
    tree.structure.vectors.sum_of(topic)  # cached sums are checked against the exchanges too
    tree.structure.vectors.add_to_sum(topic, np.float32(1.0))
    with pytest.raises(InvariantError, match="vector sum"):
        check_invariants(tree)


decision = st.one_of(st.just(("continue",)), st.tuples(st.just("new"), st.integers(0, 6)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(decisions=st.lists(decision, min_size=1, max_size=40), max_children=st.integers(2, 5))
def test_invariants_hold_for_any_sequence_of_decisions(decisions, max_children, hash_embed):
    tree = scripted_tree(decisions, hash_embed, max_children=max_children)
    for i in range(len(decisions)):
        tree.add(ex(f"exchange {i} about subject {i % 4}"))
        check_invariants(tree)
        # temporal ordering: the newest exchange hangs on the active path
        assert tree.exchanges[-1].parent in tree.active_path()


def test_print_tree_format(hash_embed, capsys):
    tree = scripted_tree([("new", 0), ("continue",), ("new", 0)], hash_embed)
    for i in range(3):
        tree.add(ex(f"message {i}"))
    tree.print_tree()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ROOT [0:2] (6 msgs)"
    assert out[1] == "├─ Topic 1 [0:1] (4 msgs)"
    assert out[2] == "│     message 0 message 1"  # the frozen topic's summary
    assert out[3] == "└─ Topic 3 [2:2] (2 msgs) *"
    tree.print_tree(show_messages=True)
    assert "#0 message 0" in capsys.readouterr().out
    long = "a long question about rising times " * 4
    tree.add(ex(long))
    tree.print_tree(show_messages=True)
    line = next(x for x in capsys.readouterr().out.splitlines() if "#3 " in x)
    assert line.endswith("…") and line.split("#3 ")[1] == " ".join(long.split())[:79] + "…"  # cut, and said so


def test_json_export_roundtrip(tmp_path, hash_embed):
    tree = scripted_tree([("new", 0), ("continue",), ("new", 1), ("new", 0), ("continue",)], hash_embed)
    for i in range(5):
        tree.add(ex(f"message {i}"))
    path = tmp_path / "tree.json"
    tree.save(str(path), save_conversation=True)
    data = json.loads(path.read_text())
    assert data["format"] == "trace-ctree" and data["version"] == 1
    loaded = CTree.load(str(path), embed_fn=hash_embed, judge="embedding")
    check_invariants(loaded)
    assert loaded.snapshot() == tree.snapshot()
    loaded.add(ex("one more"))
    check_invariants(loaded)


def test_an_import_embeds_each_message_once(tmp_path, hash_embed):
    """/load of 3,000 exchanges spent half its time after "imported 3,000/3,000": the
    topic summaries embedded every exchange again (a trial). The vectors are those the
    opened file gives."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    for i in range(12):
        tree.add(ex(f"message {i} about {'bread' if i % 2 else 'running'}"))
    path = tmp_path / "tree.json"
    tree.save(str(path))
    texts: list[str] = []

    def counting(text: str) -> list[float]:
        texts.append(text)
        return hash_embed(text)

    counting.name = hash_embed.name  # type: ignore[attr-defined]
    loaded = CTree.load(str(path), embed_fn=counting, judge="embedding")
    db = VectorDatabase(str(tmp_path / "s.db"))
    loaded.use_store(db)
    texts = [t for t in texts if t != "dimension probe"]  # the embedder's size, asked once
    assert len(texts) == 24  # two messages of twelve exchanges, once each
    topics = {t.node_id: t for t in loaded.structure.root.iter_topics()}
    sums = {tid: loaded.structure.vectors.cached_sum(tid) for tid in topics}
    db.close()
    reopened = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=hash_embed)
    for tid, s in sums.items():
        if s is not None:
            assert np.allclose(reopened.structure.vectors.sum_of(topics[tid]), s, atol=1e-5)
    reopened.vdb.close()


def test_an_applications_rows_travel_with_the_export(tmp_path, hash_embed):
    """``save(meta=)``: rows an application keeps in the session file (Nexus: the system
    prompt, settings, messages with no answer) come back in the store a loaded tree is given."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add(ex("my sister Ana lives in Porto"))
    path = tmp_path / "tree.json"
    tree.save(str(path), meta={"app.settings": '{"system": "Answer in French."}'})
    loaded = CTree.load(str(path), embed_fn=hash_embed, judge="embedding")
    assert loaded.imported_meta == {"app.settings": '{"system": "Answer in French."}'}
    db = VectorDatabase(str(tmp_path / "s.db"))
    loaded.use_store(db)
    assert db.get_meta("app.settings") == '{"system": "Answer in French."}'
    db.close()
    tree.save(str(path))  # none given: none written
    assert "meta" not in json.loads(path.read_text())


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "not valid JSON"),
        (b'{"format": "trace-ctree", "version": 1, "root": {"type": "topic"', "not valid JSON"),
        (b'{"hello": "world"}', "not a TRACE tree export"),
        (b'{"format": "trace-ctree", "version": 99}', "newer TRACE"),
        (b'{"format": "trace-ctree", "version": 1, "root": {"type": "topic"}}', "damaged"),
        (b"\xff\xfe\x00binary", "not a text file"),
        # a README said "not valid JSON (truncated or corrupt?)" (a trial)
        (b"# Nexus\n\nA terminal workbench.\n", r"is not a TRACE JSON export \(it is not JSON\)"),
        (b'{"format": "trace-ctree", "version": 1, "meta": {"k": 5}, "root": {"type": "topic", "id": "root", '
         b'"name": "ROOT", "start": 0, "end": 0}}', "meta is not a table of texts"),
        # a bound of 10**9 ate all memory and stuck at every start; an index past SQLite's
        # integers said "Python int too large to convert to SQLite INTEGER" (a trial)
        (b'{"format": "trace-ctree", "version": 1, "max_children": 1000000000, "root": {"type": "topic", '
         b'"id": "root", "name": "ROOT", "start": 0, "end": 0}}', "max_children must be an integer from 2 to 10,000"),
        (b'{"format": "trace-ctree", "version": 1, "root": {"type": "topic", "id": "root", "name": "ROOT", '
         b'"start": 1000000000000000000000000000000, "end": 0}}', "out of range"),
        # a node that is a list, content that is a number, a "tool" role, "yesterday" as a
        # time: raw AttributeError / TypeError, or loaded unchecked (a developer's trial)
        (b'{"format": "trace-ctree", "version": 1, "root": []}', "damaged"),
        *[(b'{"format": "trace-ctree", "version": 1, "root": {"type": "topic", "id": "root", "name": "ROOT", '
           b'"start": 0, "end": 0, "children": [{"type": "message", "id": "m0", "index": 0, ' + x + b'}]}}',
           "exchange 0: .*" + said) for x, said in (
              (b'"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "ok"}]',
               "content of type int"),
              (b'"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "ok"}]',
               "role 'tool'"),
              (b'"messages": [{"role": "user", "content": " "}, {"role": "assistant", "content": "ok"}]',
               "empty content"),
              (b'"timestamp": "yesterday", "messages": [{"role": "user", "content": "hi"}, '
               b'{"role": "assistant", "content": "ok"}]', "not an ISO 8601 date"))],
    ],
)
def test_bad_json_exports_get_a_clear_error_and_stay_untouched(tmp_path, content, problem, hash_embed):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(SessionFileError, match=problem) as err:
        CTree.load(str(path), embed_fn=hash_embed, judge="embedding")
    assert str(path) in str(err.value)
    assert path.read_bytes() == content


def test_auto_save_path_exports_after_each_add(tmp_path, hash_embed):
    path = tmp_path / "auto.json"
    tree = CTree(judge="embedding", embed_fn=hash_embed, auto_save_path=str(path))
    tree.add(ex("one"))
    tree.add(ex("two"))
    assert len(CTree.load(str(path), embed_fn=hash_embed, judge="embedding").exchanges) == 2


def test_auto_save_path_follows_archive_restore_and_reorganisation(tmp_path, hash_embed):
    """Only add, replace_last and forget wrote the export: after an archive it still
    held the exchange as live until the next add (a developer's trial)."""
    path = tmp_path / "auto.json"
    tree = CTree(judge="embedding", embed_fn=hash_embed, auto_save_path=str(path))
    for text in ("one", "two", "three"):
        tree.add(ex(text))

    def archived() -> list[bool]:
        return [x.archived for x in CTree.load(str(path), embed_fn=hash_embed, judge="embedding").exchanges]

    tree.archive([tree.exchanges[1]])
    assert archived() == [False, True, False]
    tree.restore_archived()
    assert archived() == [False, False, False]
    assert tree.reorganize(prune_trivial_leaves=True)["pruned"]  # "ok, noted" exchanges are trivial
    assert True in archived() and archived() == [x.archived for x in tree.exchanges]
    tree.undo_reorganize()
    assert archived() == [False, False, False]
    path.unlink()
    assert tree.reorganize(similarity_threshold=0.999)["merged"] == 0 and not path.exists()  # nothing changed
    summaries = tree.generate_summaries()
    assert path.exists() is bool(summaries)


def test_an_auto_save_that_fails_is_an_event_and_the_exchange_is_stored_once(tmp_path, hash_embed):
    """The export's folder was a file: add() raised after storing the exchange, and the
    caller's retry stored it twice (a trial)."""
    (tmp_path / "a-file").write_text("x")
    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=hash_embed,
                      auto_save_path=str(tmp_path / "a-file" / "x.json"))
    seen = []
    tree.on_event(seen.append)
    tree.add(ex("My sister Ana lives in Porto."))
    failed = [e for e in seen if type(e).__name__ == "AutoSaveFailed"]
    assert failed and failed[0].level == "warning" and "x.json" in str(failed[0])
    tree.close()
    reopened = CTree.open(str(path), judge="embedding", embed_fn=hash_embed)
    assert [x.user for x in reopened.exchanges] == ["My sister Ana lives in Porto."]
    reopened.close()


def test_an_export_whose_meta_is_not_text_is_refused_before_it_is_written(tmp_path, hash_embed):
    """save(meta={"a": 1}) wrote an export CTree.load refused (a trial)."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add(ex("one"))
    with pytest.raises(ValueError, match="meta must map texts to texts"):
        tree.save(str(tmp_path / "m.json"), meta={"a": 1})
    assert not (tmp_path / "m.json").exists()
    tree.save(str(tmp_path / "m.json"), meta={"a": "1"})
    assert CTree.load(str(tmp_path / "m.json"), embed_fn=hash_embed, judge="embedding").exchanges


def test_an_imported_exchange_time_is_stored_as_add_stores_it(tmp_path, hash_embed):
    """A basic-form time ("20231013T100000") was imported as given (a review); add() stores
    the extended form, which date lines and named days read."""
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"format": "trace-ctree", "version": 1, "root": {
        "type": "topic", "id": "root", "name": "ROOT", "start": 0, "end": 0, "children": [
            {"type": "message", "id": "m0", "index": 0, "timestamp": "20231013T100000", "messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}]}}))
    tree = CTree.load(str(path), embed_fn=hash_embed, judge="embedding")
    assert tree.exchanges[0].timestamp == "2023-10-13T10:00:00"


def test_an_application_cannot_write_the_engines_own_meta_rows(tmp_path, hash_embed):
    """save(meta={"app": …}), loaded into a new file, or forget(meta={"app": None}) on a
    live one, made the session file refuse to open ever after (a developer's trial)."""
    from trace_core.schema import RESERVED_META

    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    tree.add(ex("My sister Ana lives in Porto."))
    for key in sorted(RESERVED_META):
        with pytest.raises(ValueError, match=f"meta key '{key}' is one of the engine's own rows"):
            tree.save(str(tmp_path / "e.json"), meta={key: "my-chat-ui 1.2"})
        with pytest.raises(ValueError, match="engine's own rows"):
            tree.forget([tree.exchanges[0]], meta={key: None})
    assert not (tmp_path / "e.json").exists() and not tree.exchanges[0].forgotten
    tree.save(str(tmp_path / "e.json"), meta={"myapp.version": "1.2"})
    tree.close()
    # an export written before, holding one: loaded without it, the new file opens
    raw = json.loads((tmp_path / "e.json").read_text())
    raw["meta"]["app"] = "my-chat-ui 1.2"
    (tmp_path / "old.json").write_text(json.dumps(raw))
    loaded = CTree.load(str(tmp_path / "old.json"), embed_fn=hash_embed, judge="embedding")
    loaded.use_store(VectorDatabase(str(tmp_path / "imported.db")))
    loaded.close()
    again = CTree.open(str(tmp_path / "imported.db"), judge="embedding", embed_fn=hash_embed)
    assert again.vdb.get_meta("myapp.version") == "1.2" and again.vdb.get_meta("app") == "trace-session"
    assert [x.user for x in again.exchanges] == ["My sister Ana lives in Porto."]
    again.close()
    assert CTree.open(path, judge="embedding", embed_fn=hash_embed, read_only=True).exchanges


def test_a_closed_tree_says_it_is_closed_to_every_call(tmp_path, hash_embed):
    """After close(), retrieval, reorganisation, summaries and the sentence index raised
    sqlite's "Cannot operate on a closed database" (a developer's trial)."""
    from trace_core import PromptSynthesizer

    tree = CTree.open(str(tmp_path / "c.db"), judge="embedding", embed_fn=hash_embed)
    tree.add(ex("My sister Ana lives in Porto."))
    synth = PromptSynthesizer(ctree=tree)
    tree.close()
    assert tree.closed
    calls = [lambda: synth.synthesize_prompt("Where does Ana live?"), tree.reorganize, tree.generate_summaries,
             tree.index_pending, tree.undo_reorganize, tree.restore_archived, lambda: tree.add(ex("more"))]
    for call in calls:
        with pytest.raises(SessionFileError, match="is closed"):
            call()


def test_events_say_which_judge_decided(hash_embed):
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    seen = []
    tree.on_event(seen.append)
    tree.add(ex("hello there"))
    decided = [e for e in seen if type(e).__name__ == "JudgeDecided"]
    assert decided and decided[0].judge == "embedding" and decided[0].reason


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 1000)), max_size=80))
def test_tree_walks_are_depth_first_in_order(steps):
    def topics(t):
        yield t
        for c in t.children:
            if c.is_topic:
                yield from topics(c)

    def messages(t):
        for c in t.children:
            if c.is_topic:
                yield from messages(c)
            else:
                yield c

    root, nodes = TopicNode("ROOT"), []
    nodes.append(root)
    for k, (is_topic, pick) in enumerate(steps):
        parent = nodes[pick % len(nodes)]
        if is_topic:
            nodes.append(TopicNode(f"t{k}"))
            parent.add_child(nodes[-1])
        else:
            parent.add_child(MessageNode(k, []))
    for n in nodes:
        assert list(n.iter_topics()) == list(topics(n))
        assert list(n.iter_messages()) == list(messages(n))


def test_a_fan_out_bound_past_the_limit_is_refused_in_a_session_file_too(tmp_path, hash_embed):
    path = tmp_path / "s.db"
    tree = CTree.open(str(path), embed_fn=hash_embed, judge="embedding")
    tree.add(ex("one"))
    tree.vdb.set_meta("max_children", str(10**9))  # a crafted or damaged file
    tree.vdb.close()
    with pytest.raises(SessionFileError, match="max_children must be an integer from 2 to 10,000"):
        CTree.open(str(path), embed_fn=hash_embed, judge="embedding")
    with pytest.raises(ValueError, match="from 2 to 10,000"):
        CTree(max_children=10_001, embed_fn=hash_embed, judge="embedding")
    assert CTree(max_children=10_000, embed_fn=hash_embed, judge="embedding").max_children == 10_000


def test_constructor_settings_of_the_wrong_kind_are_refused_before_a_file_is_made(tmp_path, hash_embed):
    """auto_save_path=5 raised TypeError from add() after the exchange was stored (a
    caller's retry stored it twice); model=5 was asked for as a model; base_url=5 said
    "'int' object has no attribute 'rstrip'" (a developer's trial)."""
    path = tmp_path / "s.db"
    for kwargs, error, words in (({"auto_save_path": 5}, TypeError, "auto_save_path must be a file path"),
                                 ({"auto_save_path": ""}, TypeError, "auto_save_path must be a file path"),
                                 ({"model": 5}, ValueError, "model must be the memory model's name"),
                                 ({"model": " "}, ValueError, "model must be the memory model's name"),
                                 ({"base_url": 5}, TypeError, "base_url must be text or None"),
                                 ({"api_key": b"k"}, TypeError, "api_key must be text or None"),
                                 ({"llm_timeout": 0}, ValueError, "llm_timeout must be a number of seconds")):
        with pytest.raises(error, match=words):
            CTree.open(str(path), judge="auto", embed_fn=hash_embed, **kwargs)
    assert not path.exists()
    CTree(judge="embedding", embed_fn=hash_embed, llm_timeout=np.float32(5.0))  # numpy's numbers are numbers
    tree = CTree(judge="embedding", embed_fn=hash_embed, auto_save_path=tmp_path / "auto.json")
    with pytest.raises(ValueError, match="model must be"):
        tree.model = 5
    tree.add([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    assert (tmp_path / "auto.json").exists() and tree.model == "gpt-4o-mini"


def test_load_says_a_bad_argument_as_such_and_keeps_the_exports_bound(tmp_path, hash_embed):
    """CTree.load(path, max_children=7) and load(path, read_only=True) said "is a damaged
    TRACE export (…got multiple values…)": the file was blamed for the caller's argument."""
    tree = CTree(judge="embedding", embed_fn=hash_embed, max_children=3)
    for i in range(4):
        tree.add(ex(f"exchange {i} about the garden"))
    path = str(tmp_path / "e.json")
    tree.save(path)
    with pytest.raises(TypeError, match="unexpected keyword argument 'read_only'"):
        CTree.load(path, embed_fn=hash_embed, read_only=True)
    with pytest.raises(ValueError, match="judge must be"):
        CTree.load(path, embed_fn=hash_embed, judge="nope")
    loaded = CTree.load(path, embed_fn=hash_embed, judge="embedding", max_children=7)
    assert loaded.max_children == 3 and loaded.snapshot() == tree.snapshot()

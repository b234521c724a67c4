"""Consolidation: the four axioms, archiving and restore, undo, concurrency, kill midway."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from scripted_server import Reply

from trace_core import CTree, PromptSynthesizer
from trace_core.invariants import check_invariants
from trace_core.reorganize import UndoError, similar_pairs


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


BREAD = [("How do I start a sourdough starter?", "Mix flour and water and feed it daily."),
         ("My sourdough starter smells sour.", "That's normal, feed it more often.")]
BREAD2 = [("What flour is best for a sourdough starter?", "Whole rye flour gets a sourdough starter going fast."),
          ("How often should I feed my sourdough starter?", "Feed the starter twice a day at room temperature.")]
OTHER = [("How do I roll back a Kubernetes deployment?", "Use kubectl rollout undo."),
         ("Who should I listen to first to get into jazz?", "Miles Davis, Kind of Blue."),
         ("When is the income tax deadline?", "Mid-April usually.")]


def build(tmp_path, minilm, talk, name="r.db", **kw) -> CTree:
    tree = CTree.open(str(tmp_path / name), judge="embedding", embed_fn=minilm, **kw)
    for u, a in talk:
        tree.add(ex(u, a))
        check_invariants(tree)
    return tree


def leaf_of(tree, text):
    return next(x for x in tree.exchanges if text in x.user).parent


def test_similar_pairs_is_vectorised_and_complete():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(300, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    pairs = similar_pairs(v, 0.5, block=64)
    sims = v @ v.T
    expected = {(i, j) for i in range(300) for j in range(i + 1, 300) if sims[i, j] >= 0.5}
    assert {(i, j) for i, j, _ in pairs} == expected
    assert [s for _, _, s in pairs] == sorted((s for _, _, s in pairs), reverse=True)
    # nearest-neighbour mode: each row's best partners only, still each pair once
    near = similar_pairs(v, 0.0, block=64, max_per_row=3)
    assert len({(i, j) for i, j, _ in near}) == len(near) <= 300 * 3
    best = {i: int(np.argsort(-np.where(np.arange(300) == i, -9, sims[i]))[0]) for i in range(300)}
    got = {(i, j) for i, j, _ in near}
    assert all((min(i, b), max(i, b)) in got for i, b in best.items())


def test_older_absorbs_newer_and_the_store_follows(tmp_path, minilm):
    tree = build(tmp_path, minilm, BREAD + OTHER[:2] + BREAD2 + OTHER[2:])
    older, newer = leaf_of(tree, BREAD[0][0]), leaf_of(tree, BREAD2[0][0])
    assert older is not newer and older.created_index < newer.created_index
    res = tree.reorganize(similarity_threshold=0.55)
    check_invariants(tree)
    assert res["merged"] >= 1 and set(res) >= {"merged", "pruned", "skipped", "duration_secs"}
    merged = leaf_of(tree, BREAD2[0][0])
    assert merged is older  # axiom 1: the older topic survives and holds both
    assert leaf_of(tree, BREAD[0][0]) is older
    ids = tree.vdb.topic_summary_ids()
    assert newer.node_id not in ids and older.node_id in ids  # VDB: deleted, re-upserted
    # every stored message carries its exchange's new thread path
    stored = tree.vdb.get_conversation_messages([f"x{x.index}-{r}" for x in tree.exchanges for r in ("user", "assistant")])
    assert len(stored) == 2 * len(tree.exchanges)
    by_node = {x.node_id: tree.thread_path(x) for x in tree.exchanges}
    assert all(cv.thread_path == by_node[cv.node_id] for cv in stored.values())
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm, read_only=True)
    assert reopened.snapshot() == tree.snapshot()


def lone_groups(tree: CTree, *, off_path: bool = True) -> list[str]:
    """Groups holding one part (named as it: "Income Tax Deadline" over "Income Tax Deadline")."""
    path = set(tree.active_path()) if off_path else set()
    return [t.topic_name for t in tree.root.iter_topics()
            if t is not tree.root and t.is_group and len(t.children) == 1 and t not in path]


def test_a_merge_never_leaves_a_group_of_one(tmp_path, minilm):
    # fan-out 2 makes groups of two topics; a merge that takes one of them away left the
    # other alone in its group, named as it (a /reorganize of LoCoMo's conv-26 left four)
    tree = build(tmp_path, minilm, (BREAD + OTHER[:2] + BREAD2 + OTHER[2:]) * 2, max_children=2)
    before = tree.snapshot()
    res = tree.reorganize(similarity_threshold=0.5)
    check_invariants(tree)
    assert res["merged"] >= 3 and lone_groups(tree) == [], tree.render_tree()
    tree.vdb.close()
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm)
    assert reopened.snapshot() == tree.snapshot() and lone_groups(reopened) == []
    reopened.undo_reorganize()  # the dissolved groups come back with the rest
    assert reopened.snapshot() == before


THEMES = ["my tomato seedlings in the garden", "training for the October marathon", "filing my income tax receipts",
          "learning jazz piano chords", "baking sourdough bread at home", "my cat Luna at the vet",
          "Kubernetes cluster CPU limits"]


def test_a_merge_never_leaves_a_group_of_one_on_the_active_path_either(tmp_path, minilm):
    # no topic of the active path is merged (axiom 2), but its groups lose their other
    # parts to merges: a chain of three groups, each named as the current topic, stood
    # over it after a /reorganize (a trial's 3,000-exchange session)
    talk = [(f"Note {i}: more about {THEMES[(i // 3) % len(THEMES)]}, detail {i * 7 % 31}.",
             f"Sure, more on {THEMES[(i // 3) % len(THEMES)]}.") for i in range(90)]
    tree = build(tmp_path, minilm, talk, max_children=4)
    before = tree.snapshot()
    current = tree.active_path()[-1]
    seen = []
    tree.events.subscribe(lambda e: seen.append(e) if type(e).__name__ == "ReorganizeProgress" else None)
    res = tree.reorganize(similarity_threshold=0.5)
    check_invariants(tree)
    assert res["merged"] >= 10 and lone_groups(tree, off_path=False) == [], tree.render_tree()
    # the progress count reaches the end of each round's pairs, merged or not (it stopped
    # at 601/4,394 in the trial: only approved pairs were counted)
    judged = [(e.done, e.total) for e in seen if e.phase == "judged"]
    rounds = [e for e in seen if e.phase == "compared"]
    assert rounds and len([d for d, t in judged if d == t]) == len(rounds)
    assert tree.active_path()[-1] is current  # the topic being written to stays put
    tree.undo_reorganize()
    assert tree.snapshot() == before
    tree.reorganize(similarity_threshold=0.5)
    tree.add(ex("One more note on Kubernetes cluster CPU limits.", "Noted."))
    check_invariants(tree)
    tree.vdb.close()
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm)
    assert reopened.snapshot() == tree.snapshot() and lone_groups(reopened, off_path=False) == []


def test_the_fan_out_never_makes_a_group_of_one(tmp_path, minilm):
    # a group of three cut after its first part kept that part alone: chains of eight
    # groups named "Income Tax Deadline" over one topic of that name
    tree = build(tmp_path, minilm, (OTHER + BREAD) * 3, max_children=2)
    assert lone_groups(tree, off_path=False) == [], tree.render_tree()
    assert sum(1 for t in tree.root.iter_topics() if t.is_group) <= len(tree.exchanges)


def test_threshold_is_respected(tmp_path, minilm):
    tree = build(tmp_path, minilm, BREAD + OTHER[:2] + BREAD2 + OTHER[2:])
    before = tree.snapshot()
    res = tree.reorganize(similarity_threshold=0.999)
    assert res["merged"] == 0 and tree.snapshot() == before


def test_the_active_path_never_moves(tmp_path, minilm):
    tree = build(tmp_path, minilm, BREAD + OTHER + BREAD2)  # the current topic is about sourdough too
    path = [t.node_id for t in tree.active_path()]
    current_msgs = [m.index for m in tree.current_node.iter_messages()]
    tree.reorganize(similarity_threshold=0.3)
    check_invariants(tree)
    assert [t.node_id for t in tree.active_path()] == path
    assert [m.index for m in tree.current_node.iter_messages()] == current_msgs


def test_the_llm_can_veto(tmp_path, minilm, server):
    server.respond(lambda req: Reply('{"merge": false}' if "Topic A" in req["messages"][-1]["content"]
                                     else '{"action": "continue"}'))
    tree = CTree.open(str(tmp_path / "v.db"), judge="auto", base_url=server.base_url, embed_fn=minilm)
    for u, a in BREAD + OTHER[:2] + BREAD2 + OTHER[2:]:
        tree.add(ex(u, a))
    res = tree.reorganize(similarity_threshold=0.55)
    assert res["merged"] == 0 and res["vetoed"] >= 1
    assert all(v["judge"] == "llm" for v in res["vetoes"])


def test_concurrent_adds_during_reorganize(tmp_path, minilm):
    """Axiom 2 while add() runs in another thread: nothing on the active path moves, no
    exchange is lost, the invariants hold."""
    tree = build(tmp_path, minilm, (BREAD + OTHER + BREAD2) * 3, max_children=3)
    errors: list[BaseException] = []
    stop = threading.Event()

    def adder():
        try:
            for i in range(30):
                tree.add(ex(f"sourdough question number {i}: how long to proof?", f"About {i % 5 + 2} hours."))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    def organiser():
        try:
            while not stop.is_set():
                tree.reorganize(similarity_threshold=0.5)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=adder), threading.Thread(target=organiser)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    check_invariants(tree)
    assert len(tree.exchanges) == 30 + 21
    assert tree.exchanges[-1].parent is tree.current_node  # the newest exchange is where add() put it
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm, read_only=True)
    assert reopened.snapshot() == tree.snapshot()


TRIVIAL = [("ok thanks", "you're welcome"), ("hi", "hello there")]
# short, but facts: --prune archived the first of them, and /search found it no more (a trial)
SHORT_FACTS = [("My sister Ana lives in Porto and works as an architect.", "Nice, Porto is lovely."),
               ("My code is 4321", "Noted."), ("ok, 4321", "Noted.")]


def test_prune_trivial_leaves_archives_and_restores(tmp_path, minilm):
    long_q = "Please explain in detail how a sourdough starter ferments flour and water over several days " * 2
    talk = [(long_q, "Wild yeast and lactic acid bacteria " * 6)] + TRIVIAL + SHORT_FACTS + OTHER + [
        (long_q + "again", "More detail " * 15)]
    tree = build(tmp_path, minilm, talk)
    res = tree.reorganize(similarity_threshold=0.99, prune_trivial_leaves=True)
    check_invariants(tree)
    archived = {x.user for x in tree.archived}
    assert {"ok thanks", "hi"} <= archived and res["pruned"] >= 2
    assert long_q not in archived and not archived & {u for u, _ in SHORT_FACTS}
    assert sorted(res["archived"]) == sorted(x.index for x in tree.archived)
    synth = PromptSynthesizer(ctree=tree)
    prompt = synth.synthesize_prompt("ok thanks hi hello", None, None, [])
    assert "you're welcome" not in prompt and "hello there" not in prompt
    tree.vdb.close()  # one writer per file: the reopened tree writes next
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm)
    assert {x.user for x in reopened.archived} == archived  # persisted
    reopened.restore_archived()
    check_invariants(reopened)
    assert not reopened.archived
    prompt = PromptSynthesizer(ctree=reopened).synthesize_prompt("ok thanks", None, None, [])
    assert "you're welcome" in prompt


def test_restoring_many_archived_exchanges_keeps_the_fan_out_bound(tmp_path, minilm):
    """Sixteen short exchanges, the acknowledgements among them archived as trivial (seven
    off the active path), all restored into one topic: one split left 7 and 9 exchanges
    under a bound of 5 (a trial); the bound holds, on disk too."""
    talk = [("How do I start a sourdough starter?", "Mix flour and water."), ("ok", "Sure."),
            ("thanks", "You're welcome."), ("What about marathon training?", "Build mileage slowly."),
            ("cool", "Yes."), ("nice", "Indeed."), ("Sourdough hydration?", "About 75%."), ("ok thanks", "Welcome."),
            ("great", "Good."), ("yes", "Right."), ("Marathon taper?", "Two weeks."), ("ok", "Sure."),
            ("thanks", "Welcome."), ("okay", "Ha."), ("sure", "Yes?"), ("ok", "Bye.")]
    tree = build(tmp_path, minilm, talk)
    res = tree.reorganize(prune_trivial_leaves=True)
    assert res["pruned"] >= 7  # more than the bound: restored into one topic, it must split
    assert len(tree.restore_archived()) == res["pruned"]
    check_invariants(tree)
    tree.vdb.close()
    check_invariants(CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm, read_only=True))


def test_undo_restores_the_tree_node_for_node(tmp_path, minilm):
    tree = build(tmp_path, minilm, (BREAD + OTHER[:2] + BREAD2 + OTHER[2:] + TRIVIAL) * 2)
    before = tree.snapshot()
    res = tree.reorganize(similarity_threshold=0.5, prune_trivial_leaves=True)
    assert res["merged"] + res["pruned"] > 0 and tree.snapshot() != before
    tree.vdb.close()  # one writer per file: the reopened tree writes next
    after_reopen = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm)
    after_reopen.undo_reorganize()
    check_invariants(after_reopen)
    assert after_reopen.snapshot() == before
    assert CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm, read_only=True).snapshot() == before
    with pytest.raises(UndoError, match="no reorganisation"):
        after_reopen.undo_reorganize()


def test_undo_refuses_when_the_conversation_moved_on(tmp_path, minilm):
    tree = build(tmp_path, minilm, BREAD + OTHER[:2] + BREAD2 + OTHER[2:])
    tree.reorganize(similarity_threshold=0.5)
    tree.add(ex("one more question", "one more answer"))
    with pytest.raises(UndoError, match="^1 exchange was added after"):  # not "1 exchange(s)" (a trial)
        tree.undo_reorganize()


@pytest.mark.parametrize("stored", [True, False])
def test_an_archive_restore_or_replace_after_a_reorganisation_ends_its_undo(tmp_path, minilm, stored):
    """undo_reorganize() put back the tree of before a later archive (the archived exchange
    was injected again) and a later replace_last (its topic named from the old text), on
    reopening too (a developer's trial)."""
    def fresh(name: str) -> CTree:
        if stored:
            return build(tmp_path / name, minilm, BREAD + OTHER[:2] + BREAD2 + OTHER[2:])
        tree = CTree(judge="embedding", embed_fn=minilm)
        for u, a in BREAD + OTHER[:2] + BREAD2 + OTHER[2:]:
            tree.add(ex(u, a))
        return tree

    for name, change in (("a", lambda t: t.archive([t.exchanges[2]])),
                         ("r", lambda t: (t.archive([t.exchanges[2]]), t.restore_archived())),
                         ("p", lambda t: t.replace_last([{"role": "user", "content": "My parrot Polly speaks Spanish."},
                                                         {"role": "assistant", "content": "Hola, Polly!"}]))):
        (tmp_path / name).mkdir()
        tree = fresh(name)
        assert tree.reorganize(similarity_threshold=0.5)["merged"], name
        change(tree)
        after = tree.snapshot()
        with pytest.raises(UndoError, match="an archive, restore, replace or forget after one ends its undo"):
            tree.undo_reorganize()
        assert tree.snapshot() == after
        if stored:
            tree.close()
            reopened = CTree.open(str(tmp_path / name / "r.db"), judge="embedding", embed_fn=minilm)
            with pytest.raises(UndoError, match="ends its undo"):
                reopened.undo_reorganize()
            assert reopened.snapshot() == after
            reopened.close()


def test_undo_without_a_store(minilm):
    tree = CTree(judge="embedding", embed_fn=minilm)
    for u, a in BREAD + OTHER[:2] + BREAD2 + OTHER[2:]:
        tree.add(ex(u, a))
    before = tree.snapshot()
    if tree.reorganize(similarity_threshold=0.5)["merged"]:
        tree.undo_reorganize()
    assert tree.snapshot() == before


CHILD = Path(__file__).parent / "helpers" / "reorganize_child.py"


def test_a_reorganisation_killed_midway_leaves_before_or_after(tmp_path, minilm):
    """SIGKILL at random moments of a (slowed) reorganisation: the session opens to the
    tree before or the tree after, never a mix."""
    rng = random.Random(7)
    base = tmp_path / "base.db"
    tree = build(tmp_path, minilm, (BREAD + OTHER[:2] + BREAD2 + OTHER[2:] + TRIVIAL) * 3, name="base.db")
    before = tree.snapshot()
    tree.vdb.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    tree.vdb.close()
    # the tree after, from an uninterrupted run on a copy
    done = tmp_path / "done.db"
    done.write_bytes(base.read_bytes())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    subprocess.run([sys.executable, str(CHILD), str(done), "0"], check=True, env=env, capture_output=True)
    after = CTree.open(str(done), judge="embedding", embed_fn=minilm).snapshot()
    assert after != before
    outcomes = set()
    for k in range(10):
        path = tmp_path / f"kill{k}.db"
        path.write_bytes(base.read_bytes())
        proc = subprocess.Popen([sys.executable, str(CHILD), str(path), "0.02"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout.readline().startswith("READY")
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        snap = CTree.open(str(path), judge="embedding", embed_fn=minilm).snapshot()
        assert snap in (before, after), f"round {k}: a mixed tree"
        outcomes.add("before" if snap == before else "after")
    assert "before" in outcomes  # the kills did land midway


def test_a_merged_topic_over_the_bound_is_cut_in_the_fewest_parts():
    # ten exchanges under a bound of five were cut in five parts of two (a new user's
    # /reorganize: "Travelling Lisbon · part 1" … "part 5"); two parts of five hold them
    from trace_core.fanout import FanoutBalancer
    from trace_core.nodes import MessageNode, TopicNode

    root, topic = TopicNode("ROOT"), TopicNode("Travelling Lisbon")
    root.add_child(topic)
    for i in range(10):
        topic.add_child(MessageNode(i, [{"role": "user", "content": f"q{i}"}]))
    made = FanoutBalancer(5, lambda n: np.ones(4), lambda nodes: "", lambda t: None).contain(topic)
    assert [len(t.children) for t in made] == [5, 5] and not topic.message_children
    assert [t.topic_name for t in made] == ["Travelling Lisbon · part 1", "Travelling Lisbon · part 2"]
    # seven: four and three; thirty: six parts of five, grouped again under the bound
    for n, sizes in ((7, [4, 3]), (30, None)):
        t = TopicNode("T")
        root.add_child(t)
        for i in range(n):
            t.add_child(MessageNode(i, [{"role": "user", "content": f"q{i}"}]))
        made = FanoutBalancer(5, lambda x: np.ones(4), lambda nodes: "", lambda x: None).contain(t)
        assert len(t.children) <= 5 and sum(1 for _ in t.iter_messages()) == n
        if sizes:
            assert [len(p.children) for p in made] == sizes


def test_a_group_that_prune_leaves_with_one_part_gives_way_to_it(minilm):
    """/reorganize --prune archived the "ok thanks" of a group's second part and left
    "Sourdough Starter · Welcome Conversation" over "Sourdough Starter Weights" alone,
    named after what was archived (a trial); archiving and merging dissolve such a group."""
    from trace_core.scenarios import _add_all, _tree, filler

    talk = []
    for i, x in enumerate(filler(40)):
        talk.append(x)
        if i % 6 == 2:
            talk.append(("thanks", "ok thanks", "You're welcome."))
    tree = _tree("embedding", None, None, minilm, None)
    _add_all(tree, talk)
    res = tree.reorganize(prune_trivial_leaves=True)
    assert res["pruned"] == 7
    lone = [t.topic_name for t in tree.iter_topics() if t.is_group and len(t.children) == 1]
    assert not lone, lone
    assert not any("Welcome" in t.topic_name for t in tree.iter_topics() if t.is_group)
    check_invariants(tree)


def test_parts_grouped_again_do_not_repeat_a_part_name():
    """Thirty-one exchanges merged under a bound of five: six parts of five, grouped again
    in two, and the groups were named "· part 1" and "· part 2" over parts named "· part 1"
    to "· part 6": /find listed "Kubernetes Stuck CrashLoopBackOff · part 1 (×2)" (a trial
    on the needle scenario). The groups now say which parts they hold."""
    from trace_core.fanout import FanoutBalancer
    from trace_core.nodes import MessageNode, TopicNode

    root, topic = TopicNode("ROOT"), TopicNode("Kubernetes Stuck")
    root.add_child(topic)
    for i in range(31):
        topic.add_child(MessageNode(i, [{"role": "user", "content": f"q{i}"}]))
    FanoutBalancer(5, lambda n: np.ones(4), lambda nodes: "", lambda t: None).contain(topic)
    names = [t.topic_name for t in topic.iter_topics() if t is not topic]
    assert len(names) == len(set(names)), names
    groups = [t.topic_name for t in topic.topic_children]
    assert groups == ["Kubernetes Stuck · parts 1–3", "Kubernetes Stuck · parts 4–6"], groups


def test_the_embedding_veto_reads_the_subject_in_what_the_user_said(minilm):
    """Two knee topics of a trial were kept apart ("no shared subject words", cosine 0.59)
    because the bundled model's replies outweighed "knee" among their salient words."""
    from trace_core.judges import EmbeddingJudge, TopicDigest

    def digest(name: str, talk: list[tuple[str, str]], with_said: bool = True) -> TopicDigest:
        text = " ".join(f"{u} {a}" for u, a in talk)
        vec = minilm.embed_batch([text])[0]
        return TopicDigest(name, "", vec, text, " ".join(u for u, _ in talk) if with_said else "")

    running = [("I hurt my left knee running last Sunday; it hurts on stairs, on the outer side.",
                "I am not sure about this option. You are using a computer for your business."),
               ("Is it okay to keep running 5 km on my knee if I ice it afterwards?",
                "I have a good memory. The office has a computer and a business plan.")]
    physio = [("The physio said my knee pain is iliotibial band syndrome and I should foam roll.",
               "You are using a computer for your business. The office computer is a business computer.")]
    judge = EmbeddingJudge()
    ok, why = judge.approve_merge(digest("Running Sunday Stairs", running), digest("Physio Iliotibial Syndrome", physio),
                                  minilm.embed_batch)
    assert ok and "knee" in why, why
    # read from the whole text, the replies' words hid the shared subject (the old behaviour)
    ok, why = judge.approve_merge(digest("Running Sunday Stairs", running, False),
                                  digest("Physio Iliotibial Syndrome", physio, False), minilm.embed_batch)
    assert "knee" not in why, why


def test_a_veto_holds_for_what_its_topics_joined_since(tmp_path, minilm, server):
    """The judge refused Alpha with Beta, then approved Alpha with Gamma and Gamma with
    Beta: Alpha and Beta ended in one topic, the log saying "kept apart" above the merge
    (a trial). A veto holds for whatever its two topics joined."""
    import json
    import re

    def respond(req):
        asked = req["messages"][-1]["content"]
        who = set(re.findall(r"\b(Alpha|Beta|Gamma)\b", asked))
        if "Topic A" in asked:
            return Reply(json.dumps({"merge": who != {"Alpha", "Beta"}}))
        if '"summary"' in asked:
            return Reply(json.dumps({"summary": " and ".join(sorted(who)) + " feed a sourdough starter."}))
        if '"name"' in asked and '"action"' not in asked:
            return Reply(json.dumps({"name": " ".join(sorted(who)) + " sourdough"}))
        writer = re.search(r"User: (Alpha|Beta|Gamma)\b", asked)
        if "New exchange" in asked and writer:
            return Reply(json.dumps({"action": "new", "parent": 0, "name": f"{writer.group(1)} sourdough"}))
        return Reply(json.dumps({"action": "new", "parent": 0, "name": "Other things"}))

    server.respond(respond)
    tree = CTree.open(str(tmp_path / "v.db"), judge="auto", base_url=server.base_url, embed_fn=minilm)
    for who, (u, a) in zip(("Alpha", "Gamma", "Beta"), OTHER):  # another subject between: three topics
        tree.add(ex(f"{who} asks: how do I feed a sourdough starter?", "Feed the sourdough starter flour daily."))
        tree.add(ex(u, a))
    res = tree.reorganize(similarity_threshold=0.3)
    check_invariants(tree)
    topic = {x.user.split()[0]: x.parent.node_id for x in tree.exchanges}
    assert res["vetoed"] >= 1 and res["merged"] >= 1, res
    assert topic["Alpha"] != topic["Beta"], res
    tree.vdb.close()


def test_a_merge_reason_names_the_shared_words_as_written(minilm):
    """A reason read "the shared deployment, kubernete, roll" (the matching form of
    "kubernetes", a trial): the words stand as the topics wrote them."""
    from trace_core.judges import EmbeddingJudge, TopicDigest

    def digest(name: str, text: str) -> TopicDigest:
        return TopicDigest(name, "", minilm.embed_batch([text])[0], text, text)

    a = digest("Roll Kubernetes Deployment", "How do I roll back a Kubernetes deployment? Use kubectl rollout undo.")
    b = digest("Kubernetes Deployment Pods", "My Kubernetes deployment keeps restarting its pods after a roll out.")
    ok, why = EmbeddingJudge().approve_merge(a, b, minilm.embed_batch)
    assert "kubernetes" in why and "kubernete," not in why and not why.endswith("kubernete"), why


def test_a_threshold_that_is_no_cosine_is_refused(tmp_path, minilm):
    """reorganize(similarity_threshold=-1) and (2) were taken without a word (trial)."""
    tree = CTree.open(str(tmp_path / "t.db"), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My dog is called Rex."}, {"role": "assistant", "content": "Nice."}])
    for bad in (-1, 0, 2, "0.5", float("nan")):
        with pytest.raises(ValueError, match="similarity_threshold is a cosine similarity"):
            tree.reorganize(similarity_threshold=bad)
    with pytest.raises(TypeError, match="should_stop must be a function"):  # it said "'bool' object is not callable"
        tree.reorganize(should_stop=True)
    assert tree.reorganize(similarity_threshold=1)["merged"] == 0
    tree.vdb.close()


def test_a_second_reorganize_with_nothing_new_changes_nothing(tmp_path, minilm):
    """A merged topic over the bound is cut into parts; the next run merged the parts (one
    subject) and cut them again a level lower: "X · part 1 · part 1 · part 1" and one level
    deeper each run, idle consolidation included (a trial: depth 4 → 5 → 6 → 7)."""
    more = [("Can I keep my sourdough starter in the fridge?", "Yes, the starter keeps for a week cold."),
            ("Why is my sourdough starter not rising?", "Feed the starter with warmer water.")]
    tree = build(tmp_path, minilm, BREAD + OTHER[:2] + BREAD2 + more + OTHER[2:] + OTHER[:1], max_children=3)
    first = tree.reorganize(similarity_threshold=0.5)
    check_invariants(tree)
    assert first["merged"] >= 1 and any(" · part " in t.topic_name for t in tree.root.iter_topics()), \
        tree.render_tree()  # the case: a merged topic cut into parts
    shape = tree.snapshot()
    for _ in range(2):
        again = tree.reorganize(similarity_threshold=0.5)
        check_invariants(tree)
        assert again["merged"] == 0 and tree.snapshot() == shape, tree.render_tree()
    assert not any(" · part 1 · part" in t.topic_name for t in tree.root.iter_topics())


def test_merges_an_undo_took_back_are_not_made_again(tmp_path, minilm):
    """/undo-reorganize, and idle consolidation made the same merges again a minute later
    (a trial). The pairs an undo took apart stay apart, in the session file too."""
    tree = build(tmp_path, minilm, BREAD + OTHER[:2] + BREAD2 + OTHER[2:])
    first = tree.reorganize(similarity_threshold=0.55)
    assert first["merged"] >= 1
    assert all(m["into_span"].startswith("#") and m["absorbed_span"].startswith("#") for m in first["merges"])
    tree.undo_reorganize()
    undone = tree.snapshot()
    again = tree.reorganize(similarity_threshold=0.55)
    assert again["merged"] == 0 and tree.snapshot() == undone
    # said as such: an idle run reported "0 vetoed, 0 skipped" of pairs it did not merge (a trial)
    assert again["kept_apart"] >= 1 and again["vetoed"] == again["skipped"] == 0
    tree.vdb.close()
    reopened = CTree.open(str(tmp_path / "r.db"), judge="embedding", embed_fn=minilm)
    assert reopened.reorganize(similarity_threshold=0.55)["merged"] == 0
    # asked for again (Nexus: /reorganize typed after the undo, never an idle run), they are made
    assert reopened.reorganize(similarity_threshold=0.55, redo_undone=True)["merged"] >= 1
    # a tree without a file keeps them apart for its lifetime
    mem = CTree(judge="embedding", embed_fn=minilm)
    for u, a in BREAD + OTHER[:2] + BREAD2 + OTHER[2:]:
        mem.add(ex(u, a))
    assert mem.reorganize(similarity_threshold=0.55)["merged"] >= 1
    mem.undo_reorganize()
    assert mem.reorganize(similarity_threshold=0.55)["merged"] == 0


def test_progress_is_said_while_slow_vetoes_are_judged(tmp_path, minilm, server):
    """Progress came every 50 pairs: with an LLM veto taking seconds a pair, it read
    "judged 0/4" for the whole run (a trial). Now every half second as well."""
    server.respond(lambda req: Reply('{"merge": false}', delay=0.3) if "Topic A" in req["messages"][-1]["content"]
                   else Reply('{"action": "continue"}'))
    tree = CTree.open(str(tmp_path / "v.db"), judge="auto", base_url=server.base_url, embed_fn=minilm)
    for u, a in (BREAD + OTHER[:2] + BREAD2 + OTHER[2:]) * 2:
        tree.add(ex(u, a))
    seen = []
    tree.events.subscribe(lambda e: seen.append(e) if type(e).__name__ == "ReorganizeProgress" else None)
    res = tree.reorganize(similarity_threshold=0.5)
    assert res["vetoed"] >= 4
    assert any(e.phase == "judged" and 0 < e.done < e.total for e in seen), [(e.phase, e.done, e.total) for e in seen]


def test_an_undo_keeps_apart_every_two_topics_its_merges_joined(tmp_path, minilm):
    """The undo kept apart each absorber and what it absorbed, and the next idle run joined
    the same topics under another of them: B absorbed C where A had absorbed both (a re-trial)."""
    more = [("Can I keep my sourdough starter in the fridge?", "Yes, the starter keeps for a week cold."),
            ("Why is my sourdough starter not rising?", "Feed the starter with warmer water.")]
    talk = BREAD + OTHER[:1] + BREAD2 + OTHER[1:2] + more + OTHER[2:]
    tree = build(tmp_path, minilm, talk)
    first = tree.reorganize(similarity_threshold=0.5)
    joined = {m["into"] for m in first["merges"]}
    assert first["merged"] >= 2 and len(joined) < first["merged"], first["merges"]  # one topic absorbed two
    tree.undo_reorganize()
    undone = tree.snapshot()
    assert tree.reorganize(similarity_threshold=0.5)["merged"] == 0 and tree.snapshot() == undone


def test_two_topics_of_one_name_are_not_kept_apart_by_their_replies(minilm):
    """"Sourdough Starter Bubbles" and "Sourdough Starter Bubbles" were kept apart, "alike
    only through bubbles, sourdough, starter": the bundled model's replies made the rest
    unlike (a trial). A padded name ("… Conversation Notes") proves nothing."""
    from trace_core.judges import EmbeddingJudge, TopicDigest

    def digest(name: str, talk: list[tuple[str, str]]) -> TopicDigest:
        text = " ".join(f"{u} {a}" for u, a in talk)
        return TopicDigest(name, "", minilm.embed_batch([text])[0], text, " ".join(u for u, _ in talk))

    one = digest("Sourdough Starter Bubbles", [("Why does my sourdough starter have so many bubbles?",
                                                "The office has a computer and a business plan for the year.")])
    two = digest("Sourdough Starter Bubbles", [("My sourdough starter bubbles over the jar every night.",
                                                "You are an assistant with long-term memory of this conversation.")])
    ok, why = EmbeddingJudge().approve_merge(one, two, minilm.embed_batch)
    assert ok and "both named Sourdough Starter Bubbles" in why, why
    pad_a = digest("Jar Conversation Notes", [("The jar.", "A computer for your business.")])
    pad_b = digest("Jar Conversation Notes", [("A jar!", "Long-term memory of the office.")])
    assert "both named" not in EmbeddingJudge().approve_merge(pad_a, pad_b, minilm.embed_batch)[1]


def test_a_lone_topic_off_the_active_path_is_counted(tmp_path, minilm):
    """/reorganize on two topics said "there are 0 such" topics off the active path: one
    was there, and the run stopped before counting it (a new-user trial)."""
    tree = build(tmp_path, minilm, [BREAD[0], OTHER[0]])
    path = tree.get_ancestors(tree.current_node, include_self=True)
    off_path = [t for t in tree.root.iter_topics() if t is not tree.root and t not in path]
    assert len(off_path) == 1
    res = tree.reorganize()
    assert res["merged"] == 0 and res["candidates"] == 1
    tree.close()


def test_a_veto_names_the_topics_it_kept_apart_and_the_branches_it_judged(tmp_path, minilm, server):
    """A veto's record gave the ids of the topics kept apart with the names of the two
    branches judged, which a merge earlier in the round had made parts of them: the log
    and the pane's marks spoke of two pairs as one (a trial). Now the names are the
    topics' and the judged branches stand beside them, as for a merge."""
    from nexus.treeinfo import reorganize_lines
    from trace_core.scenarios import _add_all, needle_talk

    asked = []

    def respond(req):
        text = req["messages"][-1]["content"]
        if "Topic A" not in text:
            return Reply('{"action": "continue"}')
        asked.append(text)
        return Reply('{"merge": true}' if len(asked) == 1 else '{"merge": false}')  # the first merges, then none

    server.respond(respond)
    tree = CTree.open(str(tmp_path / "v.db"), judge="auto", base_url=server.base_url, embed_fn=minilm)
    _add_all(tree, needle_talk())
    before = {t.node_id: t.topic_name for t in tree.iter_topics()}
    res = tree.reorganize(similarity_threshold=0.55)
    assert res["merged"] == 1 and res["vetoed"] > 1
    for v in res["vetoes"]:
        assert (before[v["into"]], before[v["absorbed"]]) == (v["into_name"], v["absorbed_name"]), v
    through = [v for v in res["vetoes"] if v["judged"]]  # judged through the branch merged first
    assert through, res["vetoes"]
    lines = [text for text, _ in reorganize_lines(res) if text.startswith("veto:")]
    assert any(" in them, " in line for line in lines), lines

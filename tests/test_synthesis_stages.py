"""The synthesizer's stages, each on its own: candidates, scoring/fusion, budgeted
selection, rendering; and the facade's lifetime (params, close, async)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import numpy as np
import pytest

from trace_core import CTree, PromptSynthesizer
from trace_core.nodes import MessageNode, TopicNode
from trace_core.synthesis import SynthesisParams
from trace_core.synthesis.candidates import CandidateFinder, UnitTable, focused_query_vector, keyword_query
from trace_core.synthesis.fusion import (
    answer_lift,
    fuse,
    neighbour_smoothing,
    next_message,
    queue_order,
    topic_scores,
    z_scores,
)
from trace_core.synthesis.rendering import BlockLayout, render
from trace_core.synthesis.selection import UPDATE_CUES, Supersessions, pair_status, select
from trace_core.textutil import DocumentFrequency
from trace_core.tokens import count_tokens
from trace_core.vectors import VectorIndex


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def words_of(texts: list[str]) -> DocumentFrequency:
    df = DocumentFrequency()
    for t in texts:
        df.observe(t)
    return df


def small_tree(texts, timestamps=None) -> tuple[TopicNode, list[MessageNode]]:
    """ROOT → one topic per pair of exchanges, built by hand (no embedder needed)."""
    root = TopicNode("ROOT", node_id="root")
    xs = []
    for i, (u, a) in enumerate(texts):
        if i % 2 == 0:
            topic = TopicNode(f"Topic {i // 2}", summary=f"about {u}", node_id=f"t{i // 2}")
            root.add_child(topic)
        x = MessageNode(i, ex(u, a), (timestamps or {}).get(i, f"2024-01-{i + 1:02d}T10:00"), node_id=f"m{i}")
        topic.add_child(x)
        xs.append(x)
    return root, xs


def ancestors(node, include_self=True, exclude_root=False):
    chain = []
    cur = node if include_self else node.parent
    while cur is not None:
        chain.append(cur)
        cur = cur.parent
    chain.reverse()
    return chain[1:] if exclude_root and chain and chain[0].parent is None else chain


# --- stage 1: candidates ---------------------------------------------------------------------


def test_keyword_query_keeps_rare_content_words_only():
    df = words_of(["alex said hello about the weather"] * 300 + ["alex bought a kayak"])
    q = keyword_query("What did Alex say about the kayak?", df, common_word_share=0.05)
    assert q.split() == ["say", "kayak"]  # rarest first; "alex" is in most exchanges; function words gone
    assert keyword_query("the of and", df, 0.05) == ""


def test_focused_query_vector_drops_common_words(minilm):
    df = words_of([f"Melanie: line {i} about things" for i in range(30)])
    v = focused_query_vector("What hobby did Melanie start?", df, minilm.embed)
    assert v is not None and float(v @ minilm.embed("What hobby did start?")) > 0.999
    assert focused_query_vector("What hobby did she start?", df, minilm.embed) is None
    assert focused_query_vector("What hobby did Melanie start?", df, minilm.embed, enabled=False) is None


def test_unit_table_follows_the_index_version():
    idx = VectorIndex()
    idx.add("x0-user", np.ones(4))
    table = UnitTable()
    table.follow(idx)
    assert list(table.exchange_of) == [0] and table.row_of_unit == {(0, "user"): 0}
    idx.add("x1-assistant", np.ones(4))
    table.follow(idx)
    assert table.row_of_id == {"x0-user": 0, "x1-assistant": 1} and table.role_of == ["user", "assistant"]


def spread_vectors(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    """Unit vectors whose energy falls off over the axes, as sentence embeddings' does (the
    leading 96 of 384 hold about 95% of it; MiniLM's on LoCoMo: 90%, but clustered)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)) * np.arange(1, dim + 1) ** -0.75
    x = x @ np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_projected_top_returns_the_exact_best_rows_and_their_cosines():
    vecs = spread_vectors(6000)
    idx = VectorIndex()
    for k, v in enumerate(vecs):
        idx.add(f"x{k}-user", v)
    queries = spread_vectors(40, seed=1)
    found = 0
    for q in queries:
        exact = vecs @ q
        truth = set(np.argsort(-exact)[:20].tolist())
        pos, cos = idx.top(q, 20, approximate_from=0)
        assert np.allclose(cos, exact[pos], atol=1e-5)  # the shortlist is rescored exactly
        found += len(truth & set(pos.tolist()))
        small_pos, _ = idx.top(q, 20, approximate_from=10_000)  # below the threshold: exact
        assert set(small_pos.tolist()) == truth
    assert found >= 0.98 * 20 * len(queries)


def test_projected_top_follows_added_replaced_and_removed_rows():
    vecs = spread_vectors(3000)
    idx = VectorIndex()
    for k, v in enumerate(vecs):
        idx.add(f"x{k}-user", v)
    q = spread_vectors(1, seed=2)[0]
    idx.top(q, 10, approximate_from=0)  # the projection is made here
    idx.add("new-user", q)  # a row added after it
    pos, cos = idx.top(q, 10, approximate_from=0)
    assert idx.ids[pos[np.argmax(cos)]] == "new-user" and np.isclose(cos.max(), 1.0)
    idx.remove("new-user")
    best_old = idx.ids[int(np.argmax(vecs @ q))]
    idx.remove(best_old)
    pos, _ = idx.top(q, 10, approximate_from=0)
    assert {"new-user", best_old}.isdisjoint(idx.ids[p] for p in pos)
    idx.add("x7-user", -q)  # replaced in place: its projected row follows
    pos, _ = idx.top(-q, 1, approximate_from=0)
    assert idx.ids[pos[0]] == "x7-user"


def test_rows_added_while_the_projection_is_made_are_found():
    """A writer adds rows while a reader's first approximate search makes the projection:
    every row added is then found as its own best match."""
    vecs = spread_vectors(4000)
    idx = VectorIndex()
    for k, v in enumerate(vecs[:2000]):
        idx.add(f"x{k}-user", v)

    def writer():
        for k in range(2000, 4000):
            idx.add(f"x{k}-user", vecs[k])

    t = threading.Thread(target=writer)
    t.start()
    while t.is_alive():
        idx.top(vecs[0], 5, approximate_from=0)
    t.join()
    for k in range(2000, 4000, 97):
        pos, cos = idx.top(vecs[k], 5, approximate_from=0)
        assert idx.ids[pos[np.argmax(cos)]] == f"x{k}-user"


def test_candidates_include_keyword_hits_and_answering_neighbours(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "c.db"), judge="embedding", embed_fn=minilm)
    talk = [("How is your garden?", "The tomatoes are growing well."),
            ("Any plans for the weekend?", "We might visit the zorbing park near Lyon."),
            ("What is zorbing?", "Rolling downhill inside a big transparent ball."),
            ("Did you watch the match?", "Yes, a great final.")]
    for u, a in talk:
        tree.add(ex(u, a))
    finder = CandidateFinder(tree.vdb, tree.judges.embedding.doc_freq, SynthesisParams(min_relevance=0.99), None)
    q = "zorbing"
    timings: dict[str, float] = {}
    c = finder.find(q, minilm.embed(q), tree.exchanges, set(), minilm.embed, tree.exchange_vector, timings)
    units = set(c.units)
    assert (1, "assistant") in units and (2, "user") in units  # BM25 hits, though no cosine reaches 0.99
    assert (0, "user") not in units and (3, "user") not in units  # unrelated, not next to a hit via BM25
    assert all(c.keyword[c.units.index(u)] > 0 for u in [(1, "assistant"), (2, "user")])
    assert "embed_seconds" in timings


# --- stage 2: scoring and fusion ----------------------------------------------------------------


def test_z_scores_and_topic_scores():
    assert list(z_scores(np.array([2.0, 2.0]))) == [0.0, 0.0]
    assert np.allclose(z_scores(np.array([1.0, 3.0])), [-1.0, 1.0])
    s = topic_scores({"a": 0.5, "b": 0.5}, {"b": 10.0})
    assert s == {"a": 0.5, "b": 0.75}  # BM25 nudges by a quarter, relative to the best topic match


def test_cosine_spread_is_exact_for_a_small_table_and_sampled_for_a_large_one():
    from trace_core.synthesis.candidates import MessageCosines

    vecs = spread_vectors(12_000)
    idx = VectorIndex()
    for k, v in enumerate(vecs):
        idx.add(f"x{k}-user", v)
    for q in spread_vectors(5, seed=2):
        exact = float((vecs @ q).std())
        assert MessageCosines(q, full=idx.similarities(q)).spread() == pytest.approx(exact, rel=1e-5)
        assert MessageCosines(q, index=idx).spread() == pytest.approx(exact, rel=0.05)  # every 3rd row


def test_a_candidates_order_does_not_depend_on_what_else_became_a_candidate():
    """The cosine is read in the conversation's spread for the query: keyword-only
    candidates far below in meaning do not shrink a close message's lead (in the
    candidates' own spread they did, and a weak keyword match overtook it)."""
    from trace_core.synthesis.candidates import Candidates

    root, xs = small_tree([(f"q{i}", f"a{i}") for i in range(40)])
    p = SynthesisParams(neighbour_weight=0.0, weights=(1.0, 1.5, 0.0))
    close, weak_match = [(0, "user"), (10, "user")], [0.62, 0.45]
    extra = [(i, "user") for i in range(20, 40)]  # BM25 hits on a common-ish word, unrelated in meaning
    rankings = {}
    for scale in ("conversation", "candidates"):
        for crowd in (False, True):
            units = close + (extra if crowd else [])
            dense = np.array(weak_match + ([0.05] * len(extra) if crowd else []))
            keyword = np.array([0.0, 2.0] + ([2.0] * len(extra) if crowd else []))  # as good as the weak match's
            cands = Candidates(units, list(range(len(units))), dense, keyword, {}, {},
                               dense_spread=0.08 if scale == "conversation" else 0.0)
            ranking = fuse("which one?", cands, xs, dataclasses.replace(p, dense_scale=scale)).ranking
            rankings[scale, crowd] = [units[k][0] for k in ranking[:2]]
    assert rankings["conversation", False] == rankings["conversation", True] == [0, 10]
    assert rankings["candidates", False] != rankings["candidates", True]  # what the old scale did


def test_neighbour_smoothing_lends_to_adjacent_messages_only():
    units = [(0, "user"), (1, "user"), (5, "user")]
    out = neighbour_smoothing(np.array([0.0, 1.0, 0.0]), units, 0.5)
    assert list(out) == [0.5, 1.0, 0.0]  # exchange 0 sits next to 1; exchange 5 does not


def test_the_message_after_a_question_gains_a_share_of_its_score():
    """A message that asks what the query asks is answered by the next one: that one
    gains a share of the question's score (the one before it does not), in any script's
    question mark."""
    root, xs = small_tree([("How long have you had the turtles?", "Three years now."),
                           ("Nice weather.", "Yes, sunny."),
                           ("カメをどのくらい飼っていますか？", "三年です。")])
    assert next_message(xs, 0, "user") == (0, "assistant")
    assert next_message(xs, 0, "assistant") == (1, "user")
    assert next_message(xs, 2, "assistant") is None
    units = [(0, "user"), (0, "assistant"), (1, "user"), (2, "user"), (2, "assistant")]
    base = np.array([2.0, 0.5, 0.5, 2.0, 0.5])
    out = answer_lift(base, base.copy(), units, xs, 0.25)
    assert list(out) == [2.0, 1.0, 0.5, 2.0, 1.0]  # the replies gain; the message after a statement does not
    # in the ranking: the reply overtakes a message of equal cosine that answers nothing
    from trace_core.synthesis.candidates import Candidates
    cands = Candidates(units[:3], [0, 1, 2], np.array([0.6, 0.3, 0.31]), np.zeros(3), {}, {})
    p = SynthesisParams(neighbour_weight=0.0, answer_weight=0.2)
    assert fuse("how long has he had turtles?", cands, xs, p).ranking == [0, 1, 2]
    assert fuse("how long has he had turtles?", cands, xs, dataclasses.replace(p, answer_weight=0.0)).ranking == [0, 2, 1]


def test_fuse_ranks_keyword_and_named_date():
    from trace_core.synthesis.candidates import Candidates

    root, xs = small_tree([("a", "b"), ("c", "d"), ("e", "f")], {2: "2023-10-13T10:00"})
    cands = Candidates([(0, "user"), (1, "user"), (2, "user")], [0, 1, 2], np.array([0.5, 0.4, 0.3]),
                       np.array([0.0, 5.0, 0.0]), {}, {})
    p = SynthesisParams(neighbour_weight=0.0)
    s = fuse("what happened?", cands, xs, p)
    assert s.ranking[0] == 1  # the keyword match wins over a slightly better cosine
    s = fuse("what happened on October 13, 2023?", cands, xs, dataclasses.replace(p, weights=(1, 0, 0), date_weight=3.0))
    assert s.ranking[0] == 2 and s.fused.min() == 0.0  # the named day lifts exchange 2; scores non-negative
    order, pinned = queue_order(np.array([0.6, 0.2, 0.55]), [1, 2, 0], 0.5, 1)
    assert order == [0, 1, 2] and pinned == {0}  # a recalled past message is tried first


# --- stage 3: budgeted selection ------------------------------------------------------------------


def test_supersessions_mark_the_older_fact():
    root, xs = small_tree([("Sarah is allergic to peanuts.", "Noted."),
                           ("Actually Sarah is no longer allergic to peanuts.", "Good news.")])
    vec = {0: np.array([1.0, 0.0]), 1: np.array([0.9, 0.436])}
    newer = Supersessions(0.65).find([0, 1], xs, vec.__getitem__)
    assert newer == {0: [1]}
    assert pair_status({0, 1}, newer) == {0: "superseded", 1: "current"}
    assert pair_status({0}, newer) == {} and pair_status({1}, newer) == {}  # no tag without its partner
    assert Supersessions(0.99).find([0, 1], xs, vec.__getitem__) == {}
    # an update that is no candidate of the question (about something else) supersedes nothing
    assert Supersessions(0.65).find([0], xs, vec.__getitem__, updates={0}) == {}


@pytest.mark.parametrize("text, is_update", [
    ("Actually, Sarah's test came back negative.", True),
    ("Sarah is no longer allergic to peanuts.", True),
    ("I don't eat meat anymore.", True),
    ("I do not work there any more.", True),
    ("It turns out I was wrong about the date.", True),
    ("I changed my mind: we fly on Friday.", True),
    # a change of plan said without "Actually," (a trial: "moved … to Thursday" marked nothing)
    ("Priya moved the draft deadline to Thursday noon.", True),
    ("The dentist appointment got postponed.", True),
    ("We rescheduled the call until Monday.", True),
    ("My tournament got pushed back a week.", True),
    # chit-chat that used to count as an update (and filled LoCoMo blocks with tags)
    ("Thanks! I'll keep you updated.", False),
    ("Not much has changed for me.", False),
    ("Yeah actually - the tournament is intense!", False),
    ("Wow! Any more paintings coming up?", False),
    ("Let me know how it turns out.", False),
    ("That film really moved me.", False),
])
def test_update_cues_are_corrections_not_chit_chat(text, is_update):
    assert bool(UPDATE_CUES.search(text)) is is_update


def test_an_update_must_come_from_the_message_close_to_the_older_one():
    """The exchange vectors are close, but the message with the cue (the other speaker,
    on another subject) is not: nothing is superseded."""
    root, xs = small_tree([("Caroline: I paint landscapes.", "Melanie: Lovely."),
                           ("Caroline: I paint portraits now.", "Melanie: My old car is no longer running.")])
    exchange_vec = {0: np.array([1.0, 0.0, 0.0]), 1: np.array([0.95, 0.312, 0.0])}
    message_vec = {(0, "user"): np.array([1.0, 0.0, 0.0]), (0, "assistant"): np.array([0.8, 0.6, 0.0]),
                   (1, "user"): np.array([0.9, 0.436, 0.0]), (1, "assistant"): np.array([0.0, 0.0, 1.0])}
    finder = Supersessions(0.65)
    assert finder.find([0, 1], xs, exchange_vec.__getitem__) == {0: [1]}  # exchange level alone: a false update
    assert finder.find([0, 1], xs, exchange_vec.__getitem__,
                       message_vector=lambda i, r: message_vec[(i, r)]) == {}
    message_vec[(1, "assistant")] = np.array([0.9, 0.436, 0.0])  # the cue message is about the same thing
    assert finder.find([0, 1], xs, exchange_vec.__getitem__,
                       message_vector=lambda i, r: message_vec[(i, r)]) == {0: [1]}


def test_select_keeps_to_the_budget_brings_the_correction_and_pays_for_the_tags():
    root, xs = small_tree([("old fact " * 5, "ok"), ("filler " * 40, "filler " * 40), ("update " * 5, "ok")])
    layout = BlockLayout(xs, ancestors, 480, 2)
    queue = [(0, "user"), (1, "user"), (1, "assistant")]
    chosen = select(queue, 1000, {0: [2]}, layout)
    assert chosen[:3] == [(0, "user"), (2, "user"), (2, "assistant")]  # the correction follows right after
    small = select(queue, 40, {}, layout)
    assert small == [(0, "user")]  # the long filler lines do not fit
    # both of a pair taken: the tags and the note are priced, and what is priced is what renders
    pair = [(0, "user"), (2, "user")]

    def least_budget(newer):  # the smallest budget that takes both
        return next(b for b in range(10, 200) if select(pair, b, newer, layout) == pair)

    exact, plain = least_budget({0: [2]}), least_budget({})
    assert exact > plain  # the tags and the note are priced
    status = pair_status({0, 2}, {0: [2]})
    text, _, _ = render(pair, status, exact, 3, {}, {}, layout, lambda t: False, lambda t: "", 0.4)
    assert "[superseded]" in text and "[current]" in text and count_tokens(text) <= exact
    assert text.count("\n- ") == 2  # nothing priced was dropped by rendering


# --- stage 4: rendering ------------------------------------------------------------------------------


def test_layout_lines_and_headers():
    root, xs = small_tree([("Caroline: I adopted a cat.", "(no reply)"), ("Caroline: Her name is Miso.", "ok"),
                           ("x " * 300, "y"), ("Important: nuts.", "Noted.")])
    layout = BlockLayout(xs, ancestors, 30, 2)
    assert layout.text(0, "user") == "Caroline: I adopted a cat."  # a transcript's speaker label needs no role
    assert layout.text(3, "user") == "User: Important: nuts."  # a lone label is no speaker
    assert layout.text(0, "assistant") == ""  # a placeholder is never shown
    assert layout.text(2, "user").endswith("…") and len(layout.text(2, "user")) <= len("User: ") + 30
    assert layout.line(0, ["user"], "current") == "- [current] Caroline: I adopted a cat."
    assert layout.header(xs[0].parent) == "## Topic 0"
    assert layout.header(xs[0].parent, "a summary") == "## Topic 0 — a summary"
    assert layout.header(None) == "## Archived"


def test_render_groups_by_branch_dates_entries_and_adds_matched_summaries():
    root, xs = small_tree([("a1", "b1"), ("a2", "b2"), ("c1", "d1")],
                          {0: "2024-01-01T09:00", 1: "2024-01-01T10:00", 2: "2024-02-01T10:00"})
    layout = BlockLayout(xs, ancestors, 480, 2)
    chosen = [(2, "user"), (0, "user"), (1, "user")]
    text, shown, paths = render(chosen, {}, 1000, 3, {"t0": 0.9, "t1": 0.1}, {}, layout,
                                lambda t: True, lambda t: "ROOT → " + t.topic_name, 0.4)
    lines = text.splitlines()
    assert lines[1] == "## Topic 1" and lines[2] == "[2024-02-01]"  # the best-ranked branch first
    assert lines[4].startswith("## Topic 0 — about a1")  # a matched frozen topic shows its summary
    assert lines.count("[2024-01-01]") == 1  # one date line per day within a branch
    assert [p.node_id for p in paths] == ["t1", "t0"] and set(shown) == set(chosen)
    text, shown, paths = render(chosen, {}, 12, 3, {}, {}, layout, lambda t: True, str, 0.4)
    assert (text, shown, paths) == ("", {}, [])  # nothing fits: no half block


# --- the facade ------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path, minilm):
    t = CTree.open(str(tmp_path / "f.db"), judge="embedding", embed_fn=minilm)
    for u, a in [("My sister lives in Porto.", "Porto is lovely."), ("I play the cello.", "A fine instrument.")]:
        t.add(ex(u, a))
    return t


def test_params_are_one_frozen_dataclass(tree):
    synth = PromptSynthesizer(ctree=tree, memory_token_budget=300, weights=(1.0, 2.0, 0.0))
    assert synth.params.memory_token_budget == 300 and synth.params.weights == (1.0, 2.0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        synth.params.candidates = 5
    with pytest.raises(TypeError):
        PromptSynthesizer(ctree=tree, no_such_setting=1)
    synth.close()


def test_no_attribute_appears_after_init(tree, minilm):
    synth = PromptSynthesizer(ctree=tree, parallel_from=0)
    before = set(vars(synth))
    synth.synthesize_prompt("Where does my sister live?", None, None, [])
    assert set(vars(synth)) == before
    synth.close()


def bm25_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("trace-bm25")]


def test_close_stops_the_bm25_thread_and_keeps_working(tree):
    with PromptSynthesizer(ctree=tree, parallel_from=0) as synth:  # BM25 in its thread at any size
        synth.synthesize_prompt("cello", None, None, [])
        assert bm25_threads()
    assert not bm25_threads()
    assert "cello" in synth.synthesize_prompt("cello", None, None, [])  # closed: BM25 runs inline


def test_closing_the_tree_closes_its_synthesizers(tree):
    synth = PromptSynthesizer(ctree=tree, parallel_from=0)
    synth.synthesize_prompt("cello", None, None, [])
    assert bm25_threads()
    tree.close()
    assert not bm25_threads()


def test_asynthesize_prompt_runs_off_the_event_loop(tree):
    synth = PromptSynthesizer(ctree=tree)
    loop_thread: list[int] = []
    ran_in: list[int] = []
    real = synth.memory_block

    def spy(*args, **kwargs):
        ran_in.append(threading.get_ident())
        return real(*args, **kwargs)

    synth.memory_block = spy

    async def main():
        loop_thread.append(threading.get_ident())
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        prompt = await synth.asynthesize_prompt("Where does my sister live?", None, None, [])
        task.cancel()
        return prompt, ticks

    prompt, ticks = asyncio.run(main())
    assert "Porto" in prompt and synth.last_report.exchanges[0].index == 0
    assert ran_in and ran_in[0] != loop_thread[0]
    assert ticks > 0  # the loop kept running meanwhile
    assert prompt == synth.synthesize_prompt("Where does my sister live?", None, None, [])
    synth.close()


def test_aadd_runs_off_the_event_loop_and_stores_the_exchange(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "a.db"), judge="embedding", embed_fn=minilm)
    loop_thread = threading.get_ident()
    seen: list[int] = []
    tree.on_event(lambda e: seen.append(threading.get_ident()))

    async def main():
        nonlocal loop_thread
        loop_thread = threading.get_ident()
        return await tree.aadd(ex("I keep bees in my garden.", "Bees are wonderful."), timestamp="2024-01-01T10:00")

    node = asyncio.run(main())
    assert node.index == 0 and tree.exchanges[0] is node
    assert seen and all(t != loop_thread for t in seen)  # add() ran in a worker thread
    tree.close()
    reopened = CTree.open(str(tmp_path / "a.db"), judge="embedding", embed_fn=minilm)
    assert reopened.exchanges[0].user == "I keep bees in my garden."  # on disk when aadd returned
    reopened.close()


def test_diversify_moves_a_near_duplicate_below_a_different_fact():
    from trace_core.synthesis.fusion import diversify

    vecs = np.array([[1.0, 0.0], [0.999, 0.045], [0.0, 1.0]])
    fused = np.array([1.0, 0.95, 0.8])
    assert diversify([0, 1, 2], fused, vecs, 0.0, 10) == [0, 1, 2]  # off: the ranking as it was
    assert diversify([0, 1, 2], fused, vecs, 0.3, 10) == [0, 2, 1]  # the second reading of fact 0 waits
    assert diversify([0, 1, 2], fused, vecs, 0.3, 2) == [0, 1, 2]  # only the pool is reordered


def test_the_role_is_shown_unless_a_transcript_names_the_speaker(tmp_path, minilm):
    """"Important: I am allergic to peanuts." lost its "User:" (read as a transcript's
    speaker label), and a reply echoing "User: …" read as the user's words (trial); a
    transcript's lines ("Caroline: …" on each of her messages) still go without it."""
    from trace_core import CTree, PromptSynthesizer

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    for u, a in [("Important: I am allergic to peanuts.", "Noted: no peanuts in any recipe."),
                 ("Can you suggest a snack?", "User: I am not allergic to anything anymore."),
                 ("Caroline: I went to the pottery class.", "Melanie: Lovely, what did you make?"),
                 ("Caroline: A bowl for my mum.", "Melanie: She will love it.")]:
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}])
    from trace_core.synthesizer import RetrievalReport

    q = "peanut allergy snack pottery bowl"
    block = PromptSynthesizer(ctree=tree, vector_db=tree.vdb).memory_block(
        q, tree.embed_fn.embed(q), [], 3, 2, 0.5, 2000, RetrievalReport(query=q, memory_token_budget=2000))
    assert "User: Important: I am allergic to peanuts." in block
    assert "Assistant: User: I am not allergic" in block
    assert "- Caroline: A bowl for my mum." in block and "User: Caroline" not in block
    tree.vdb.close()


def test_openai_shaped_recent_messages_and_context_are_read_as_text(tmp_path, minilm):
    """A tool call's content None and content as parts raised TypeErrors; a context string
    was injected a character a paragraph; a None query raised (trial)."""
    from trace_core import CTree, PromptSynthesizer

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My sister Anna lives in Lisbon."}, {"role": "assistant", "content": "Noted."}])
    synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb)
    recent = [{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
              {"role": "user", "content": [{"type": "text", "text": "Where does Anna live?"},
                                           {"type": "image_url", "image_url": {"url": "data:x"}}]}]
    prompt = synth.synthesize_prompt("Where does Anna live?", recent_messages=recent, extra_context="WEB: Lisbon")
    assert "User: Where does Anna live?" in prompt and "\n\nWEB: Lisbon" in prompt and "W\n\nE" not in prompt
    assert "Assistant: \n" not in prompt and not prompt.rstrip().endswith("Assistant:")  # the tool call is no line
    empty = synth.synthesize_prompt("Where?", recent_messages=[{"content": None}, {"role": "user", "content": " "}])
    assert "User:" not in empty
    assert synth.synthesize_prompt(None)
    import numpy as np

    for bad in (np.zeros(384), np.full(384, np.nan)):  # ranked every message alike, silently (a trial)
        with pytest.raises(ValueError, match="query_vector"):
            synth.synthesize_prompt("Where does Anna live?", query_vector=bad)
    tree.vdb.close()

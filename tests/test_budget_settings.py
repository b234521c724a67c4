"""Settings by budget: a block takes the settings measured best at the budget nearest its
own (``SynthesisParams.at_budget``), and the benchmark chooses them per budget, each fold
on its three conversations."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bench.locomo import Evaluation, leave_one_out
from trace_core import CTree, PromptSynthesizer
from trace_core.synthesis import SynthesisParams
from trace_core.synthesizer import RetrievalReport

FACTS = [
    ("My friend Sarah is severely allergic to peanuts.", "Then Sarah must avoid peanuts entirely."),
    ("What's the weather like in Tokyo this week?", "Rain on Tuesday, sunshine later in the week."),
    ("I'm planning Sarah's surprise birthday party and I'll bake a cake.", "Plan guests, decorations and a cake."),
    ("How do I fix a flat bike tire?", "Find the puncture in the inner tube, patch it and reinflate."),
    ("Can you give me a Thai peanut butter cake recipe?", "Flour, sugar, eggs, coconut milk, peanut butter."),
]


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

SCHEDULE = ((500, (("diversity", 0.3),)), (2000, (("neighbour_weight", 0.5), ("diversity", 0.1))))


def test_a_block_takes_the_settings_of_the_budget_nearest_its_own():
    p = SynthesisParams(by_budget=SCHEDULE)
    assert p.at_budget(300).diversity == 0.3 and p.at_budget(300).neighbour_weight == 0.3
    assert p.at_budget(700).diversity == 0.3  # nearer 500 than 2,000 on a log scale
    assert p.at_budget(1100).diversity == 0.1 and p.at_budget(1100).neighbour_weight == 0.5
    assert p.at_budget(0).diversity == 0.3
    assert p.at_budget(2000).by_budget == ()


def test_a_setting_given_its_own_value_keeps_it_at_every_budget():
    p = SynthesisParams(by_budget=SCHEDULE, diversity=0.2)
    assert p.at_budget(500).diversity == 0.2 and p.at_budget(2000).diversity == 0.2
    assert p.at_budget(2000).neighbour_weight == 0.5
    plain = SynthesisParams(by_budget=())
    assert plain.at_budget(2000) is plain


def test_a_setting_fixed_or_named_to_the_synthesizer_is_kept_even_at_its_default_value(tmp_path, hash_embed):
    """SynthesisParams(date_weight=1.0) is the default value, which a budget's entry still
    changes; fixed() and the synthesizer's own keywords keep it (a trial: dense_scale=
    "conversation" given to the synthesizer ran as "candidates" at 500 tokens)."""
    p = SynthesisParams(by_budget=SCHEDULE).fixed(diversity=0.0)
    assert p.at_budget(500).diversity == 0.0 and p.at_budget(2000).diversity == 0.0
    assert p.at_budget(2000).neighbour_weight == 0.5  # the rest of the entry still holds
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    synth = PromptSynthesizer(ctree=tree, params=SynthesisParams(by_budget=SCHEDULE), diversity=0.0)
    assert synth.params.at_budget(500).diversity == 0.0


@pytest.mark.parametrize("schedule, problem", [(((0, ()),), "above 0"), (((500, (("diversty", 0.1),)),), "diversty")])
def test_a_schedule_that_cannot_work_is_refused_when_made(schedule, problem):
    with pytest.raises(ValueError, match=problem):
        SynthesisParams(by_budget=schedule)


@pytest.mark.parametrize("field, value, problem", [
    ("diversity", "x", "diversity must be a number"), ("candidates", -1, "candidates must be a whole number"),
    ("focus_query", 1, "focus_query must be True or False"), ("weights", (1.0, 2.0), "weights must be three numbers"),
    ("topic_threshold", float("nan"), "topic_threshold must be a number"),
    ("dense_scale", "cosine", "dense_scale must be 'conversation' or 'candidates'")])
def test_a_setting_of_the_wrong_kind_is_refused_when_made(field, value, problem, hash_embed):
    # diversity="x" was taken, and failed in the middle of a synthesis; through a budget's
    # entry or a keyword of PromptSynthesizer alike
    with pytest.raises(ValueError, match=problem):
        SynthesisParams(**{field: value})
    with pytest.raises(ValueError, match=problem):  # when made, not at the first synthesis
        SynthesisParams(by_budget=((500, ((field, value),)),))
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    with pytest.raises(ValueError, match=problem):
        PromptSynthesizer(ctree=tree, **{field: value})


def test_the_synthesizer_says_what_it_takes(hash_embed):
    # "'str' object has no attribute 'vdb'", "'dict' object has no attribute 'fixed'", and
    # a base prompt of None failed at the first synthesis
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    for kwargs, words in (({"ctree": "session.db"}, "ctree must be a CTree"),
                          ({"ctree": tree, "params": {"diversity": 0.1}}, "params must be a SynthesisParams"),
                          ({"ctree": tree, "base_prompt": None}, "base_prompt must be text")):
        with pytest.raises(TypeError, match=words):
            PromptSynthesizer(**kwargs)


def test_a_query_of_punctuation_or_emoji_only_injects_nothing(tmp_path, minilm):
    """"?" injected 117 tokens, "😀" 332 (a trial): they ask nothing."""
    tree = CTree.open(str(tmp_path / "t.db"), judge="embedding", embed_fn=minilm)
    for i, (u, a) in enumerate(FACTS + [("Really?", "Yes!"), ("Why?", "Because it's fun :)")]):
        tree.add(ex(u, a), timestamp=f"2024-06-0{i + 1}T12:00:00")
    synth = PromptSynthesizer(ctree=tree)
    for query in ("?", "...", "!!!", "¿?", "😀"):
        report = RetrievalReport(query=query, memory_token_budget=1000)
        assert synth.memory_block(query, None, [], 3, 2, 0.5, 1000, report) == "", query
    assert synth.memory_block("Sarah's cake?", None, [], 3, 2, 0.5, 1000, RetrievalReport(query="x"))
    tree.close()


def test_the_shipped_settings_differ_by_budget():
    p = SynthesisParams()
    assert p.at_budget(500) != p.at_budget(2000)


def test_blocks_of_several_budgets_are_each_made_with_their_own_settings(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "t.db"), judge="embedding", embed_fn=minilm)
    for i, (u, a) in enumerate(FACTS):
        tree.add(ex(u, a), timestamp=f"2024-06-0{i + 1}T12:00:00")
    query = "What should I bake for Sarah's party?"
    # weights that reorder the candidates: the keyword term alone at 60 tokens, cosine at 400
    schedule = ((60, (("weights", (0.0, 1.0, 0.0)),)), (400, (("weights", (1.0, 0.0, 0.0)),)))
    together = PromptSynthesizer(ctree=tree, params=SynthesisParams(by_budget=schedule, neighbour_weight=0.0,
                                                                     answer_weight=0.0))
    reports = [RetrievalReport(query=query, memory_token_budget=b) for b in (60, 400)]
    blocks = together.memory_blocks(query, None, [], 3, 0, 0.5, list(zip((60, 400), reports)))
    for budget, block, report in zip((60, 400), blocks, reports):
        alone = PromptSynthesizer(ctree=tree, params=together.params.at_budget(budget))
        r = RetrievalReport(query=query, memory_token_budget=budget)
        assert alone.memory_block(query, None, [], 3, 0, 0.5, budget, r) == block
        assert r.ranking == report.ranking
    assert reports[0].ranking != reports[1].ranking
    tree.close()


def evaluation(recall_500: float, recall_2000: float) -> Evaluation:
    return Evaluation({500: [recall_500], 2000: [recall_2000]}, {500: Counter(), 2000: Counter()}, [0.0])


def test_each_fold_chooses_per_budget_on_the_other_three():
    names = ["a", "b", "c", "d"]
    # setting 0 is best at 500 everywhere, setting 1 at 2,000 everywhere but on "d"
    results = {
        0: {n: evaluation(0.9, 0.5) for n in names},
        1: {n: evaluation(0.4, 0.8 if n != "d" else 0.1) for n in names},
    }
    loo = leave_one_out(results, names, [500, 2000])
    assert all(loo["folds"][n] == {500: 0, 2000: 1} for n in names)
    assert loo["recall"][500] == 0.9
    assert abs(loo["recall"][2000] - (0.8 * 3 + 0.1) / 4) < 1e-9  # "d" is scored, not chosen on


def test_numpy_numbers_are_taken_as_plain_ones(hash_embed):
    # the check of each field's kind refused np.float32(0.4) (a cosine read from a float32
    # vector) and np.int64(100) (a grid made with np.arange), which synthesis took before
    p = SynthesisParams(topic_threshold=np.float32(0.4), candidates=np.int64(100),
                        weights=(np.float32(1.0), 5, 0.3), focus_query=np.bool_(False))
    assert (p.topic_threshold, p.candidates, p.weights, p.focus_query) == (
        pytest.approx(0.4), 100, (1.0, 5.0, 0.3), False)
    assert type(p.topic_threshold) is float and type(p.candidates) is int and type(p.focus_query) is bool
    assert all(type(w) is float for w in p.weights)
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "My cello is in Lisbon"}, {"role": "assistant", "content": "Noted."}])
    synth = PromptSynthesizer(ctree=tree, candidates=np.int64(50))
    # exclude: exchange indices, numpy's as well (they were refused as "not … indices")
    prompt = synth.synthesize_prompt("Where is my cello?", None, None, [], exclude=np.array([0]))
    assert "Lisbon" not in prompt
    assert "Lisbon" in synth.synthesize_prompt("Where is my cello?", None, None, [], exclude={np.int64(5)})
    synth.close()


def test_exclude_may_be_a_generator(hash_embed):
    # exclude=(x.index for x in …) was taken until the check of its kind, which asked
    # for a collection: "exclude is a collection of exchange indices, not <generator…>"
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "My cello is in Lisbon"}, {"role": "assistant", "content": "Noted."}])
    synth = PromptSynthesizer(ctree=tree)
    prompt = synth.synthesize_prompt("Where is my cello?", None, None, [], exclude=(x.index for x in tree.exchanges))
    assert "Lisbon" not in prompt
    with pytest.raises(TypeError, match="exclude is a collection of exchange indices"):
        synth.synthesize_prompt("Where is my cello?", None, None, [], exclude=(str(i) for i in range(2)))
    synth.close()

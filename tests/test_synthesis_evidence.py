"""Nothing without evidence of relevance reaches the memory block (issue 15.4): a
question unrelated to every exchange gets no branch and no exchange, on a real tree
with the real MiniLM embedder; what is injected has evidence of its own (cosine from
``min_relevance``, a shared content word) or sits next to an exchange that has."""

from __future__ import annotations

import pytest

from trace_core import CTree, PromptSynthesizer
from trace_core.prompts import MEMORY_HEADER

TALK = [("My sister lives in Porto.", "Porto is lovely."), ("I play the cello.", "A fine instrument."),
        ("How do I bake sourdough bread?", "Feed the starter and let the dough rise overnight."),
        ("Which tyres for winter cycling?", "Studded tyres help on ice."),
        ("My dog Rex loves the beach.", "Dogs love running on sand."),
        ("Any tips for learning Python?", "Write small programs every day.")]

# each shares no content word with the talk; MiniLM puts some near 0.25 of an exchange
UNRELATED = ["What should I do on a rainy afternoon?", "Tell me something funny", "Recommend a good movie",
             "What's the weather like?", "How are you today?"]


@pytest.fixture(scope="module")
def synth(tmp_path_factory, minilm):
    tree = CTree.open(str(tmp_path_factory.mktemp("ev") / "ev.db"), judge="embedding", embed_fn=minilm)
    for u, a in TALK:
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}])
    s = PromptSynthesizer(ctree=tree)
    yield s
    tree.close()


@pytest.mark.parametrize("question", UNRELATED)
def test_an_unrelated_question_gets_no_branch(synth, question):
    prompt = synth.synthesize_prompt(question, None, None, [])
    report = synth.last_report
    assert report.exchanges == [] and report.paths == []
    assert MEMORY_HEADER not in prompt


def test_every_injected_exchange_has_evidence(synth):
    for question in ["Where does my sister live?", "What does my dog like?", "bread", "music instrument"]:
        synth.synthesize_prompt(question, None, None, [])
        report = synth.last_report
        assert report.exchanges, question  # a related question still gets its memory
        floor, near = synth.params.min_relevance, synth.params.neighbour_relevance
        own = {e.index for e in report.exchanges if e.vector >= floor or e.keyword > 0}
        assert own, question
        # the rest: a conversation neighbour of one with evidence, itself not unrelated
        assert all(e.index in own or (e.vector >= near and {e.index - 1, e.index + 1} & own)
                   for e in report.exchanges), question
    assert "Porto" in synth.synthesize_prompt("Where does my sister live?", None, None, [])

"""End to end against a real llama.cpp server (gemma-3-270m, a tiny base model that
answers poorly: exactly what exercises every fallback)."""

from __future__ import annotations

import pytest

from trace_core import CTree
from trace_core.events import JudgeDecided
from trace_core.invariants import check_invariants

pytestmark = pytest.mark.llama

TALK = [
    ("I'm training for a marathon in October.", "Great! Build mileage gradually."),
    ("How many km per week should I run?", "Start near 30 km and add 10% weekly."),
    ("What should I eat before long runs?", "Carbohydrates like oats or bananas."),
    ("My knee hurts after running.", "Rest, ice it, and see a physio if it persists."),
    ("Let's switch topics: how do I repot a fern?", "Use a slightly larger pot and fresh soil."),
    ("How often do ferns need water?", "Keep the soil moist but not soggy."),
    ("Can ferns live in a bathroom?", "Yes, they like the humidity."),
    ("What is a Python decorator?", "A function that wraps another function."),
    ("Show me functools.wraps usage.", "Decorate the inner wrapper with @wraps(func)."),
    ("How do I type-hint a decorator?", "Use ParamSpec and TypeVar."),
    ("Back to the marathon: what about tapering?", "Cut volume in the last two or three weeks."),
    ("Should I carb-load?", "Yes, in the two days before the race."),
    ("What shoes do you recommend?", "Get fitted at a running store."),
    ("My fern has brown tips.", "Raise humidity and avoid tap water with chlorine."),
    ("Is fertiliser needed for ferns?", "A diluted feed monthly in spring and summer."),
    ("What's a Python context manager?", "An object with __enter__ and __exit__."),
    ("How does contextlib.contextmanager work?", "It turns a generator into a context manager."),
    ("Explain async context managers.", "They define __aenter__ and __aexit__."),
    ("Race day: what should I eat for breakfast?", "Something light and familiar, 3 hours before."),
    ("How do I pace the first 10 km?", "Slightly slower than goal pace."),
]


def test_twenty_exchanges_with_the_llm_judge(llama_server, minilm, tmp_path):
    path = str(tmp_path / "e2e.db")
    tree = CTree.open(path, judge="llm", base_url=llama_server.base_url, model=llama_server.model_name,
                      embed_fn=minilm, llm_timeout=60)
    seen = []
    tree.on_event(seen.append)
    for user, assistant in TALK:
        tree.add([{"role": "user", "content": user}, {"role": "assistant", "content": assistant}])
        check_invariants(tree)
    decisions = [e for e in seen if isinstance(e, JudgeDecided)]
    assert len(decisions) == 20
    assert all(d.judge in ("llm", "embedding") and d.reason for d in decisions)
    # the real server was asked (json_object after its refusal of json_schema)
    assert tree.judges.llm.llm.stats.calls >= 20
    snap = tree.snapshot()
    tree.vdb.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=minilm)
    check_invariants(reopened)
    assert reopened.snapshot() == snap

"""End to end against a real llama.cpp server (gemma-3-270m, a tiny base model that
answers poorly: exactly what exercises every fallback)."""

from __future__ import annotations

import pytest

from trace_core import CTree
from trace_core.events import JudgeDecided
from trace_core.invariants import check_invariants

pytestmark = pytest.mark.llama

# Eight exchanges over three subjects and a return to the first: each placement takes
# one or two grammar-constrained calls, about 5 tokens/s with gemma's 262k vocabulary on
# one core, so twenty exchanges took ten minutes here.
TALK = [
    ("I'm training for a marathon in October.", "Great! Build mileage gradually."),
    ("How many km per week should I run?", "Start near 30 km and add 10% weekly."),
    ("Let's switch topics: how do I repot a fern?", "Use a slightly larger pot and fresh soil."),
    ("How often do ferns need water?", "Keep the soil moist but not soggy."),
    ("What is a Python decorator?", "A function that wraps another function."),
    ("Show me functools.wraps usage.", "Decorate the inner wrapper with @wraps(func)."),
    ("Back to the marathon: what about tapering?", "Cut volume in the last two or three weeks."),
    ("Race day: what should I eat for breakfast?", "Something light and familiar, 3 hours before."),
]


def test_a_conversation_with_the_llm_judge(llama_server, minilm, tmp_path):
    path = str(tmp_path / "e2e.db")
    tree = CTree.open(path, judge="llm", base_url=llama_server.base_url, model=llama_server.model_name,
                      embed_fn=minilm, llm_timeout=60)
    seen = []
    tree.on_event(seen.append)
    for user, assistant in TALK:
        tree.add([{"role": "user", "content": user}, {"role": "assistant", "content": assistant}])
        check_invariants(tree)
    decisions = [e for e in seen if isinstance(e, JudgeDecided)]
    assert len(decisions) == len(TALK)
    assert all(d.judge in ("llm", "embedding") and d.reason for d in decisions)
    # the real server was asked (json_object after its refusal of json_schema)
    assert tree.judges.llm.llm.stats.calls >= len(TALK)
    snap = tree.snapshot()
    tree.vdb.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=minilm)
    check_invariants(reopened)
    assert reopened.snapshot() == snap

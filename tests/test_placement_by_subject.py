"""An exchange is placed by what the user asked: a reply that echoes the prompt or says
"I don't know." carries no subject (with the embedded gemma-270m every reply echoed its
system prompt, and four unrelated questions became one topic)."""

from __future__ import annotations

import numpy as np
import pytest

from trace_core import CTree
from trace_core.embedders import EXCHANGE_USER_WEIGHT, exchange_vector

QUESTIONS = [
    "My sister lives in Trondheim and she keeps bees. What do bees need in winter?",
    "How often should I feed my sourdough starter?",
    "I'm training for a marathon in October. How long should my long runs be?",
    "What's the capital of Australia?",
]
ECHO = ("You are a helpful assistant with long-term memory of this conversation. "
        "Use the memory below when it is relevant.")


@pytest.mark.parametrize("reply", [ECHO, "I don't know."])
def test_unrelated_questions_with_the_same_empty_reply_are_separate_topics(minilm, tmp_path, reply):
    tree = CTree.open(str(tmp_path / "s.db"), embed_fn=minilm, judge="embedding")
    for q in QUESTIONS:
        tree.add([{"role": "user", "content": q}, {"role": "assistant", "content": reply}])
    topics = [x.parent for x in tree.exchanges]
    assert len({t.node_id for t in topics}) == 4, [t.topic_name for t in topics]
    tree.vdb.close()
    # reopened, the exchange vectors are made the same way from the stored role vectors
    again = CTree.open(str(tmp_path / "s.db"), embed_fn=minilm, judge="embedding")
    for x in again.exchanges:
        u, a = minilm.embed_batch([x.user, x.assistant])
        assert np.allclose(again.structure.vectors.exchange(x.index), exchange_vector(u, a), atol=1e-5)
    again.vdb.close()


def test_the_users_side_counts_more():
    u, a = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    v = exchange_vector(u, a)
    assert abs(float(np.linalg.norm(v)) - 1) < 1e-6 and v[0] / v[1] == pytest.approx(EXCHANGE_USER_WEIGHT)

"""The inspector's "you said" lists a topic's own questions only. After a merge a
topic's exchange range spans other topics' exchanges (a new user's trial: the tomato
topic listed two sourdough questions)."""

from __future__ import annotations

from nexus.treeinfo import topic_detail
from trace_core import CTree

TALK = [
    ("How long should sourdough dough proof in the fridge?", "Twelve to seventy-two hours, cold."),
    ("What should I eat before a long marathon training run?", "Oats and a banana two hours before."),
    ("My tomato plants have yellow leaves at the bottom.", "Likely nitrogen; feed them and water at the base."),
    ("What flour is best for sourdough bread?", "Strong bread flour with a little rye."),
    ("How many miles a week for a first marathon?", "Build to about forty miles at the peak."),
    ("Should I prune the suckers on my tomato plants?", "Yes, on cordon tomatoes pinch them out."),
    ("Why is my sourdough starter smelling of acetone?", "It is hungry: feed it more often."),
    ("How do I taper before the marathon?", "Cut the mileage by a third each of the last three weeks."),
    ("When should I pick the tomatoes?", "When they are fully coloured and give a little."),
]


def own_questions(topic) -> set[str]:
    out, stack = set(), [topic]
    while stack:
        node = stack.pop()
        for child in node.children:
            if child.is_topic:
                stack.append(child)
            else:
                out.add(" ".join(child.user.split()))
    return out


def test_you_said_lists_only_the_topics_own_questions(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    try:
        for user, reply in TALK:
            tree.add([{"role": "user", "content": user}, {"role": "assistant", "content": reply}])
        tree.reorganize()
        spanning = 0
        for topic in list(tree.root.iter_topics()):
            if topic is tree.root:
                continue
            detail = topic_detail(tree, topic.node_id)
            own = own_questions(topic)
            assert set(detail.asked) <= own, (topic.name, detail.asked, own)
            in_range = {" ".join(x.user.split()) for x in tree.exchanges[detail.start:detail.end + 1]}
            spanning += bool(in_range - own)
        assert spanning, "no topic's range spans another topic's exchanges: the test shows nothing"
    finally:
        tree.close()

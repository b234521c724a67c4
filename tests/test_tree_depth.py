"""Depth grows like a B+tree's: new topics are filed at the bottom level of the grouping
nodes, so the oldest exchange is no deeper than the newest and depth is logarithmic in
the number of topics (before, every split of ROOT pushed every older topic a level down:
44 levels at 1,000 exchanges, 422 at 10,000)."""

from __future__ import annotations

import math
import random

from trace_core import CTree
from trace_core.invariants import check_invariants

SUBJECTS = ["sailing", "chess", "bread", "taxes", "violin", "garden", "python", "marathon", "cats", "opera",
            "bicycle", "pottery", "astronomy", "knitting", "mortgage", "climbing", "sushi", "poetry", "drones",
            "beekeeping"]


def grow(tree: CTree, n: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    i = 0
    while i < n:
        s = rng.choice(SUBJECTS)
        for _ in range(rng.randint(3, 7)):
            if i >= n:
                break
            words = " ".join(rng.choice([s, s + "s", "my " + s, s + " plan", s + " notes"]) for _ in range(6))
            tree.add([{"role": "user", "content": f"About {s}: {words} {i}?"},
                      {"role": "assistant", "content": f"On {s}, {words}."}])
            i += 1


def depth(node) -> int:
    d = 0
    while node.parent is not None:
        node, d = node.parent, d + 1
    return d


def test_depth_is_logarithmic_and_even(tmp_path, hash_embed):
    path = tmp_path / "deep.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=hash_embed)
    grow(tree, 600)
    topics = sum(1 for _ in tree.root.iter_topics()) - 1
    exchanges = sorted(tree.root.iter_messages(), key=lambda m: m.index)
    depths = [depth(m) for m in exchanges]
    assert topics > 100  # enough topics that ROOT split many times
    # a B+tree with nodes at least a third full: depth ~ log(topics) / log(max_children / 3)
    bound = 3 + math.ceil(math.log(topics) / math.log(max(2.0, tree.max_children / 3)))
    assert max(depths) <= bound, (max(depths), bound)
    assert abs(depths[0] - depths[-1]) <= 2  # the oldest exchange did not sink
    assert any(t.is_group for t in tree.root.topic_children)
    check_invariants(tree)
    tree.close()

    # groups are kept in the file: after reopening, new topics are filed at the bottom still
    tree = CTree.open(str(path), judge="embedding", embed_fn=hash_embed)
    assert any(t.is_group for t in tree.root.topic_children)
    grow(tree, 150, seed=4)
    newest = max(tree.root.iter_messages(), key=lambda m: m.index)
    assert depth(newest) <= bound + 1
    assert all(not t.message_children for t in tree.root.iter_topics() if t.is_group)  # groups hold topics only
    check_invariants(tree)
    tree.close()

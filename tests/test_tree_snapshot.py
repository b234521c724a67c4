"""The tree pane's snapshot is taken incrementally (nexus/treesnap.py) and the inspector's
centroids are updated incrementally (nexus/centroids.py): after every kind of change
both must equal what a fresh copy of the tree gives, while unchanged rows stay the
same objects. A real session file; a hash embedder (structure matters here, not meaning)."""

from __future__ import annotations

import random

import numpy as np

from nexus.centroids import CentroidIndex, centroid_index
from nexus.treesnap import TreeSnapshot, _snapshot, snapshot_unlocked, take_snapshot
from trace_core import CTree

SUBJECTS = ["sourdough starter flour water", "marathon training pace miles", "tax return deadline form",
            "garden tomatoes seedlings soil", "python asyncio event loop", "violin practice scales bow"]


def exchange(rng: random.Random, i: int) -> list[dict]:
    words = rng.choice(SUBJECTS).split()
    q = " ".join(rng.choice(words) for _ in range(6)) + f" question {i}?"
    return [{"role": "user", "content": q}, {"role": "assistant", "content": " ".join(reversed(q.split()))}]


def assert_same(inc: TreeSnapshot, fresh: TreeSnapshot) -> None:
    assert inc.topics == fresh.topics
    assert inc.order == fresh.order
    for f in ("root_id", "exchanges", "archived", "max_children", "depth", "per_level", "fanout", "problem",
              "root_children"):
        assert getattr(inc, f) == getattr(fresh, f), f
    assert inc.nodes == fresh.nodes
    for tid in fresh.order[:50]:
        assert inc.depth_of(tid) == len(fresh.path(tid)) - 1


def assert_centroids(tree: CTree, snap: TreeSnapshot, index: CentroidIndex) -> None:
    fresh = CentroidIndex()
    fresh.update(tree, snap)
    assert index.slot.keys() == fresh.slot.keys() == snap.topics.keys()
    for tid in snap.order:
        np.testing.assert_allclose(index.unit[index.slot[tid]], fresh.unit[fresh.slot[tid]], atol=1e-5)
    for tid in snap.order[1:6]:
        assert [t for t, _ in index.nearest(snap, tid, 5)] == [t for t, _ in fresh.nearest(snap, tid, 5)]


def test_incremental_snapshots_and_centroids_equal_a_fresh_copy(tmp_path, hash_embed):
    rng = random.Random(3)
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=hash_embed)
    for i in range(150):
        tree.add(exchange(rng, i))
    first = take_snapshot(tree)
    with tree.lock:
        centroid_index(tree, first)
    assert take_snapshot(tree) is first  # nothing changed: the same snapshot
    remade, prev = [], first
    for i in range(150, 230):
        tree.add(exchange(rng, i))
        snap = take_snapshot(tree)
        with tree.lock:
            assert_same(snap, _snapshot(tree, None))
            index = centroid_index(tree, snap)
            assert index.made == snap.remade or index.made == len(snap.topics)
        kept = [tid for tid, row in snap.topics.items() if prev.topics.get(tid) is row]
        assert kept and all(snap.topics[t].children == prev.topics[t].children for t in kept)
        remade.append(snap.remade)
        prev = snap
    assert len(snap.topics) > 60 and max(remade) < len(snap.topics) / 2  # the path, not the tree
    with tree.lock:
        assert_centroids(tree, snap, index)

    def check() -> TreeSnapshot:
        s = take_snapshot(tree)
        with tree.lock:
            assert_same(s, _snapshot(tree, None))
            assert_centroids(tree, s, centroid_index(tree, s))
        return s

    # the newest exchange replaced in place: same node, new text, its path's sums follow
    tree.replace_last([{"role": "user", "content": "violin bow rosin strings"},
                       {"role": "assistant", "content": "violin bow rosin"}])
    s = check()
    parent = tree.exchange_view()[-1].parent
    assert s.topics[parent.node_id] is not prev.topics[parent.node_id]
    tree.archive([x for x in tree.exchange_view() if x.parent is not None][10:40])
    s = check()
    assert s.archived == 30
    tree.restore_archived()
    check()
    res = tree.reorganize(similarity_threshold=0.3)
    assert res["merged"] > 0  # a reorganisation that changed something
    s = check()
    tree.undo_reorganize()
    check()
    tree.close()


def test_a_cycle_is_named_not_followed(tmp_path, hash_embed):
    rng = random.Random(5)
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=hash_embed)
    for i in range(40):
        tree.add(exchange(rng, i))
    take_snapshot(tree)
    top = tree.root.topic_children[0]
    deepest = list(top.iter_topics())[-1]
    deepest.children.append(top)  # a cycle
    try:
        s = take_snapshot(tree)
        assert "reached twice" in s.problem and top.node_id in s.problem
        assert s.topics[top.node_id].exchanges_below > 0
    finally:
        deepest.children.remove(top)
    assert not take_snapshot(tree).problem
    with tree.lock:
        assert_same(snapshot_unlocked(tree), _snapshot(tree, None))
    tree.close()

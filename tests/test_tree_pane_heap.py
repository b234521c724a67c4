"""A large tree on screen is frozen out of the collector's full passes (nexus/heap.py);
switching to another tree must still free the old one (its parent <-> children cycles
need the collector). Real session files, a hash embedder (structure matters here)."""

from __future__ import annotations

import gc
import random
import weakref

from textual.app import App

from nexus import treepane
from nexus.treepane import MemoryTree
from trace_core import CTree


class Junk:
    me: object = None


class PaneApp(App):
    def compose(self):
        yield MemoryTree(id="tree")


def session(path, embed, n: int) -> CTree:
    rng = random.Random(n)
    tree = CTree.open(str(path), judge="embedding", embed_fn=embed)
    words = "sourdough flour marathon pace tax form garden tomato violin bow".split()
    for i in range(n):
        q = " ".join(rng.choice(words) for _ in range(5)) + f" {i}?"
        tree.add([{"role": "user", "content": q}, {"role": "assistant", "content": q.upper()}])
    return tree


async def until(pilot, cond, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.1)):
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError("not reached")


async def test_a_large_tree_is_frozen_and_freed_when_the_pane_lets_it_go(tmp_path, hash_embed, monkeypatch):
    monkeypatch.setattr(treepane, "FREEZE_AT", 20)
    gc.unfreeze()
    app = PaneApp()
    async with app.run_test() as pilot:
        pane = app.query_one(MemoryTree)
        first = session(tmp_path / "a.db", hash_embed, 30)
        pane.refresh_tree(first)
        await until(pilot, lambda: pane._frozen_for is not None)  # (a closure over the tree would keep it)
        assert pane._frozen_for is first and gc.get_freeze_count() > 0
        gone = weakref.ref(first.root)
        first.close()
        del first

        second = session(tmp_path / "b.db", hash_embed, 25)
        junk = Junk()  # a reference cycle alive at the freeze, dropped after it
        junk.me = junk
        dropped = weakref.ref(junk)
        pane.refresh_tree(second)  # the first tree is let go: thawed, collected, then frozen again
        await until(pilot, lambda: pane._frozen_for is second)
        assert gc.get_freeze_count() > 0
        assert gone() is None, "the tree the pane let go is still alive (kept frozen)"

        # a reorganisation drops nodes: thawed, collected, frozen again
        del junk
        gc.collect()
        assert dropped() is not None  # frozen: not collected
        pane.mark_reorganization({})
        assert pane._frozen_for is None
        await until(pilot, lambda: pane._frozen_for is second)
        assert dropped() is None and gc.get_freeze_count() > 0

        small = session(tmp_path / "c.db", hash_embed, 5)
        pane.refresh_tree(small)  # below the size: thawed, not frozen again
        await pilot.pause(0.3)
        assert pane._frozen_for is None and gc.get_freeze_count() == 0
        second.close()
        small.close()
    assert gc.get_freeze_count() == 0

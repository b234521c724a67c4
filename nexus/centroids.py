"""Every topic's unit centroid, kept per tree and brought up to date incrementally, so the
inspector's "nearest branches" is one matrix-vector product.

The matrix is made once (exchange vectors summed into their topics, then each topic
into its parent, deepest first), then only the topics whose snapshot row is a new
object get their sum made again: an unchanged row stands for an unchanged subtree
(``nexus.treesnap``), so after a new exchange that is its path, a handful of rows.
Used under the tree's lock.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from .treesnap import TreeSnapshot

if TYPE_CHECKING:
    from trace_core import CTree


class CentroidIndex:
    def __init__(self) -> None:
        self.rows: dict[str, object] = {}  # topic id -> the snapshot row its sum was made from
        self.slot: dict[str, int] = {}  # topic id -> its row in the matrices
        self.free: list[int] = []
        self.sums = np.zeros((0, 0), dtype=np.float32)  # vector sums of the exchanges below
        self.unit = np.zeros((0, 0), dtype=np.float32)  # the sums, unit length (0 where empty or free)
        self.used = np.zeros(0, dtype=bool)
        self.made = 0  # sums made at the last update (for tests and the bench)

    def update(self, tree: CTree, snap: TreeSnapshot) -> None:
        topics = snap.topics
        todo = [tid for tid, row in topics.items() if self.rows.get(tid) is not row]
        if len(todo) > 64 or not self.rows:  # (sorting many by depth costs more than a build)
            self._build(tree, snap)
            return
        gone = self.rows.keys() - topics.keys()
        for tid in gone:
            i = self.slot.pop(tid)
            del self.rows[tid]
            self.free.append(i)
            self.used[i] = False
            self.unit[i] = 0.0
        todo.sort(key=lambda t: -snap.depth_of(t))  # children before their parents
        for tid in todo:
            i = self.slot.get(tid)
            if i is None:
                i = self.slot[tid] = self._take()
            row = topics[tid]
            s = np.zeros(self.sums.shape[1], dtype=np.float32)
            for c in row.children:
                s += self.sums[self.slot[c.node_id]] if c.is_topic else tree.exchange_vector(c.index)
            self._set(i, s)
            self.rows[tid] = row
        self.made = len(todo)

    def _build(self, tree: CTree, snap: TreeSnapshot) -> None:
        order = snap.order
        slot = {tid: i for i, tid in enumerate(order)}
        xi, ti = [], []
        for i, tid in enumerate(order):
            for c in snap.topics[tid].children:
                if not c.is_topic:
                    xi.append(c.index)
                    ti.append(i)
        vecs = [tree.exchange_vector(j) for j in xi]
        dim = len(vecs[0]) if vecs else 1
        sums = np.zeros((max(len(order), 1), dim), dtype=np.float32)
        if vecs:
            np.add.at(sums, np.array(ti), np.array(vecs, dtype=np.float32))
        topics = snap.topics
        for tid in reversed(order[1:]):  # depth first order reversed: children before parents
            sums[slot[topics[tid].parent_id]] += sums[slot[tid]]
        self.sums = sums
        norms = np.linalg.norm(sums, axis=1)
        self.unit = sums / np.where(norms == 0, 1.0, norms)[:, None]
        self.used = np.ones(len(sums), dtype=bool)
        self.slot, self.free = slot, []
        self.rows = dict(topics)
        self.made = len(order)

    def _take(self) -> int:
        if self.free:
            return self.free.pop()
        n = len(self.sums)
        grow = max(16, n // 2)
        self.sums = np.vstack([self.sums, np.zeros((grow, self.sums.shape[1]), dtype=np.float32)])
        self.unit = np.vstack([self.unit, np.zeros((grow, self.unit.shape[1]), dtype=np.float32)])
        self.used = np.concatenate([self.used, np.zeros(grow, dtype=bool)])
        self.free = list(range(n + grow - 1, n, -1))
        return n

    def _set(self, i: int, s: np.ndarray) -> None:
        self.sums[i] = s
        norm = float(np.linalg.norm(s))
        self.unit[i] = s / norm if norm else 0.0
        self.used[i] = True

    def nearest(self, snap: TreeSnapshot, node_id: str, k: int) -> list[tuple[str, float]]:
        """The ``k`` other topics nearest ``node_id`` by centroid cosine: ROOT, its ancestors
        and its descendants excluded (they contain it or are contained)."""
        # einsum, not ``@``: a BLAS product wakes OpenBLAS's thread pool, whose threads
        # spin on the second core for a while after it (measured: they took as much CPU as
        # the UI thread during an inspection); this loop stays in the calling thread
        sims = np.einsum("ij,j->i", self.unit, self.unit[self.slot[node_id]])
        sims[~self.used] = -np.inf
        at = snap.order.index(node_id)
        out = snap.order[at: at + 1 + snap.topics[node_id].topics_below]  # itself and its descendants
        sims[[self.slot[t] for t in out]] = -np.inf
        sims[[self.slot[row.node_id] for row in snap.path(node_id)]] = -np.inf
        k = min(k, int(np.isfinite(sims).sum()))
        if k <= 0:
            return []
        kth = sims[np.argpartition(-sims, k - 1)[k - 1]]
        top = np.flatnonzero(sims >= kth - 1e-5)  # ties (a group and its only child) kept...
        by_slot = {i: t for t, i in self.slot.items()}
        where = {t: i for i, t in enumerate(snap.order)}.__getitem__ if len(top) > 64 else snap.order.index
        ranked = sorted((-round(float(sims[j]), 5), where(by_slot[int(j)]), int(j)) for j in top)
        return [(by_slot[j], float(sims[j])) for _, _, j in ranked[:k]]  # ...and broken by tree order


_indexes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tree -> its CentroidIndex


def centroid_index(tree: CTree, snap: TreeSnapshot) -> CentroidIndex:
    """The tree's index, up to date with ``snap`` (the caller holds the lock)."""
    index = _indexes.get(tree)
    if index is None:
        index = _indexes[tree] = CentroidIndex()
    index.update(tree, snap)
    return index

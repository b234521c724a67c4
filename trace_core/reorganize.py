"""Consolidation: merge similar frozen branches, archive trivial exchanges, undo.

The four axioms of TRACE:
1. chronological guard — the older topic absorbs the newer, never the reverse;
2. frozen state — nothing on the active ancestry path moves (checked again under the
   tree's lock at apply time, so an ``add()`` running in another thread is safe);
3. cosine threshold — only pairs at or above ``similarity_threshold``;
4. veto — the judge (LLM, or the embedding judge's stricter rule) may refuse.

Everything a reorganisation changes is written in one transaction, with a journal
entry holding the tree as it was: a kill midway leaves the tree before or after, and
``undo_reorganize()`` restores the before state exactly.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import events as ev
from .archive import detach, fix_current, prune_empty, recompute_ranges
from .embedders import as_embedder, normalise
from .judges import TopicDigest
from .nodes import MessageNode, TopicNode
from .persist import _row

if TYPE_CHECKING:
    from .tree import CTree

TRIVIAL_WORDS = 20


class UndoError(RuntimeError):
    pass


@dataclass
class MergeRecord:
    into: str
    absorbed: str
    into_name: str
    absorbed_name: str
    similarity: float
    judge: str
    reason: str


@dataclass
class ReorganizeResult:
    merged: int = 0
    pruned: int = 0
    skipped: int = 0
    vetoed: int = 0
    candidates: int = 0
    pairs: int = 0
    duration_secs: float = 0.0
    op_id: str = ""
    merges: list[MergeRecord] = field(default_factory=list)
    vetoes: list[MergeRecord] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "merged": self.merged, "pruned": self.pruned, "skipped": self.skipped, "vetoed": self.vetoed,
            "candidates": self.candidates, "pairs": self.pairs, "duration_secs": self.duration_secs,
            "op_id": self.op_id,
            "merges": [m.__dict__ for m in self.merges], "vetoes": [m.__dict__ for m in self.vetoes],
        }


def _word_count(text: str) -> int:
    return len(text.split())


def is_trivial(x: MessageNode) -> bool:
    return _word_count(x.user) < TRIVIAL_WORDS and _word_count(x.assistant) < TRIVIAL_WORDS


def similar_pairs(vectors: np.ndarray, threshold: float, block: int = 1024,
                  max_per_row: int | None = None) -> list[tuple[int, int, float]]:
    """All ``i < j`` with cosine ≥ threshold, best first; blockwise so 10,000 topics never
    need a 10,000 × 10,000 matrix at once. With ``max_per_row``, only each topic's
    nearest ``max_per_row`` neighbours are kept: merges chain through them, and a
    history of near-duplicates no longer yields millions of pairs."""
    n = len(vectors)
    out_i, out_j, out_s = [], [], []
    for start in range(0, n, block):
        sims = vectors[start : start + block] @ vectors.T
        rows_n = sims.shape[0]
        sims[np.arange(rows_n), np.arange(start, start + rows_n)] = -np.inf  # not with itself
        if max_per_row is not None and max_per_row < n - 1:
            top = np.argpartition(-sims, max_per_row - 1, axis=1)[:, :max_per_row]
            rows = np.repeat(np.arange(rows_n), max_per_row)
            cols = top.ravel()
            keep = sims[rows, cols] >= threshold
            rows, cols = rows[keep], cols[keep]
        else:
            rows, cols = np.nonzero(sims >= threshold)
        s = sims[rows, cols]
        i, j = rows + start, cols
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        out_i.append(lo)
        out_j.append(hi)
        out_s.append(s)
    if not out_i:
        return []
    i, j, s = np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s)
    if len(i) == 0:
        return []
    # each pair once (it may come from both of its rows)
    key = i.astype(np.int64) * n + j
    _, first = np.unique(key, return_index=True)
    i, j, s = i[first], j[first], s[first]
    order = np.lexsort((j, i, -s))
    return [(int(i[k]), int(j[k]), float(s[k])) for k in order]


def _ancestor_ids(t: TopicNode) -> set[str]:
    ids = set()
    cur = t.parent
    while cur is not None:
        ids.add(cur.node_id)
        cur = cur.parent
    return ids


def _balance_in_place(tree: "CTree", node: TopicNode) -> list[TopicNode]:
    """Fan-out after a merge, touching only ``node``'s own (frozen) subtree: excess
    exchanges and excess subtopics are grouped under new topics inside ``node``."""
    created: list[TopicNode] = []
    m = tree.max_children
    for kind in ("message", "topic"):
        while True:
            kids = node.message_children if kind == "message" else node.topic_children
            if len(kids) <= m:
                break
            size = max(2, -(-len(kids) // m))  # ceil: at most m groups
            groups = [kids[k : k + size] for k in range(0, len(kids), size)]
            for part, g in enumerate(groups, 1):
                if len(g) == 1:
                    continue
                # parts of a merged topic: named after it (naming each from its text cost
                # a second per 10,000 merges, and says less)
                t = TopicNode(f"{node.topic_name} · part {part}", created_index=min(
                    c.created_index if c.is_topic else c.index for c in g))
                for c in g:
                    node.remove_child(c)
                    t.add_child(c)
                t.sort_children()
                t.recompute_range()
                node.add_child(t)
                created.append(t)
            node.sort_children()
    for t in list(created):
        created += _balance_in_place(tree, t)
    return created


class Reorganizer:
    neighbours = 10  # each branch is compared with its 10 most similar branches

    def __init__(self, tree: "CTree") -> None:
        self.tree = tree

    def run(self, embed_fn=None, similarity_threshold: float = 0.55, prune_trivial_leaves: bool = False,
            max_rounds: int = 3) -> dict:
        tree = self.tree
        started = time.perf_counter()
        res = ReorganizeResult(op_id=uuid.uuid4().hex[:12])
        embedder = as_embedder(embed_fn) or tree.embed_fn
        state = {"before": None, "absorbers": set(), "vetoed": set(), "touched": []}
        # merged topics are compared again (their content changed): a few rounds
        for _round in range(max_rounds):
            if not self._round(embed_fn, embedder, similarity_threshold, res, state):
                break
        with tree._lock:
            if prune_trivial_leaves:
                if state["before"] is None:
                    state["before"] = snapshot_rows(tree)
                path = set(tree.active_path())
                for x in list(tree._exchanges):
                    if x.archived or x.parent is None or x.parent in path or not is_trivial(x):
                        continue
                    state["touched"] += [t for t in tree.get_ancestors(x.parent) if t is not tree.root]
                    detach(tree, x)
                    res.pruned += 1
            if res.merged or res.pruned:
                self._settle(state["touched"])
                self._commit(state["before"], res)
        res.duration_secs = time.perf_counter() - started
        tree.events.emit(ev.ReorganizeFinished(res.merged, res.pruned, res.skipped, res.duration_secs))
        return res.as_dict()

    def _round(self, embed_fn, embedder, threshold: float, res: ReorganizeResult, state: dict) -> int:
        """One pass of phases 1-4 and the merges they approve; returns how many merged."""
        tree = self.tree
        emit = tree.events.emit
        # phases 1-2: frozen branches, missing summaries, vectors (under the lock: brief)
        with tree._lock:
            tree.refresh_frozen_summaries()
            path = set(tree.active_path())
            # branches that hold exchanges (or absorbed others); pure fan-out grouping
            # nodes are not merged
            frozen = [t for t in tree.root.iter_topics() if t is not tree.root and t not in path
                      and (t.message_children or t.node_id in state["absorbers"])]
            # later rounds compare the same branches again (now with their merged
            # content), never the grouping topics a merge created inside an absorber
            if "pool" in state:
                frozen = [t for t in frozen if t.node_id in state["pool"]]
            else:
                state["pool"] = {t.node_id for t in frozen}
            if len(frozen) < 2:
                return 0
            if embed_fn is not None:
                vectors = normalise(embedder.embed_batch([f"{t.topic_name}. {t.summary}" for t in frozen]))
            else:
                vectors = tree.summary_vectors(frozen)
            raw_text = {t.node_id: " ".join(f"{u} {a}" for u, a in tree._texts(t, 4)) for t in frozen}
        res.candidates = max(res.candidates, len(frozen))
        emit(ev.ReorganizeProgress("embedded", len(frozen), len(frozen)))

        # phase 3: all similar pairs at once
        pairs = similar_pairs(np.asarray(vectors, dtype=np.float32), threshold, max_per_row=self.neighbours)
        res.pairs += len(pairs)
        emit(ev.ReorganizeProgress("compared", len(pairs), len(pairs)))

        # phase 4: the axioms, pair by pair (vetoes may call the LLM: outside the lock)
        approved: list[tuple[TopicNode, TopicNode, float, str, str]] = []
        into: dict[str, TopicNode] = {}  # absorbed topic -> the topic that absorbed it
        pos = {t.node_id: k for k, t in enumerate(frozen)}
        digests: dict[str, TopicDigest] = {}

        def digest(t: TopicNode) -> TopicDigest:
            d = digests.get(t.node_id)
            if d is None:
                d = digests[t.node_id] = TopicDigest(t.topic_name, t.summary, vectors[pos[t.node_id]],
                                                     raw_text[t.node_id])
            return d

        def find(t: TopicNode) -> TopicNode:
            while t.node_id in into:
                t = into[t.node_id]
            return t

        for k, (i, j, sim) in enumerate(pairs):
            a, b = find(frozen[i]), find(frozen[j])
            if a is b:
                continue  # already one topic
            src_a, src_b = frozen[i], frozen[j]
            key = tuple(sorted((src_a.node_id, src_b.node_id)))
            if key in state["vetoed"]:
                continue  # vetoed in an earlier round: do not ask again
            if a.node_id in _ancestor_ids(b) or b.node_id in _ancestor_ids(a):
                res.skipped += 1  # a topic never absorbs its own ancestor or descendant
                continue
            # axiom 1: the older absorbs the newer
            older, newer = (a, b) if (a.created_index, a.start_index) <= (b.created_index, b.start_index) else (b, a)
            # axiom 4: the veto judges the two branches that matched
            ok, why, judge = tree.judges.approve_merge(digest(src_a), digest(src_b),
                                                       lambda texts: embedder.embed_batch(texts))
            if not ok:
                state["vetoed"].add(key)
                res.vetoed += 1
                res.vetoes.append(MergeRecord(older.node_id, newer.node_id, src_a.topic_name, src_b.topic_name,
                                              sim, judge, why))
                continue
            approved.append((older, newer, sim, judge, why))
            into[newer.node_id] = older
            if k % 50 == 0:
                emit(ev.ReorganizeProgress("judged", k + 1, len(pairs)))

        # apply (under the lock; axiom 2 checked again: add() may have run meanwhile)
        merged = 0
        with tree._lock:
            if approved and state["before"] is None:
                state["before"] = snapshot_rows(tree)
            path = set(tree.active_path())
            live = set(tree.root.iter_topics())
            for older, newer, sim, judge, why in approved:
                older, newer = find(older), newer
                if older in path or newer in path or older not in live or newer not in live:
                    res.skipped += 1  # axiom 2: it joined the active path meanwhile
                    continue
                if older.node_id in _ancestor_ids(newer) or newer.node_id in _ancestor_ids(older):
                    res.skipped += 1
                    continue
                old_parent = newer.parent
                for c in list(newer.children):
                    newer.remove_child(c)
                    older.add_child(c)
                old_parent.remove_child(newer)
                live.discard(newer)
                prune_empty(tree, old_parent)
                state["touched"].append(older)  # sorted once in _settle, not per merge
                state["absorbers"].add(older.node_id)
                merged += 1
                res.merges.append(MergeRecord(older.node_id, newer.node_id, older.topic_name, newer.topic_name,
                                              sim, judge, why))
            res.merged += merged
            if merged:
                self._settle(state["touched"])
        return merged

    def _settle(self, touched: list[TopicNode]) -> None:
        """Ranges, fan-out (inside the touched frozen subtrees only), current node, sums,
        summaries. Called under the tree's lock."""
        tree = self.tree
        recompute_ranges(tree.root)  # sorts every child list once
        live_topics = set(tree.root.iter_topics())
        for t in dict.fromkeys(touched):
            if t in live_topics:
                _balance_in_place(tree, t)
        recompute_ranges(tree.root)
        if tree.current_node not in set(tree.root.iter_topics()):
            fix_current(tree)
        tree._invalidate_sums()
        live_topics = set(tree.root.iter_topics())
        tree._stale.update(t for t in touched if t in live_topics)
        tree.refresh_frozen_summaries()

    def _commit(self, before: dict, res: ReorganizeResult) -> None:
        tree = self.tree
        tree._last_reorganize = (res.op_id, before)
        if tree._store is None:
            return
        db = tree._vdb
        with db.transaction():
            entries = [("before", before)] + [("merge", m.__dict__) for m in res.merges]
            if res.pruned:
                entries.append(("pruned", {"count": res.pruned}))
            db.journal_extend(res.op_id, entries)
            for x in tree._archived_nodes:
                db.set_exchange_archived(x.node_id, True)
            tree._store.write_structure(tree)


def snapshot_rows(tree: "CTree") -> dict:
    rows = []
    for t in tree.root.iter_topics():
        rows.append(_row(t, t.parent.node_id if t.parent else None))
        rows += [_row(c, t.node_id) for c in t.children if not c.is_topic]
    rows += [_row(m, None) for m in tree._archived_nodes]
    return {"rows": rows, "current": tree.current_node.node_id, "exchanges": len(tree._exchanges)}


def undo_reorganize(tree: "CTree") -> dict:
    """Restore the tree as it was before the last reorganisation, node for node."""
    with tree._lock:
        op_id, before = None, None
        if tree._store is not None:
            op_id = tree._vdb.journal_last_op()
            if op_id:
                entries = tree._vdb.journal_entries(op_id)
                before = next((p for k, p in entries if k == "before"), None)
        elif getattr(tree, "_last_reorganize", None):
            op_id, before = tree._last_reorganize
        if not op_id or before is None:
            raise UndoError("there is no reorganisation to undo")
        if before["exchanges"] != len(tree._exchanges):
            raise UndoError(
                f"{len(tree._exchanges) - before['exchanges']} exchange(s) were added after the last "
                "reorganisation; undoing it now would not restore the tree exactly, so it was not undone"
            )
        rebuild_from_rows(tree, before)
        if tree._store is not None:
            db = tree._vdb
            with db.transaction():
                for x in tree._exchanges:
                    db.set_exchange_archived(x.node_id, x.archived)
                tree._store.write_structure(tree)
                db.journal_delete(op_id)
        tree._last_reorganize = None
        return {"undone": op_id}


def rebuild_from_rows(tree: "CTree", state: dict) -> None:
    by_index = {x.index: x for x in tree._exchanges}
    nodes: dict = {}
    parents: dict = {}
    for nid, pid, kind, name, summary, start, end, xidx, created, _ts, archived in state["rows"]:
        if kind == "topic":
            node = tree.root if nid == tree.root.node_id else TopicNode(name or "", node_id=nid)
            node.topic_name, node.summary = name or "", summary or ""
            node.start_index, node.end_index = start, end
            node.created_index = created if created is not None else start
            node.children = []
            node.parent = None
        else:
            node = by_index[xidx]
            node.node_id = nid
            node.parent = None
            node.archived = bool(archived)
            node.home_id = pid if archived else ""
        nodes[nid] = node
        parents[nid] = pid
    for nid, node in nodes.items():
        pid = parents[nid]
        if pid is None or (not node.is_topic and node.archived):
            continue
        parent = nodes[pid]
        parent.children.append(node)
        node.parent = parent
    for n in nodes.values():
        if n.is_topic:
            n.sort_children()
    tree._archived_nodes = [x for x in tree._exchanges if x.archived]
    tree.current_node = nodes.get(state["current"], tree.root)
    tree._invalidate_sums()
    tree._stale.clear()


__all__ = ["Reorganizer", "UndoError", "undo_reorganize", "similar_pairs", "is_trivial"]

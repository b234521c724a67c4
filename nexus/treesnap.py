"""The tree's structure as the pane shows it: a snapshot copied under the tree's lock.

A snapshot is plain frozen data, so the UI renders a consistent picture while
``add()`` or a reorganisation runs in a worker thread. It is taken incrementally: the
previous snapshot of the same tree is compared node by node (children, name, summary,
range, parent, depth, active) in one walk, and only the rows that differ — with the
counts of their ancestors — are made again; every other row is the previous one, the
same object. So a new exchange in a 10,000-exchange tree makes its path's rows, not
15,000, and a row that is the same object as before stands for an unchanged subtree
(the pane and the centroid matrix rely on that). Walks are iterative and cycle-safe: a
corrupted tree is reported, never looped on.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from .text import counted

if TYPE_CHECKING:
    from trace_core import CTree
    from trace_core.nodes import MessageNode, TopicNode


class TopicRow(NamedTuple):
    """One topic as the pane shows it (a tuple: thousands are kept per snapshot)."""

    node_id: str
    name: str
    summary: str
    start: int
    end: int
    parent_id: str | None
    # the children in tree order, copied at snapshot time; only their immutable parts
    # (node_id, is_topic, an exchange's index and text) are read afterwards
    children: tuple
    exchanges_below: int
    active: bool
    topics_below: int = 0  # its descendants: the rows right after it in ``TreeSnapshot.order``

    @property
    def topic_ids(self) -> list[str]:
        return [c.node_id for c in self.children if c.is_topic]

    @property
    def exchange_children(self) -> list[MessageNode]:
        return [c for c in self.children if not c.is_topic]


@dataclass(frozen=True)
class TreeSnapshot:
    topics: dict[str, TopicRow]
    root_id: str
    exchanges: int  # all exchanges, archived included
    archived: int
    max_children: int
    depth: int  # levels of topics below ROOT
    per_level: tuple[int, ...]  # topics at depth 1, 2, ...
    fanout: dict[int, int]  # children per topic (topics + exchanges) -> how many topics
    problem: str = ""  # a structural fault met while copying (a cycle, a shared node)
    nodes: dict = field(default_factory=dict, compare=False, repr=False)  # topic id -> the live TopicNode
    root_children: tuple = field(default=(), compare=False, repr=False)  # to tell whether it is current
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # derived data, once made
    order: tuple = field(default=(), compare=False, repr=False)  # topic ids depth first, ROOT first
    last: tuple = field(default=(), compare=False, repr=False)  # the newest exchange: (node, its messages)
    remade: int = field(default=0, compare=False)  # rows made for this snapshot (the rest are the last one's)
    active_ids: tuple = field(default=(), compare=False, repr=False)  # the active path's topic ids

    def is_current(self, tree: CTree) -> bool:
        """Nothing added, archived or regrouped at the top since (the caller holds the
        lock). A reorganisation deeper down is followed by a new snapshot in Nexus."""
        return (self.exchanges == len(tree.exchange_view()) and self.archived == len(tree.archived)
                and self.root_children == tuple(tree.root.children))

    @property
    def topic_count(self) -> int:
        return len(self.topics) - 1  # ROOT is not a topic of the conversation

    def depth_of(self, node_id: str) -> int:
        """Levels below ROOT (ROOT: 0)."""
        return max(0, len(self.path(node_id)) - 1)

    def path(self, node_id: str) -> list[TopicRow]:
        """ROOT ... node, top down."""
        out = []
        row = self.topics.get(node_id)
        while row is not None and len(out) <= len(self.topics):
            out.append(row)
            row = self.topics.get(row.parent_id) if row.parent_id else None
        return out[::-1]

    def title(self, room: int | None = None, scenario: str | None = None) -> str:
        """The pane's title; in less than its length of ``room``, the counts alone,
        exchanges first (the depth went, and then the exchange count was cut). The tree
        of a running ``scenario`` is named as its scratch tree (the app's title still
        names the user's session), down to "scratch · N exchanges" in a narrow pane."""
        exchanges = counted(self.exchanges - self.archived, 'exchange')
        topics = counted(self.topic_count, 'topic')
        if scenario is not None:
            name = f"{scenario} (scratch)" if scenario else "scratch"
            tries = [f"scenario {name} · {exchanges} · {topics}", f"scenario {name} · {exchanges}",
                     f"{name} · {exchanges}", f"scratch · {exchanges}"]
        else:
            # then the exchanges alone, then their number: "130 exchange…" was cut mid-word (a trial)
            tries = [f"depth {self.depth} · {topics} · {exchanges}", f"{exchanges} · {topics}", exchanges,
                     f"{self.exchanges - self.archived:,}"]
        return next((t for t in tries if room is None or len(t) <= room), tries[-1])



def try_lock(tree: CTree, fn, *args):
    """``fn(tree, *args)`` under the tree's lock if it is free now, else ``None`` (the UI
    thread never waits for an ``add()`` that may be asking a model)."""
    lock: threading.RLock = tree.lock
    if not lock.acquire(blocking=False):
        return None
    try:
        return fn(tree, *args)
    finally:
        lock.release()


def take_snapshot(tree: CTree) -> TreeSnapshot:
    with tree.lock:
        return snapshot_unlocked(tree)


_last: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tree -> its last snapshot


def snapshot_unlocked(tree: CTree) -> TreeSnapshot:
    """The tree's structure now (the caller holds the lock), sharing every unchanged row
    with the last snapshot of this tree; that snapshot itself when nothing changed."""
    prev = _last.get(tree)
    snap = _snapshot(tree, prev if prev is not None and not prev.problem else None)
    _last[tree] = snap
    return snap


def _snapshot(tree: CTree, prev: TreeSnapshot | None) -> TreeSnapshot:
    old = prev.topics if prev is not None else {}
    old_nodes = prev.nodes if prev is not None else {}
    active_path = tree.active_path()
    active = {id(t) for t in active_path}
    xs = tree.exchange_view()
    last = (xs[-1], xs[-1].messages) if len(xs) else ()
    # The one full walk, top down: a row whose own fields (and node) are the same is kept
    # for now (an undone reorganisation brings back new nodes under the same ids).
    # Depth is not a field of the row: a regrouping near the top moves hundreds of levels
    # one step down without changing what they hold.
    # (The loop is the cost of a snapshot at 10,000 exchanges: its names are bound locally
    # and the active flag is compared after it, for the two active paths only.)
    changed: dict[str, tuple] = {}  # topic id -> (node, parent id, depth, children)
    ids: list[str] = []
    push_id = ids.append
    get_row, get_node = old.get, old_nodes.get
    per_level = [0] * (len(prev.per_level) + 2 if prev is not None else 16)  # topics per depth (ROOT at 0)
    fanout = [0] * (2 * tree.max_children + 2)  # topics per number of children
    root = tree.root
    stack: list[tuple[TopicNode, str | None, int]] = [(root, None, 0)]
    pop, push = stack.pop, stack.append
    limit = 2 * len(xs) + len(old) + 64  # more topics than this: a cycle (checked below)
    while stack:
        t, pid, depth = pop()
        tid = t.node_id
        push_id(tid)
        kids = tuple(t.children)
        row = get_row(tid)
        if (row is None or row.children != kids or row.end != t.end_index or row.name != t.topic_name
                or row.summary != t.summary or row.start != t.start_index or row.parent_id != pid
                or get_node(tid) is not t):
            changed[tid] = (t, pid, depth, kids)
        try:
            per_level[depth] += 1
        except IndexError:  # deeper than so far
            per_level.extend([0] * (depth + 1 - len(per_level)))
            per_level[depth] += 1
        try:
            fanout[len(kids)] += 1
        except IndexError:  # wider than the bound (a tree being repaired)
            fanout.extend([0] * (len(kids) + 1 - len(fanout)))
            fanout[len(kids)] += 1
        depth += 1
        for c in reversed(kids):
            if c.is_topic:
                push((c, tid, depth))
        if len(ids) > limit:
            break
    present = set(ids)
    if len(ids) > limit or len(present) != len(ids):  # a cycle or a shared child: the careful walk names it
        return _damaged(tree, root)
    active_ids = tuple(t.node_id for t in active_path)
    if prev is not None:  # topics that joined or left the active path, their rows otherwise the same
        for tid in set(active_ids).symmetric_difference(prev.active_ids):
            if tid in changed or tid not in present or tid not in old:
                continue
            t, depth, up = old_nodes[tid], 0, old_nodes[tid].parent
            while up is not None and depth <= len(ids):
                depth, up = depth + 1, up.parent
            changed[tid] = (t, old[tid].parent_id, depth, old[tid].children)
    if prev is not None and last and prev.last and last[0] is prev.last[0] and last[1] is not prev.last[1]:
        parent = last[0].parent  # the newest exchange was replaced in place (same node, new text)
        if parent is not None and parent.node_id in old and parent.node_id not in changed:
            r = old[parent.node_id]
            changed[parent.node_id] = (parent, r.parent_id, prev.depth_of(parent.node_id), r.children)
    per_level[0] -= 1  # ROOT is not a topic of the conversation
    fanout[len(root.children)] -= 1
    while len(per_level) > 1 and not per_level[-1]:
        per_level.pop()
    if prev is not None and not changed and len(ids) == len(old) and prev.exchanges == len(xs) \
            and prev.archived == len(tree.archived) and prev.max_children == tree.max_children \
            and prev.per_level == tuple(per_level[1:]):
        return prev
    # The ancestors of a changed row keep their own fields but not their counts; their
    # depth is the changed row's minus the steps up.
    redo = dict(changed)
    for _t, pid, depth, _k in changed.values():
        while pid is not None and pid not in redo:
            r = old[pid]
            depth -= 1
            redo[pid] = (None, r.parent_id, depth, r.children)
            pid = r.parent_id
    made: dict[str, TopicRow] = {}
    nodes = dict(prev.nodes) if prev is not None else {}
    for tid, (t, pid, _depth, kids) in sorted(redo.items(), key=lambda kv: -kv[1][2]):  # children first
        n_x = n_t = 0
        for c in kids:
            if c.is_topic:
                r = made.get(c.node_id) or old[c.node_id]
                n_x += r.exchanges_below
                n_t += r.topics_below + 1
            else:
                n_x += 1
        if t is None:  # only the counts below it changed
            made[tid] = old[tid]._replace(exchanges_below=n_x, topics_below=n_t)
            continue
        made[tid] = TopicRow(tid, t.topic_name, t.summary, t.start_index, t.end_index, pid, kids, n_x,
                             id(t) in active, n_t)
        nodes[tid] = t
    rows = {**old, **made}
    if len(rows) > len(ids):  # topics gone (merged, emptied): drop their rows
        for tid in rows.keys() - present:
            del rows[tid]
            nodes.pop(tid, None)
    while len(per_level) > 1 and not per_level[-1]:
        per_level.pop()
    return TreeSnapshot(rows, root.node_id, len(xs), len(tree.archived), tree.max_children, len(per_level) - 1,
                        tuple(per_level[1:]), {k: n for k, n in enumerate(fanout) if n > 0}, "", nodes,
                        tuple(root.children), order=tuple(ids), last=last, remade=len(made), active_ids=active_ids)


def _damaged(tree: CTree, root: TopicNode) -> TreeSnapshot:
    """A tree with a cycle or a shared child: copied whole, each topic once, and the fault
    named (the next snapshot starts afresh)."""
    active = {id(t) for t in tree.active_path()}
    order: list[tuple[TopicNode, str | None, int]] = []
    seen: set[int] = set()
    problem = ""
    stack: list[tuple[TopicNode, str | None, int]] = [(root, None, 0)]
    while stack:
        t, pid, depth = stack.pop()
        if id(t) in seen:
            problem = problem or f"topic {t.topic_name!r} ({t.node_id}) is reached twice: a cycle or a shared child"
            continue
        seen.add(id(t))
        order.append((t, pid, depth))
        stack.extend((c, t.node_id, depth + 1) for c in reversed(t.children) if c.is_topic)
    rows: dict[str, TopicRow] = {}
    fanout: Counter = Counter()
    per_level: Counter = Counter()
    for t, pid, depth in reversed(order):  # children before parents
        kids = tuple(t.children)
        n_x = n_t = 0
        for c in kids:
            r = rows.get(c.node_id) if c.is_topic else None
            n_x += r.exchanges_below if r else (0 if c.is_topic else 1)
            n_t += r.topics_below + 1 if r else 0
        rows[t.node_id] = TopicRow(t.node_id, t.topic_name, t.summary, t.start_index, t.end_index, pid, kids, n_x,
                                   id(t) in active, n_t)
        if t is not root:
            fanout[len(kids)] += 1
            per_level[depth] += 1
    depth = max(per_level) if per_level else 0
    xs = tree.exchange_view()
    return TreeSnapshot(rows, root.node_id, len(xs), len(tree.archived), tree.max_children, depth,
                        tuple(per_level[d] for d in range(1, depth + 1)), dict(sorted(fanout.items())), problem,
                        {t.node_id: t for t, _, _ in order}, tuple(root.children),
                        order=tuple(t.node_id for t, _, _ in order))


def find_topics(snap: TreeSnapshot, words: str) -> list[str]:
    """Topics whose name or summary hold every word (case-insensitive), in tree order."""
    terms = [w.lower() for w in words.split() if w.strip()]
    if not terms:
        return []
    out = []
    for tid, row in snap.topics.items():
        if tid == snap.root_id:
            continue
        hay = f"{row.name}\n{row.summary}".lower()
        if all(w in hay for w in terms):
            out.append(tid)
    return sorted(out, key=lambda t: (snap.topics[t].start, snap.depth_of(t)))

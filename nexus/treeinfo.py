"""What the tree pane, the inspector and /check show, computed without widgets.

Everything here reads the live tree under its lock and returns plain frozen data, so
the UI renders a consistent picture while ``add()`` or a reorganisation runs in a
worker thread. Walks are iterative and cycle-safe: a corrupted tree is reported,
never looped on.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from trace_core import CTree
    from trace_core.nodes import MessageNode, TopicNode


# --- the structure, as the pane shows it --------------------------------------------------


class TopicRow(NamedTuple):
    """One topic as the pane shows it (a tuple: 5,000 of them are made per snapshot)."""

    node_id: str
    name: str
    summary: str
    start: int
    end: int
    parent_id: str | None
    depth: int
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
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # the centroid matrix, once made
    order: tuple = field(default=(), compare=False, repr=False)  # topic ids depth first, ROOT first

    def is_current(self, tree: CTree) -> bool:
        """Nothing added, archived or regrouped at the top since (the caller holds the
        lock). A reorganisation deeper down is followed by a new snapshot in Nexus."""
        return (self.exchanges == len(tree.exchange_view()) and self.archived == len(tree.archived)
                and self.root_children == tuple(tree.root.children))

    @property
    def topic_count(self) -> int:
        return len(self.topics) - 1  # ROOT is not a topic of the conversation

    def path(self, node_id: str) -> list[TopicRow]:
        """ROOT ... node, top down."""
        out = []
        row = self.topics.get(node_id)
        while row is not None and len(out) <= len(self.topics):
            out.append(row)
            row = self.topics.get(row.parent_id) if row.parent_id else None
        return out[::-1]

    def title(self) -> str:
        return f"depth {self.depth} · {self.topic_count} topics · {self.exchanges - self.archived} exchanges"


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


def snapshot_unlocked(tree: CTree) -> TreeSnapshot:
    """Copy the structure (the caller holds the lock). One pass, bottom-up counts."""
    active = {id(t) for t in tree.active_path()}
    order: list[tuple[TopicNode, str | None, int]] = []
    seen: set[int] = set()
    problem = ""
    stack: list[tuple[TopicNode, str | None, int]] = [(tree.root, None, 0)]
    while stack:
        t, pid, depth = stack.pop()
        if id(t) in seen:
            problem = problem or f"topic {t.topic_name!r} ({t.node_id}) is reached twice: a cycle or a shared child"
            continue
        seen.add(id(t))
        order.append((t, pid, depth))
        for c in reversed(t.children):
            if c.is_topic:
                stack.append((c, t.node_id, depth + 1))
    counts: dict[int, int] = {}
    below: dict[int, int] = {}
    rows: dict[str, TopicRow] = {}
    nodes: dict[str, TopicNode] = {}
    fanout: Counter = Counter()
    per_level: Counter = Counter()
    root = tree.root
    for t, pid, depth in reversed(order):  # children before parents
        kids = tuple(t.children)
        xs = ts = 0
        for c in kids:
            if c.is_topic:
                xs += counts.get(id(c), 0)
                ts += below.get(id(c), 0) + 1
            else:
                xs += 1
        counts[id(t)] = xs
        below[id(t)] = ts
        nodes[t.node_id] = t
        rows[t.node_id] = TopicRow(t.node_id, t.topic_name, t.summary, t.start_index, t.end_index, pid, depth,
                                   kids, xs, id(t) in active, ts)
        if t is not root:
            fanout[len(kids)] += 1
            per_level[depth] += 1
    depth = max(per_level) if per_level else 0
    return TreeSnapshot(rows, tree.root.node_id, len(tree.exchange_view()), len(tree.archived), tree.max_children,
                        depth, tuple(per_level[d] for d in range(1, depth + 1)), dict(sorted(fanout.items())),
                        problem, nodes, tuple(root.children), order=tuple(t.node_id for t, _, _ in order))


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
    return sorted(out, key=lambda t: (snap.topics[t].start, snap.topics[t].depth))


# --- /check -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Health:
    ok: bool
    problem: str  # the violated invariant, naming the node ("" when ok)
    snapshot: TreeSnapshot

    def lines(self) -> list[str]:
        s = self.snapshot
        head = ("Tree check: all invariants hold." if self.ok
                else f"Tree check FAILED: {self.problem}")
        levels = " ".join(str(n) for n in s.per_level) or "none"
        if len(s.per_level) > 1:
            levels = f"{levels}  (levels 1-{len(s.per_level)})"
        fan = ", ".join(f"{k}: {n}" for k, n in s.fanout.items()) or "none"
        return [
            head,
            f"  exchanges      {s.exchanges - s.archived} in the tree, {s.archived} archived",
            f"  topics         {s.topic_count}, depth {s.depth}",
            f"  per level      {levels}",
            f"  fan-out        children per topic → topics: {fan}",
            f"  bound          {s.max_children} topics and {s.max_children} exchanges per topic",
        ]


def check_health(tree: CTree) -> Health:
    """The invariants of ``trace_core.invariants`` on the live tree, and its shape. A
    violation (or a tree too broken to check) comes back as ``problem``, never raised."""
    from trace_core.invariants import InvariantError, check_invariants

    with tree.lock:
        snap = snapshot_unlocked(tree)
        if snap.problem:  # check_invariants would walk a cycle forever
            return Health(False, snap.problem, snap)
        try:
            check_invariants(tree)
        except InvariantError as exc:
            return Health(False, str(exc), snap)
        except Exception as exc:  # the check itself tripped on the damage
            return Health(False, f"the tree is damaged where the check could not follow: {type(exc).__name__} "
                                 f"{exc}", snap)
    return Health(True, "", snap)


# --- the inspector -------------------------------------------------------------------------


@dataclass(frozen=True)
class Neighbour:
    node_id: str
    path: str
    cosine: float


@dataclass(frozen=True)
class RetrievalScores:
    query: str
    similarity: float | None  # the branch's own score, when it was a matched branch
    keyword: float | None
    injected: int  # exchanges below it that went into the prompt
    best_fused: float


@dataclass(frozen=True)
class TopicDetail:
    node_id: str
    name: str
    summary: str
    start: int
    end: int
    depth: int
    path: str
    topic_children: int
    exchange_children: int
    max_children: int
    frozen: bool
    exchanges_below: int
    nearest: tuple[Neighbour, ...]
    retrieval: RetrievalScores | None
    is_root: bool = False


@dataclass(frozen=True)
class ExchangeDetail:
    index: int
    node_id: str
    messages: tuple[tuple[str, str], ...]  # (role, content), in full
    timestamp: str
    path: str
    archived: bool
    status: str  # "superseded by #j" | "updates #i" | "" | "unknown"
    parts: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())  # role -> indexed sentence parts


_sum_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tree -> {topic id: (key, vector sum)}


def _centroids(tree: CTree, snap: TreeSnapshot) -> tuple[dict[str, int], np.ndarray]:
    """Every topic's unit centroid, one matrix row each in depth-first order (so a
    topic's descendants are the rows right after it), made once per snapshot.

    Sums are built bottom-up from the exchanges' vectors, children first (no recursion:
    a 10,000-exchange tree can be 400 levels deep), and a topic's sum is reused from
    the last matrix while its exchanges (count, range, children) are the same: after a
    new exchange only the active path is summed again. The caller holds the lock."""
    got = snap.cache.get("centroids")
    if got is not None:
        return got
    old = _sum_cache.get(tree, {})
    sums: dict[str, np.ndarray] = {}
    new: dict[str, tuple] = {}
    zero = None
    for tid in reversed(snap.order):
        r = snap.topics[tid]
        key = (r.exchanges_below, r.start, r.end, len(r.children))
        hit = old.get(tid)
        if hit is not None and hit[0] == key:
            s = hit[1]
        else:
            parts = [sums[c.node_id] if c.is_topic else tree.exchange_vector(c.index) for c in r.children]
            if parts:
                s = np.sum(parts, axis=0, dtype=np.float32)
            else:
                if zero is None:
                    zero = np.zeros_like(tree.exchange_vector(0)) if len(tree.exchange_view()) else np.zeros(1)
                s = zero
        sums[tid] = s
        new[tid] = (key, s)
    _sum_cache[tree] = new
    mat = np.array([sums[tid] for tid in snap.order], dtype=np.float32)
    norms = np.linalg.norm(mat, axis=1)
    norms[norms == 0] = 1.0
    got = snap.cache["centroids"] = ({tid: i for i, tid in enumerate(snap.order)}, mat / norms[:, None])
    return got


def nearest_branches(tree: CTree, snap: TreeSnapshot, node_id: str, k: int = 5) -> tuple[Neighbour, ...]:
    """The ``k`` other branches nearest the topic by centroid cosine (ROOT, its
    ancestors and its descendants excluded: they contain it or are contained)."""
    pos, mat = _centroids(tree, snap)
    i = pos[node_id]
    sims = mat @ mat[i]
    sims[i : i + 1 + snap.topics[node_id].topics_below] = -np.inf
    sims[[pos[row.node_id] for row in snap.path(node_id)]] = -np.inf  # ROOT and the ancestors
    k = min(k, int(np.isfinite(sims).sum()))
    if k <= 0:
        return ()
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.argsort(-sims[top], kind="stable")]
    return tuple(Neighbour(snap.order[j], tree.thread_path(snap.nodes[snap.order[j]]), float(sims[j])) for j in top)


def _retrieval_for(tree: CTree, topic: TopicNode, report) -> RetrievalScores | None:
    if report is None:
        return None
    path = next((p for p in report.paths if p.node_id == topic.node_id), None)
    fused, n = 0.0, 0
    for x in report.exchanges:
        if x.index >= len(tree.exchange_view()):
            continue
        cur = tree.exchange_view()[x.index].parent
        while cur is not None and cur is not topic:
            cur = cur.parent
        if cur is topic:
            n += 1
            fused = max(fused, x.fused)
    if path is None and not n:
        return None
    return RetrievalScores(report.query, path.similarity if path else None, path.keyword if path else None, n, fused)


def topic_detail(tree: CTree, node_id: str, report=None, k: int = 5,
                 snap: TreeSnapshot | None = None) -> TopicDetail | None:
    """``snap``: the pane's snapshot, reused while current (its centroid matrix too)."""
    with tree.lock:
        if snap is None or not snap.is_current(tree):
            snap = snapshot_unlocked(tree)
        row = snap.topics.get(node_id)
        if row is None:
            return None
        topic = snap.nodes[node_id]
        is_root = node_id == snap.root_id
        kids = row.children
        n_topics = sum(1 for c in kids if c.is_topic)
        return TopicDetail(
            node_id, row.name, row.summary, row.start, row.end, row.depth, tree.thread_path(topic), n_topics,
            len(kids) - n_topics, snap.max_children, not row.active and not is_root, row.exchanges_below,
            () if is_root else nearest_branches(tree, snap, node_id, k), _retrieval_for(tree, topic, report),
            is_root)


def exchange_detail(tree: CTree, index: int, synth=None) -> ExchangeDetail | None:
    from trace_core.store import message_id

    with tree.lock:
        if not 0 <= index < len(tree.exchange_view()):
            return None
        x = tree.exchange_view()[index]
        if x.parent is not None:
            path = tree.thread_path(x)
        else:
            home = tree.find(x.home_id) if x.home_id else None
            path = f"(archived from {tree.thread_path(home)})" if home is not None else "(archived)"
        status = _status(tree, index, synth)
        parts: list[tuple[str, tuple[str, ...]]] = []
        if tree.vdb is not None:
            ids = [message_id(index, m["role"]) for m in x.messages]
            found = tree.vdb.message_parts(ids)
            for m, mid in zip(x.messages, ids):
                texts = found.get(mid, ([], None))[0]
                parts.append((m["role"], tuple(texts)))
        return ExchangeDetail(index, x.node_id, tuple((m["role"], m["content"]) for m in x.messages), x.timestamp,
                              path, x.archived, status, tuple(parts))


_finders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tree -> its Supersessions (cached cues)


def _status(tree: CTree, index: int, synth) -> str:
    """Superseded, or an update of earlier exchanges, by retrieval's own rule
    (``trace_core.synthesis.selection.Supersessions``); the caller holds the lock."""
    try:
        from trace_core.synthesis.selection import Supersessions
    except ImportError:
        return "unknown"
    params = getattr(synth, "params", None)
    similarity = getattr(params, "supersede_similarity", None)
    finder = _finders.get(tree)
    if finder is None or (similarity is not None and finder.similarity != similarity):
        if similarity is None:
            from trace_core.synthesis.params import SynthesisParams

            similarity = SynthesisParams().supersede_similarity
        finder = _finders[tree] = Supersessions(similarity)
    xs = tree.exchange_view()
    try:
        newer, _ = finder.find([index], xs, tree.exchange_vector)
        if newer.get(index):
            return "superseded by " + ", ".join(f"#{j}" for j in newer[index])
        if index and finder.update_cues(xs)[index]:  # it reads as an update: of which?
            older, _ = finder.find(list(range(index)), xs, tree.exchange_vector)
            updates = sorted(i for i, js in older.items() if index in js)
            if updates:
                return "updates " + ", ".join(f"#{i}" for i in updates)
        return ""
    except Exception:  # a status is a nicety: never fail the inspector for it
        return "unknown"


# --- reorganisations -----------------------------------------------------------------------


def reorganize_lines(res: dict) -> list[tuple[str, str]]:
    """Every merge and every veto of a reorganisation, with its reason, for the log."""
    out = []
    for m in res.get("merges", []):
        out.append((f"merge: {m['into_name']!r} absorbed {m['absorbed_name']!r} (cos {m['similarity']:.2f}, "
                    f"{m['judge']} judge: {m['reason']})", "info"))
    for m in res.get("vetoes", []):
        out.append((f"veto: {m['into_name']!r} and {m['absorbed_name']!r} kept apart (cos {m['similarity']:.2f}, "
                    f"{m['judge']} judge: {m['reason']})", "info"))
    return out


def reorganize_marks(res: dict) -> dict[str, str]:
    """Topic id -> what it absorbed, for the pane."""
    marks: dict[str, list[str]] = {}
    for m in res.get("merges", []):
        marks.setdefault(m["into"], []).append(f"{m['absorbed_name']} (cos {m['similarity']:.2f})")
    return {tid: "absorbed " + ", ".join(names) for tid, names in marks.items()}

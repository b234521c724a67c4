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
    lock: threading.RLock = tree._lock
    if not lock.acquire(blocking=False):
        return None
    try:
        return fn(tree, *args)
    finally:
        lock.release()


def take_snapshot(tree: CTree) -> TreeSnapshot:
    with tree._lock:
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
    rows: dict[str, TopicRow] = {}
    fanout: Counter = Counter()
    per_level: Counter = Counter()
    root = tree.root
    for t, pid, depth in reversed(order):  # children before parents
        kids = tuple(t.children)
        xs = 0
        for c in kids:
            xs += counts.get(id(c), 0) if c.is_topic else 1
        counts[id(t)] = xs
        rows[t.node_id] = TopicRow(t.node_id, t.topic_name, t.summary, t.start_index, t.end_index, pid, depth,
                                   kids, xs, id(t) in active)
        if t is not root:
            fanout[len(kids)] += 1
            per_level[depth] += 1
    depth = max(per_level) if per_level else 0
    return TreeSnapshot(rows, tree.root.node_id, len(tree._exchanges), len(tree._archived_nodes), tree.max_children,
                        depth, tuple(per_level[d] for d in range(1, depth + 1)), dict(sorted(fanout.items())),
                        problem)


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

    with tree._lock:
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


def nearest_branches(tree: CTree, topic: TopicNode, k: int = 5) -> tuple[Neighbour, ...]:
    """The ``k`` other branches nearest ``topic`` by centroid cosine (its ancestors and
    descendants excluded: they contain it or are contained). Caller holds the lock."""
    mine = {id(t) for t in topic.iter_topics()}
    cur = topic
    while cur is not None:
        mine.add(id(cur))
        cur = cur.parent
    others = [t for t in tree.root.iter_topics() if id(t) not in mine]
    if not others:
        return ()
    mat = np.array([tree._node_vector(t) for t in others], dtype=np.float32)
    sims = mat @ np.asarray(tree._node_vector(topic), dtype=np.float32)
    top = np.argsort(-sims, kind="stable")[:k]
    return tuple(Neighbour(others[i].node_id, tree.thread_path(others[i]), float(sims[i])) for i in top)


def _retrieval_for(tree: CTree, topic: TopicNode, report) -> RetrievalScores | None:
    if report is None:
        return None
    path = next((p for p in report.paths if p.node_id == topic.node_id), None)
    fused, n = 0.0, 0
    for x in report.exchanges:
        if x.index >= len(tree._exchanges):
            continue
        cur = tree._exchanges[x.index].parent
        while cur is not None and cur is not topic:
            cur = cur.parent
        if cur is topic:
            n += 1
            fused = max(fused, x.fused)
    if path is None and not n:
        return None
    return RetrievalScores(report.query, path.similarity if path else None, path.keyword if path else None, n, fused)


def topic_detail(tree: CTree, node_id: str, report=None, k: int = 5) -> TopicDetail | None:
    with tree._lock:
        topic = tree.root if node_id == tree.root.node_id else next(
            (t for t in tree.root.iter_topics() if t.node_id == node_id), None)
        if topic is None:
            return None
        is_root = topic is tree.root
        depth = len(tree.get_ancestors(topic)) - 1
        return TopicDetail(
            topic.node_id, topic.topic_name, topic.summary, topic.start_index, topic.end_index, depth,
            tree.thread_path(topic), len(topic.topic_children), len(topic.message_children), tree.max_children,
            tree.is_frozen(topic) and not is_root, sum(1 for _ in topic.iter_messages()),
            () if is_root else nearest_branches(tree, topic, k), _retrieval_for(tree, topic, report), is_root)


def exchange_detail(tree: CTree, index: int, synth=None) -> ExchangeDetail | None:
    from trace_core.store import message_id

    with tree._lock:
        if not 0 <= index < len(tree._exchanges):
            return None
        x = tree._exchanges[index]
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
    xs = tree._exchanges
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

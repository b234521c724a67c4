"""What the inspector, /check and the reorganisation log show, computed without widgets.

Everything here reads the live tree under its lock and returns plain frozen data, so
the UI renders a consistent picture while ``add()`` or a reorganisation runs in a
worker thread. The structure the tree pane shows is ``nexus.treesnap``'s snapshot.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .centroids import centroid_index
from .text import counted, quoted
from .treesnap import TreeSnapshot, snapshot_unlocked

if TYPE_CHECKING:
    from trace_core import CTree
    from trace_core.nodes import TopicNode


# --- /check -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Health:
    ok: bool
    problem: str  # the violated invariant, naming the node ("" when ok)
    snapshot: TreeSnapshot

    @property
    def head(self) -> str:
        return "Tree check: all invariants hold." if self.ok else f"Tree check FAILED: {self.problem}"

    def lines(self) -> list[str]:
        return [self.head] + [f"  {k:<15}{v}" for k, v in self.rows()]

    def rows(self) -> list[tuple[str, str]]:
        s = self.snapshot
        levels = " ".join(str(n) for n in s.per_level) or "none"
        if len(s.per_level) > 1:
            levels = f"{levels}  (levels 1-{len(s.per_level)})"
        # "2 topics with 1 child, 1 with 2" (it read "children per topic → topics: 1: 2, 2: 1")
        fan = ", ".join(f"{n if i else counted(n, 'topic')} with {k} {'child' if k == 1 else 'children'}"
                        for i, (k, n) in enumerate(sorted(s.fanout.items()))) or "none"
        return [
            ("exchanges", f"{s.exchanges - s.archived} in the tree, {s.archived} archived"),
            ("topics", f"{s.topic_count}, depth {s.depth}"),
            ("per level", levels),
            ("fan-out", fan),
            ("bound", f"{s.max_children} topics and {s.max_children} exchanges per topic"),
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
    # the evidence of those exchanges: their best message cosine and BM25 (the fused score
    # is relative to the other candidates, and reads 0.0 for the weakest: a trial asked why)
    best_vector: float = 0.0
    best_keyword: float = 0.0


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
    # the user's first messages in it: a summary is the most informative sentences, and
    # a small model's rare-word replies can leave out what the user said
    asked: tuple[str, ...] = ()


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
    indexed: bool = True  # the idle sentence index has reached this exchange


def nearest_branches(tree: CTree, snap: TreeSnapshot, node_id: str, k: int = 5) -> tuple[Neighbour, ...]:
    """The ``k`` other branches nearest the topic by centroid cosine (ROOT, its
    ancestors and its descendants excluded: they contain it or are contained). The
    caller holds the lock."""
    near = centroid_index(tree, snap).nearest(snap, node_id, k)
    return tuple(Neighbour(tid, tree.thread_path(snap.nodes[tid]), cos) for tid, cos in near)


def warm_centroids(tree: CTree) -> None:
    """Make the tree's centroid matrix ahead of the first inspection (in a worker)."""
    with tree.lock:
        centroid_index(tree, snapshot_unlocked(tree))


def _retrieval_for(tree: CTree, topic: TopicNode, report) -> RetrievalScores | None:
    if report is None:
        return None
    path = next((p for p in report.paths if p.node_id == topic.node_id), None)
    below = [x for x in report.exchanges
             if x.index < len(tree.exchange_view()) and _under(tree.exchange_view()[x.index], topic)]
    if path is None and not below:
        return None
    return RetrievalScores(report.query, path.similarity if path else None, path.keyword if path else None,
                           len(below), max((x.fused for x in below), default=0.0),
                           max((x.vector for x in below), default=0.0), max((x.keyword for x in below), default=0.0))


def topic_detail(tree: CTree, node_id: str, report=None, k: int = 5,
                 snap: TreeSnapshot | None = None) -> TopicDetail | None:
    """``snap``: the pane's snapshot, reused while current."""
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
            node_id, row.name, row.summary, row.start, row.end, snap.depth_of(node_id), tree.thread_path(topic),
            n_topics,
            len(kids) - n_topics, snap.max_children, not row.active and not is_root, row.exchanges_below,
            () if is_root else nearest_branches(tree, snap, node_id, k), _retrieval_for(tree, topic, report),
            is_root, () if is_root else _asked(tree, topic, row.start, row.end))


ASKED_SHOWN = 3


def _under(node, topic: TopicNode) -> bool:
    cur = node.parent
    while cur is not None and cur is not topic:
        cur = cur.parent
    return cur is topic


def _asked(tree: CTree, topic: TopicNode, start: int, end: int) -> tuple[str, ...]:
    """The user's messages of a topic's first exchanges (archived ones left out). Only
    its own: after a merge its range spans other topics' exchanges too (trial: a tomato
    topic listed two sourdough questions)."""
    xs = tree.exchange_view()
    out = []
    for i in range(max(start, 0), min(end + 1, len(xs))):
        if xs[i].user.strip() and _under(xs[i], topic):
            out.append(" ".join(xs[i].user.split()))
            if len(out) == ASKED_SHOWN:
                break
    return tuple(out)


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
        indexed = index < len(tree.exchanges) - tree.pending_parts()
        return ExchangeDetail(index, x.node_id, tuple((m["role"], m["content"]) for m in x.messages), x.timestamp,
                              path, x.archived, status, tuple(parts), indexed)


_finders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tree -> its Supersessions (cached cues)


def _status(tree: CTree, index: int, synth) -> str:
    """Superseded, or an update of earlier exchanges, by retrieval's own rule
    (``trace_core.synthesis.selection.Supersessions``); the caller holds the lock."""
    try:
        from trace_core.synthesis.selection import Supersessions
    except ImportError:
        return "unknown"
    from trace_core.synthesis.params import SynthesisParams

    params = getattr(synth, "params", None) or SynthesisParams()
    similarity, shared = params.supersede_similarity, params.supersede_shared_similarity
    finder = _finders.get(tree)
    if finder is None or (finder.similarity, finder.shared_similarity) != (similarity, min(shared, similarity)):
        finder = _finders[tree] = Supersessions(similarity, shared)
    xs = tree.exchange_view()
    revision = tree.structure.text_revision  # an /edit or /forget changed a text: cues read again
    lookup = getattr(synth, "message_vector_lookup", None)
    try:
        vectors = lookup() if lookup is not None else None  # the message-level rule, as retrieval
        newer = finder.find([index], xs, tree.exchange_vector, message_vector=vectors, revision=revision)
        if newer.get(index):
            return "superseded by " + ", ".join(f"#{j}" for j in newer[index])
        if index and finder.update_cues(xs, revision)[index]:  # it reads as an update: of which?
            older = finder.find(list(range(index)), xs, tree.exchange_vector, message_vector=vectors,
                                revision=revision)
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
        into, absorbed = _merge_names(m)
        out.append((f"merge: {into} absorbed {absorbed} (cos {m['similarity']:.2f}{_judged(m)}, "
                    f"{m['judge']} judge: {m['reason']})", "info"))
    for m in res.get("vetoes", []):
        into, absorbed = _merge_names(m)
        out.append((f"veto: {into} and {absorbed} kept apart (cos {m['similarity']:.2f}{_judged(m)}, "
                    f"{m['judge']} judge: {m['reason']})", "info"))
    return out


def _merge_names(m: dict) -> tuple[str, str]:
    """The two topics of a merge or veto, quoted; with the exchanges each held when their
    names are alike ('"Ball Python Eaten" absorbed "Ball Python Eaten"', a trial)."""
    a, b = quoted(m["into_name"]), quoted(m["absorbed_name"])
    if m["into_name"] == m["absorbed_name"] and m.get("into_span") and m.get("absorbed_span"):
        return f"{a} ({m['into_span']})", f"{b} ({m['absorbed_span']})"
    return a, b


def _judged(m: dict) -> str:
    """The branches the cosine and the reason are about, when a merge earlier in the round
    made them parts of the two merged topics."""
    pair = m.get("judged") or []
    if len(pair) != 2:
        return ""
    (a, sa), (b, sb) = pair
    return f" between {quoted(a)} ({sa}) and {quoted(b)} ({sb}) in them"


def reorganize_marks(res: dict) -> dict[str, str]:
    """Topic id -> what it absorbed, for the pane."""
    marks: dict[str, list[str]] = {}
    for m in res.get("merges", []):
        marks.setdefault(m["into"], []).append(f"{m['absorbed_name']} (cos {m['similarity']:.2f})")
    return {tid: "absorbed " + ", ".join(names) for tid, names in marks.items()}

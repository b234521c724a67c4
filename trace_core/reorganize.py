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

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import events as ev
from .embedders import Embedder, normalise
from .fanout import FanoutBalancer
from .judges import Judges, TopicDigest
from .model import TreeModel
from .nodes import MessageNode, TopicNode
from .pairs import similar_pairs
from .persist import TreeStore
from .rows import NodeRow
from .summaries import Summaries
from .textutil import STOPWORDS, words

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
    # the exchanges each held before the merge ("#3–7"): two topics of one name are told
    # apart ('"Ball Python Eaten" absorbed "Ball Python Eaten"', a trial)
    into_span: str = ""
    absorbed_span: str = ""
    # the two branches the similarity and the judge's reason are about, [name, span] each,
    # when not the two merged: a branch merged earlier in the round stands for its absorber
    # ('"Roll Kubernetes Deployment" absorbed "Kubernetes Stuck CrashLoopBackOff" (…: both
    # named Roll Kubernetes Deployment)' read as false: a trial)
    judged: list[list[str]] = field(default_factory=list)


@dataclass
class ReorganizeResult:
    merged: int = 0
    pruned: int = 0
    skipped: int = 0
    vetoed: int = 0
    candidates: int = 0
    pairs: int = 0
    kept_apart: int = 0  # similar pairs not merged again: an undo took their merge back
    archived: list[int] = field(default_factory=list)  # the exchanges --prune archived, by index
    duration_secs: float = 0.0
    op_id: str = ""
    merges: list[MergeRecord] = field(default_factory=list)
    vetoes: list[MergeRecord] = field(default_factory=list)
    cancelled: bool = False  # should_stop() said stop: the rounds finished before it are kept

    def as_dict(self) -> dict:
        return {
            "merged": self.merged, "pruned": self.pruned, "skipped": self.skipped, "vetoed": self.vetoed,
            "candidates": self.candidates, "pairs": self.pairs, "kept_apart": self.kept_apart,
            "archived": list(self.archived),
            "duration_secs": self.duration_secs,
            "op_id": self.op_id, "cancelled": self.cancelled,
            "merges": [m.__dict__ for m in self.merges], "vetoes": [m.__dict__ for m in self.vetoes],
        }


@dataclass
class Before:
    """The tree as it was before a reorganisation (what undo restores)."""

    rows: list[NodeRow]
    current: str
    exchanges: int

    def as_json(self) -> dict:
        return {"rows": [r.as_sql() for r in self.rows], "current": self.current, "exchanges": self.exchanges}

    @classmethod
    def from_json(cls, d: dict) -> "Before":
        return cls([NodeRow.from_sql(r) for r in d["rows"]], d["current"], d["exchanges"])

    @classmethod
    def of(cls, model: TreeModel) -> "Before":
        return cls(model.rows(), model.current.node_id, len(model.exchanges))


class UndoLog:
    """Where the last reorganisation's before state is kept when the tree has no store."""

    def __init__(self) -> None:
        self.last: tuple[str, Before] | None = None
        self.last_merges: list[tuple[str, str]] = []  # (absorber id, absorbed id) of ``last``
        self.kept_apart: set[tuple[str, str]] = set()  # pairs an undo took apart again

    def end(self) -> None:
        """An archive, restore, replace or forget since the reorganisation: undoing it would
        put back the tree of before them too — un-archive what the user archived since, or
        name a replaced exchange's topic from its old text (a developer's trial). The store
        drops its record in the same transaction as the change."""
        self.last = None


@dataclass
class _RunState:
    before: Before | None = None
    absorbers: set[str] = field(default_factory=set)
    vetoed: set[tuple[str, str]] = field(default_factory=set)
    merged_into: dict[str, str] = field(default_factory=dict)  # absorbed topic id -> its absorber's
    touched: list[TopicNode] = field(default_factory=list)
    pool: set[str] | None = None
    undone: set[tuple[str, str]] = field(default_factory=set)  # pairs an undo took apart (kept so)
    counted_apart: set[tuple[str, str]] = field(default_factory=set)


def _word_count(text: str) -> int:
    return len(text.split())


def is_trivial(x: MessageNode) -> bool:
    """An exchange that says nothing to remember: both messages under ``TRIVIAL_WORDS``
    words, and the user's of common words only ("ok thanks", "hi"), with no number. Short
    is not trivial: "My sister Ana lives in Porto and works as an architect." was archived
    by ``--prune``, and no search found it again (a trial)."""
    if _word_count(x.user) >= TRIVIAL_WORDS or _word_count(x.assistant) >= TRIVIAL_WORDS:
        return False
    return not any(ch.isdigit() for ch in x.user) and all(w in STOPWORDS for w in words(x.user))


def _span(topic: TopicNode) -> str:
    """The exchanges a topic holds, as the log names them: "#3–7", "#4"."""
    if topic.start_index < 0:
        return ""
    if topic.start_index == topic.end_index:
        return f"#{topic.start_index}"
    return f"#{topic.start_index}–{topic.end_index}"


def _pair(a: str, b: str) -> tuple[str, str]:
    """Two topic ids, in the order a veto keeps them."""
    return (a, b) if a <= b else (b, a)


def _joined_pairs(merges: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every two topics the merges put together, not only each absorber with what it
    absorbed: after an undo, an idle run joined the same topics under another of them (a
    re-trial)."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in merges:
        parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for x in parent:
        groups.setdefault(root(x), []).append(x)
    return {_pair(a, b) for members in groups.values() for i, a in enumerate(members) for b in members[i + 1:]}


def _parts_of_one_topic(a: TopicNode, b: TopicNode) -> bool:
    """Two parts the fan-out cut one topic into (over the bound: "X · part 1", "X · part 2")
    are one subject already; a merge would only cut them again under the first."""
    parent = a.parent
    return parent is not None and parent is b.parent and parent.parent is not None and not parent.is_group


def _ancestor_ids(t: TopicNode) -> set[str]:
    ids = set()
    cur = t.parent
    while cur is not None:
        ids.add(cur.node_id)
        cur = cur.parent
    return ids


class Reorganizer:
    """Handed the tree model, the judges, the summaries, the fan-out balancer, the
    embedder, the event bus's ``emit``, the tree's store (or ``None``), the undo log and
    the tree's lock."""

    neighbours = 10  # each branch is compared with its 10 most similar branches

    def __init__(self, model: TreeModel, judges: Judges, summaries: Summaries, balancer: FanoutBalancer,
                 embedder: Embedder, emit: Callable[[ev.EngineEvent], None], store: TreeStore | None,
                 undo: UndoLog, lock: threading.RLock) -> None:
        self.model = model
        self.judges = judges
        self.summaries = summaries
        self.balancer = balancer
        self.embedder = embedder
        self.emit = emit
        self.store = store
        self.undo = undo
        self.lock = lock

    def run(self, embed_fn=None, similarity_threshold: float = 0.55, prune_trivial_leaves: bool = False,
            max_rounds: int = 3, should_stop: Callable[[], bool] | None = None, redo_undone: bool = False) -> dict:
        """``embed_fn``: when given (the README's argument), topics are compared by the
        embedding of their name and summary, else by their indexed vectors.
        ``should_stop()`` is asked before each round and between pairs: True drops the
        round in progress (nothing of it was applied) and commits the rounds before it."""
        model = self.model
        started = time.perf_counter()
        res = ReorganizeResult(op_id=uuid.uuid4().hex[:12])
        # merges an undo took back stay undone: an idle run made them again a minute later (a trial)
        undone = set() if redo_undone else {_pair(a, b) for a, b in self._kept_apart()}
        state = _RunState(vetoed=set(undone), undone=undone)
        self._stop = should_stop or (lambda: False)
        # merged topics are compared again (their content changed): a few rounds
        for _round in range(max_rounds):
            if self._stop():
                res.cancelled = True
            if res.cancelled or not self._round(embed_fn is not None, similarity_threshold, res, state):
                break
        with self.lock:
            if prune_trivial_leaves and not res.cancelled:
                if state.before is None:
                    state.before = Before.of(model)
                path = set(model.active_path())
                for x in list(model.exchanges):
                    if x.archived or x.parent is None or x.parent in path or not is_trivial(x):
                        continue
                    state.touched += [t for t in model.get_ancestors(x.parent) if t is not model.root]
                    model.detach(x)
                    res.pruned += 1
                    res.archived.append(x.index)
                if res.pruned:
                    self._regroup_after_prune(state.touched)
            if res.merged or res.pruned:
                self._settle(state.touched)
                self._commit(state.before, res)
        res.duration_secs = time.perf_counter() - started
        self.emit(ev.ReorganizeFinished(res.merged, res.pruned, res.skipped, res.duration_secs))
        return res.as_dict()

    def _frozen_branches(self, state: _RunState) -> list[TopicNode]:
        model = self.model
        path = set(model.active_path())
        # branches that hold exchanges (or absorbed others); pure fan-out grouping nodes
        # are not merged
        frozen = [t for t in model.root.iter_topics() if t is not model.root and t not in path
                  and (t.message_children or t.node_id in state.absorbers)]
        # later rounds compare the same branches again (now with their merged content),
        # never the grouping topics a merge created inside an absorber
        if state.pool is not None:
            return [t for t in frozen if t.node_id in state.pool]
        state.pool = {t.node_id for t in frozen}
        return frozen

    def _round(self, by_text: bool, threshold: float, res: ReorganizeResult, state: _RunState) -> int:
        """One pass of phases 1-4 and the merges they approve; returns how many merged."""
        model = self.model
        embedder = self.embedder
        # phases 1-2: frozen branches, missing summaries, vectors (under the lock: brief)
        with self.lock:
            self.summaries.refresh_frozen()
            frozen = self._frozen_branches(state)
            # counted before giving up: a lone one was said as "there are 0 such" (a trial)
            res.candidates = max(res.candidates, len(frozen))
            if len(frozen) < 2:
                return 0
            if by_text:
                vectors = normalise(embedder.embed_batch([f"{t.topic_name}. {t.summary}" for t in frozen]))
            else:
                vectors = self.summaries.vectors(frozen)
            raw_text = {t.node_id: " ".join(f"{u} {a}" for u, a in model.texts(t, 4)) for t in frozen}
            said = {t.node_id: " ".join(u for u, _ in model.texts(t, 4)) for t in frozen}
        self.emit(ev.ReorganizeProgress("embedded", len(frozen), len(frozen)))

        # phase 3: all similar pairs at once
        pairs = similar_pairs(np.asarray(vectors, dtype=np.float32), threshold, max_per_row=self.neighbours)
        res.pairs += len(pairs)
        self.emit(ev.ReorganizeProgress("compared", len(pairs), len(pairs)))

        # phase 4: the axioms, pair by pair (vetoes may call the LLM: outside the lock)
        approved: list[tuple[TopicNode, TopicNode, float, str, str]] = []
        into: dict[str, TopicNode] = {}  # absorbed topic -> the topic that absorbed it
        pos = {t.node_id: k for k, t in enumerate(frozen)}
        digests: dict[str, TopicDigest] = {}

        def digest(t: TopicNode) -> TopicDigest:
            d = digests.get(t.node_id)
            if d is None:
                d = digests[t.node_id] = TopicDigest(t.topic_name, t.summary, vectors[pos[t.node_id]],
                                                     raw_text[t.node_id], said[t.node_id])
            return d

        def find(t: TopicNode) -> TopicNode:
            while t.node_id in into:
                t = into[t.node_id]
            return t

        def now(node_id: str) -> str:
            """The topic a topic's exchanges are in now (earlier rounds' merges, then this one's)."""
            while True:
                if node_id in state.merged_into:
                    node_id = state.merged_into[node_id]
                elif node_id in into:
                    node_id = into[node_id].node_id
                else:
                    return node_id

        def kept_apart(a: TopicNode, b: TopicNode) -> bool:
            """A veto holds for whatever its two topics joined since: merging A with C, then
            C with B, put together the A and B it had refused (a trial logged "kept apart",
            then the merge)."""
            ends = {a.node_id, b.node_id}
            return any({now(x), now(y)} == ends for x, y in state.vetoed)

        progress_at = time.monotonic()
        for k, (i, j, sim) in enumerate(pairs):
            if self._stop():
                res.cancelled = True
                return 0  # nothing of this round applied yet: the tree is as the last round left it
            # every 50 pairs, whatever became of them (it stopped at 601/4,394), or half a
            # second: an LLM veto takes seconds a pair ("judged 0/4" for 25 s: a trial)
            if k % 50 == 0 or time.monotonic() - progress_at >= 0.5:
                progress_at = time.monotonic()
                self.emit(ev.ReorganizeProgress("judged", k, len(pairs)))
            a, b = find(frozen[i]), find(frozen[j])
            if a is b:
                continue  # already one topic
            src_a, src_b = frozen[i], frozen[j]
            key = _pair(src_a.node_id, src_b.node_id)
            if kept_apart(a, b):  # vetoed, in this round or an earlier one, or undone: not asked again
                ends = {a.node_id, b.node_id}
                if key not in state.counted_apart and any({now(x), now(y)} == ends for x, y in state.undone):
                    state.counted_apart.add(key)
                    res.kept_apart += 1
                continue
            if a.node_id in _ancestor_ids(b) or b.node_id in _ancestor_ids(a):
                res.skipped += 1  # a topic never absorbs its own ancestor or descendant
                continue
            if _parts_of_one_topic(a, b):
                continue  # one subject already: merged, they were cut again a level lower, each run
            # axiom 1: the older absorbs the newer
            older, newer = (a, b) if (a.created_index, a.start_index) <= (b.created_index, b.start_index) else (b, a)
            # axiom 4: the veto judges the two branches that matched
            ok, why, judge = self.judges.approve_merge(digest(src_a), digest(src_b),
                                                       lambda texts: embedder.embed_batch(texts))
            judged = [] if {src_a, src_b} == {older, newer} else [[t.topic_name, _span(t)] for t in (src_a, src_b)]
            if not ok:
                state.vetoed.add(key)
                res.vetoed += 1
                # the topics kept apart by id and name alike (the names were the judged branches',
                # the ids the topics now holding them: a trial), the judged branches beside them
                res.vetoes.append(MergeRecord(older.node_id, newer.node_id, older.topic_name, newer.topic_name,
                                              sim, judge, why, _span(older), _span(newer), judged))
                continue
            approved.append((older, newer, sim, judge, why, judged))
            into[newer.node_id] = older
        self.emit(ev.ReorganizeProgress("judged", len(pairs), len(pairs)))
        if self._stop():  # asked while the last pair was judged (a given-up LLM answers at once)
            res.cancelled = True
            return 0
        return self._apply(approved, find, res, state)

    def _apply(self, approved, find, res: ReorganizeResult, state: _RunState) -> int:
        """Merge the approved pairs (under the lock; axiom 2 checked again: add() may have
        run meanwhile)."""
        model = self.model
        merged = 0
        with self.lock:
            if approved and state.before is None:
                state.before = Before.of(model)
            path = set(model.active_path())
            live = set(model.root.iter_topics())
            left: dict[str, TopicNode] = {}  # groups a merge took a part from
            grown: list[TopicNode] = []  # the topics that absorbed one
            for older, newer, sim, judge, why, judged in approved:
                older = find(older)
                if older in path or newer in path or older not in live or newer not in live:
                    res.skipped += 1  # axiom 2: it joined the active path meanwhile
                    continue
                if older.node_id in _ancestor_ids(newer) or newer.node_id in _ancestor_ids(older):
                    res.skipped += 1
                    continue
                spans = (_span(older), _span(newer))
                old_parent = newer.parent
                for c in list(newer.children):
                    newer.remove_child(c)
                    older.add_child(c)
                above = model.get_ancestors(old_parent)
                old_parent.remove_child(newer)
                live.discard(newer)
                gone = model.prune_empty(old_parent)
                live.difference_update(gone)
                lost = next(t for t in reversed(above) if t not in gone)  # the node that lost a part
                if lost.is_group:
                    left[lost.node_id] = lost
                state.merged_into[newer.node_id] = older.node_id
                state.touched.append(older)  # sorted once in _settle, not per merge
                state.absorbers.add(older.node_id)
                grown.append(older)
                merged += 1
                res.merges.append(MergeRecord(older.node_id, newer.node_id, older.topic_name, newer.topic_name,
                                              sim, judge, why, *spans, judged))
            res.merged += merged
            # groups are named after their parts: a part merged away must not name its group
            # any more, nor the groups above it or above the absorber ("Training Marathon ·
            # Roll Kubernetes" was left over two tax topics); parts are named before their group
            groups = dict(left)
            for start in [*left.values(), *grown]:
                groups.update((g.node_id, g) for g in model.get_ancestors(start, include_self=False) if g.is_group)
            # a group left with one part gives way to it, on the active path too: no topic
            # is merged there (axiom 2), but the path's groups lose their other parts, and a
            # chain of one-part groups each named as its part grew above the current topic
            for group in list(groups.values()):
                if group in live and group.parent is not None and len(group.children) == 1:
                    model.dissolve(group)
                    live.discard(group)
                    del groups[group.node_id]
            for group in sorted(groups.values(), key=lambda g: -len(model.get_ancestors(g))):
                if group not in live:
                    continue
                name = self.balancer.name_for(list(group.children))
                if group.node_id in left or (name and name != group.topic_name):
                    group.topic_name = name
                    state.touched.append(group)
            if merged:
                self._settle(state.touched)
        return merged

    def _regroup_after_prune(self, touched: list[TopicNode]) -> None:
        """As after a merge or an archive: a group left with one part gives way to it, and
        the others are named after the parts they still hold (--prune left "Sourdough
        Starter · Welcome Conversation" over "Sourdough Starter Weights" alone, named after
        the "ok thanks" it archived: a trial). Under the tree's lock."""
        model = self.model
        live = set(model.root.iter_topics())
        groups = [g for g in dict.fromkeys(touched) if g.is_group and g in live]
        for group in groups:
            if group.parent is not None and len(group.children) == 1 and group.children[0].is_topic:
                model.dissolve(group)
                live.discard(group)
        for group in sorted((g for g in groups if g in live), key=lambda g: -len(model.get_ancestors(g))):
            name = self.balancer.name_for(list(group.children))
            if name and name != group.topic_name:
                group.topic_name = name

    def _settle(self, touched: list[TopicNode]) -> None:
        """Ranges, fan-out (inside the touched frozen subtrees only), current node, sums,
        summaries. Called under the tree's lock."""
        model = self.model
        model.recompute_ranges()  # sorts every child list once
        live_topics = set(model.root.iter_topics())
        for t in dict.fromkeys(touched):
            if t in live_topics:
                self.balancer.contain(t)
        model.recompute_ranges()
        if model.current not in set(model.root.iter_topics()):
            model.fix_current()
        model.vectors.invalidate()
        live_topics = set(model.root.iter_topics())
        model.stale.update(t for t in touched if t in live_topics)
        self.summaries.refresh_frozen()

    def _kept_apart(self) -> set[tuple[str, str]]:
        with self.lock:
            return self.store.kept_apart() if self.store is not None else set(self.undo.kept_apart)

    def _commit(self, before: Before, res: ReorganizeResult) -> None:
        self.undo.last = (res.op_id, before)
        self.undo.last_merges = [(m.into, m.absorbed) for m in res.merges]
        if self.store is None:
            return
        entries = [("before", before.as_json())] + [("merge", m.__dict__) for m in res.merges]
        if res.pruned:
            entries.append(("pruned", {"count": res.pruned}))
        self.store.write_reorganized(res.op_id, entries)


def undo_reorganize(model: TreeModel, store: TreeStore | None, undo: UndoLog, lock: threading.RLock) -> dict:
    """Restore the tree as it was before the last reorganisation, node for node."""
    with lock:
        op_id, before = None, None
        if store is not None:
            op_id, payload = store.last_reorganization()
            before = Before.from_json(payload) if payload is not None else None
        elif undo.last is not None:
            op_id, before = undo.last
        if not op_id or before is None:
            raise UndoError("there is no reorganisation to undo (an archive, restore, replace or forget after "
                            "one ends its undo)")
        if before.exchanges != len(model.exchanges):
            added = len(model.exchanges) - before.exchanges
            raise UndoError(
                f"{added} {'exchange was' if added == 1 else 'exchanges were'} added after the last "
                "reorganisation; undoing it now would not restore the tree exactly, so it was not undone"
            )
        apart = _joined_pairs(store.merges_of(op_id) if store is not None else undo.last_merges)
        model.replace_structure(before.rows, before.current)
        if store is not None:
            store.write_undone(op_id, store.kept_apart() | apart)
        else:
            undo.kept_apart |= apart
        undo.last = None
        return {"undone": op_id}


__all__ = ["Reorganizer", "UndoError", "UndoLog", "undo_reorganize", "similar_pairs", "is_trivial"]

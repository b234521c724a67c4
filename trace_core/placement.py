"""Placement: where a new exchange goes (the judges decide), the fan-out bounds along
the active path, and the summaries of topics that froze meanwhile."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .embedders import normalise
from .fanout import FanoutBalancer
from .group_names import GroupNames
from .judges import Judges, Placement, PlacementContext
from .model import TreeModel
from .nodes import MessageNode, TopicNode
from .summaries import Summaries


@dataclass(frozen=True)
class Placed:
    placement: Placement  # what the judge decided, and why
    topic: TopicNode  # where the exchange went
    new_topics: list[TopicNode]  # opened by the judge or by the fan-out
    frozen: list[TopicNode]  # left the active path, summarised
    renamed: list[tuple[TopicNode, str]] = field(default_factory=list)  # groups named again, with the old name


def moved_note(filed_under: TopicNode | None, topic: TopicNode, renamed: list[tuple[TopicNode, str]]) -> str:
    """What the same ``add()`` did after the judge's decision, said with it: the fan-out
    split the group a new topic went into, or the group was named again. The "stored in …"
    line after the judge's named another group, and a trial took the two for a
    contradiction."""
    if filed_under is None:
        return ""
    if filed_under.is_root:  # ROOT overflowed: its topics went into groups (the first time too, a trial)
        parent = topic.parent
        if parent is None or parent.is_root:
            return ""
        return f"; the fan-out then grouped ROOT's topics: it sits in {parent.topic_name}"
    if topic.parent is not filed_under and topic.parent is not None and not topic.parent.is_root:
        return f"; the fan-out then split {filed_under.topic_name}: it sits in {topic.parent.topic_name}"
    before = next((b for g, b in renamed if g is filed_under and b != g.topic_name), None)
    return f"; {before} is now named {filed_under.topic_name}" if before else ""


class Placer:
    """Handed the tree model, the judges, the fan-out balancer, the summaries and the
    group names."""

    def __init__(self, model: TreeModel, judges: Judges, balancer: FanoutBalancer, summaries: Summaries,
                 group_names: GroupNames) -> None:
        self.model = model
        self.judges = judges
        self.balancer = balancer
        self.summaries = summaries
        self.group_names = group_names

    def prepare(self, user: str, assistant: str, vector: np.ndarray) -> tuple[PlacementContext, tuple]:
        """What the judges are asked about the next exchange, and the state it was read
        in (``state()``). Call under the tree's lock; ask the judges outside it."""
        self.judges.embedding.observe(user, assistant)
        return self.context(user, assistant, vector), self.state()

    def state(self) -> tuple:
        """What a placement decision depends on: the exchanges so far and the active path
        with its names. Unchanged, a decision taken outside the lock still holds."""
        return len(self.model.exchanges), tuple((t.node_id, t.topic_name) for t in self.model.active_path())

    def decide(self, ctx: PlacementContext) -> Placement:
        """The judges' decision (an LLM call, maybe: seconds on a small local model)."""
        return self.judges.place(ctx)

    def place(self, node: MessageNode, vector: np.ndarray, placement: Placement | None = None) -> Placed:
        """Put ``node`` (the next exchange, unit ``vector``) in the tree, where ``placement``
        (decided in the tree's present state) says, or where the judges decide now. Call
        under the tree's lock."""
        model = self.model
        if placement is None:
            self.judges.embedding.observe(node.user, node.assistant)
            placement = self.decide(self.context(node.user, node.assistant, vector))
        old_path = model.active_path()
        topic = self._attach(node, vector, placement)
        filed_under = topic.parent
        new_topics = [topic] if placement.action == "new" else []
        new_topics += self._balance_path()
        new_path = model.active_path()
        renamed = self._rename_groups(old_path + new_path)
        if placement.action == "new":
            placement.reason += moved_note(filed_under, topic, renamed)
        frozen = self.summaries.freeze(old_path, new_path, new_topics)
        return Placed(placement, topic, new_topics, frozen, renamed)

    def _rename_groups(self, topics: list[TopicNode]) -> list[tuple[TopicNode, str]]:
        """The groups along both active paths, named again where their largest parts
        changed (a topic filed into one, or grown inside it)."""
        out, seen = [], set()
        for t in topics:
            if t.is_group and t.parent is not None and t.node_id not in seen:
                seen.add(t.node_id)
                before = t.topic_name
                if self.group_names.refresh(t):
                    out.append((t, before))
        return out

    def context(self, user: str, assistant: str, vector: np.ndarray) -> PlacementContext:
        model = self.model
        path = model.active_path()
        recent = None
        if model.current is not model.root:
            tail = model.current.message_children[-3:]
            if tail:
                recent = normalise(np.sum([model.vectors.exchange(m.index) for m in tail], axis=0))
            else:
                recent = model.vectors.node(model.current)
        path_vecs = [None] + [model.vectors.node(t) for t in path[1:]]
        return PlacementContext([t.topic_name for t in path], user, assistant, vector, recent, path_vecs)

    def _attach(self, node: MessageNode, vector: np.ndarray, placement: Placement) -> TopicNode:
        model = self.model
        path = model.active_path()
        if placement.action == "continue" and model.current is not model.root:
            parent = model.current
        else:
            decided = path[min(max(placement.parent_level, 0), len(path) - 1)]
            anchor = self.filing_level(decided)
            if anchor is not decided:  # the log said "under ROOT" and the tree showed it in a group
                placement.reason += (f"; filed in the newest group, {anchor.topic_name}: the tree keeps "
                                     "conversation order")
            parent = TopicNode(placement.name or "New Topic", created_index=node.index)
            anchor.add_child(parent)
            model.vectors.start_sum(parent, vector)
        model.append(node, parent, vector)
        return parent

    @staticmethod
    def filing_level(anchor: TopicNode) -> TopicNode:
        """Where a new topic "under ``anchor``" goes. Under ROOT or a group it goes to the
        newest group of the bottom level, beside the other topics: opening it in ROOT
        would push every older topic a level down at each split of ROOT (measured: 422
        levels at 10,000 exchanges), as if a B+tree inserted at its root."""
        if not (anchor.is_root or anchor.is_group):
            return anchor
        while anchor.children and anchor.children[-1].is_topic and anchor.children[-1].is_group:
            anchor = anchor.children[-1]
        return anchor

    def _balance_path(self) -> list[TopicNode]:
        """Apply the fan-out bounds along the active path, deepest first."""
        model = self.model
        created: list[TopicNode] = []
        for t in reversed(model.active_path()):
            made = self.balancer.balance(t)
            created += made
            for w in made + [t]:  # new topics, and t itself after a leaf split
                model.vectors.forget(w)
            if made and model.current is t:
                # the newest exchange now sits in the last subtopic: continue there
                model.current = model.exchanges[-1].parent
        return created

"""Bounded fan-out: expand a node with too many exchanges into subtopics, split a node
with too many subtopics under new intermediate topics.

Groups are contiguous runs (the tree stays in conversation order) cut where adjacent
items are least alike, so each group is a coherent stretch of the conversation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .nodes import MessageNode, Node, TopicNode


def halves(vectors: list[np.ndarray]) -> int:
    """Where to cut a run in two: the least similar neighbours within its middle third,
    so both halves keep at least a third (a B+tree split, guided by meaning)."""
    n = len(vectors)
    lo = max(1, (n + 2) // 3)
    hi = n - lo
    if hi < lo:
        return n // 2
    return min(range(lo, hi + 1), key=lambda b: float(np.dot(vectors[b - 1], vectors[b])))


class FanoutBalancer:
    """Applies the bounds to a node; the tree supplies vectors and names.

    - A top-level topic with too many exchanges is *expanded*: its exchanges are cut in
      two subtopics under it (ChatIndex).
    - Any other node with too many exchanges is *split* like a B+tree leaf: its later
      half moves to a new sibling topic.
    - A node with too many subtopics is split like a B+tree internal node: its later
      half of subtopics moves to a new sibling; ROOT instead gets two new intermediate
      topics (the only way the tree grows a level).

    Splitting in halves keeps depth logarithmic in the length of the conversation.
    """

    def __init__(
        self,
        max_children: int,
        vector_of: Callable[[Node], np.ndarray],
        name_for: Callable[[list[Node]], str],
        on_new_topic: Callable[[TopicNode], None],
    ) -> None:
        self.max_children = max_children
        self.vector_of = vector_of
        self.name_for = name_for
        self.on_new_topic = on_new_topic

    def _new_topic(self, group: list[Node], home: TopicNode) -> list[TopicNode]:
        """Move ``group`` (children of one node) under a new topic placed in ``home``;
        a lone topic moves as itself (a topic wrapping one topic says nothing)."""
        if len(group) == 1 and group[0].is_topic:
            t = group[0]
            t.parent.remove_child(t)
            home.add_child(t)
            home.sort_children()
            return []
        topic = TopicNode(self.name_for(group), created_index=min(_created(c) for c in group))
        for c in group:
            c.parent.remove_child(c)
            topic.add_child(c)
        topic.sort_children()
        topic.recompute_range()
        home.add_child(topic)
        home.sort_children()
        self.on_new_topic(topic)
        return [topic]

    def expand(self, node: TopicNode) -> list[TopicNode]:
        msgs: list[MessageNode] = node.message_children
        if len(msgs) <= self.max_children or node.parent is None:
            return []
        cut = halves([self.vector_of(m) for m in msgs])
        if node.parent.parent is None and not node.topic_children:
            created = self._new_topic(msgs[:cut], node) + self._new_topic(msgs[cut:], node)
        else:
            created = self._new_topic(msgs[cut:], node.parent)
        node.recompute_range()
        return created

    def split(self, node: TopicNode) -> list[TopicNode]:
        topics = node.topic_children
        if len(topics) <= self.max_children:
            return []
        cut = halves([self.vector_of(t) for t in topics])
        if node.parent is None:
            created = self._new_topic(topics[:cut], node) + self._new_topic(topics[cut:], node)
        else:
            created = self._new_topic(topics[cut:], node.parent)
        node.recompute_range()
        return created

    def balance(self, node: TopicNode) -> list[TopicNode]:
        created = self.expand(node)
        created += self.split(node)
        return created


def _created(node: Node) -> int:
    return node.created_index if node.is_topic else node.index

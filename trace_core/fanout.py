"""Bounded fan-out: expand a node with too many exchanges into subtopics, split a node
with too many subtopics under new intermediate topics.

Groups are contiguous runs (the tree stays in conversation order) cut where adjacent
items are least alike, so each group is a coherent stretch of the conversation.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .nodes import MessageNode, Node, TopicNode


def segment(vectors: list[np.ndarray], max_size: int) -> list[list[int]]:
    """Cut ``range(len(vectors))`` into contiguous runs of at most ``max_size``.

    Recursively cut at the boundary between the least similar neighbours; if that
    yields more than ``max_size`` runs, fall back to equal contiguous chunks.
    """
    n = len(vectors)
    if n <= max_size:
        return [list(range(n))]
    sims = [float(np.dot(vectors[i], vectors[i + 1])) for i in range(n - 1)]

    def cut(lo: int, hi: int) -> list[list[int]]:
        if hi - lo <= max_size:
            return [list(range(lo, hi))]
        b = min(range(lo + 1, hi), key=lambda i: sims[i - 1])
        return cut(lo, b) + cut(b, hi)

    runs = cut(0, n)
    if len(runs) > max_size:
        k = math.ceil(n / max_size)
        size = math.ceil(n / k)
        runs = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
    return runs


class FanoutBalancer:
    """Applies the bounds to a node; the tree supplies vectors and names."""

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

    def _wrap(self, node: TopicNode, group: list[Node]) -> TopicNode:
        wrapper = TopicNode(self.name_for(group), created_index=min(c.start_index for c in group))
        for c in group:
            node.remove_child(c)
            wrapper.add_child(c)
        wrapper.sort_children()
        wrapper.recompute_range()
        node.add_child(wrapper)
        self.on_new_topic(wrapper)
        return wrapper

    def expand(self, node: TopicNode) -> list[TopicNode]:
        """Too many exchanges directly under ``node``: move runs of them into subtopics."""
        msgs: list[MessageNode] = node.message_children
        if len(msgs) <= self.max_children:
            return []
        runs = segment([self.vector_of(m) for m in msgs], self.max_children)
        created = [self._wrap(node, [msgs[i] for i in run]) for run in runs]
        node.sort_children()
        return created

    def split(self, node: TopicNode) -> list[TopicNode]:
        """Too many subtopics under ``node``: group runs of them under intermediate topics."""
        created: list[TopicNode] = []
        while len(node.topic_children) > self.max_children:
            topics = node.topic_children
            runs = segment([self.vector_of(t) for t in topics], self.max_children)
            if len(runs) == 1:  # cannot happen with > max_children, but never loop forever
                break
            for run in runs:
                if len(run) > 1:
                    created.append(self._wrap(node, [topics[i] for i in run]))
            node.sort_children()
        return created

    def balance(self, node: TopicNode) -> list[TopicNode]:
        created = self.expand(node)
        created += self.split(node)
        return created

"""Bounded fan-out, the one policy of the tree: at most ``max_children`` exchanges and
at most ``max_children`` subtopics under a node. Along the active path (``balance``) a
node over the bound is expanded or split like a B+tree node; inside a frozen topic
after a merge (``contain``) the excess is grouped under new topics within it.

Groups are contiguous runs (the tree stays in conversation order) cut where adjacent
items are least alike, so each group is a coherent stretch of the conversation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .nodes import GROUP_PREFIX, MessageNode, Node, TopicNode, new_id

MAX_CHILDREN_LIMIT = 10_000  # a fan-out past it is no tree (an import with 10⁹ ate all memory)


def max_children_problem(value: object) -> str | None:
    """Why ``value`` is no fan-out bound, or None."""
    if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= MAX_CHILDREN_LIMIT:
        return f"max_children must be an integer from 2 to {MAX_CHILDREN_LIMIT:,} (it is {value!r})"
    return None


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

    Splitting in halves, with new topics filed at the bottom level of the groups (see
    ``Placer``), keeps depth logarithmic in the length of the conversation.
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

    def _new_topic(self, group: list[Node], home: TopicNode, grouping: bool = False) -> list[TopicNode]:
        """Move ``group`` (children of one node) under a new topic placed in ``home`` (a
        grouping node when ``grouping``); a lone topic moves as itself (a topic wrapping
        one topic says nothing)."""
        if len(group) == 1 and group[0].is_topic:
            t = group[0]
            t.parent.remove_child(t)
            home.add_child(t)
            home.sort_children()
            return []
        topic = TopicNode(self.name_for(group), created_index=min(_created(c) for c in group),
                          **({"node_id": new_id(GROUP_PREFIX)} if grouping else {}))
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
        if (node.parent.parent is None or node.parent.is_group) and not node.topic_children:
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
        if node.is_group:  # a group keeps two parts at least: a group of one says nothing
            cut = max(cut, 2)
        if node.parent is None:  # the only way the tree grows a level: two groups under ROOT
            created = self._new_topic(topics[:cut], node, True) + self._new_topic(topics[cut:], node, True)
        else:  # a group's later half becomes a group; a topic's, a topic
            created = self._new_topic(topics[cut:], node.parent, node.is_group)
        node.recompute_range()
        return created

    def balance(self, node: TopicNode) -> list[TopicNode]:
        created = self.expand(node)
        created += self.split(node)
        return created

    def contain(self, node: TopicNode) -> list[TopicNode]:
        """The bounds inside ``node``'s own subtree only (after a merge into a frozen
        topic: its siblings may be on the active path, so nothing moves out of it).
        Excess exchanges, then excess subtopics, are grouped in contiguous runs under new
        topics inside ``node``, named as its parts."""
        created: list[TopicNode] = []
        m = self.max_children
        for kind in ("message", "topic"):
            while True:
                kids = node.message_children if kind == "message" else node.topic_children
                if len(kids) <= m:
                    break
                # the fewest parts that fit, of even size (ten exchanges: two parts of
                # five, not five of two); more than m parts are grouped by the next pass
                parts = -(-len(kids) // m)
                size = -(-len(kids) // parts)
                groups = [kids[k : k + size] for k in range(0, len(kids), size)]
                for part, g in enumerate(groups, 1):
                    if len(g) == 1:
                        continue
                    # named after the merged topic (naming each from its text cost a
                    # second per 10,000 merges, and says less)
                    t = TopicNode(self._part_name(node.topic_name, part, g), created_index=min(_created(c) for c in g))
                    for c in g:
                        node.remove_child(c)
                        t.add_child(c)
                    t.sort_children()
                    t.recompute_range()
                    node.add_child(t)
                    created.append(t)
                node.sort_children()
        for t in list(created):
            created += self.contain(t)
        return created


    @staticmethod
    def _part_name(name: str, part: int, group: list[Node]) -> str:
        """"X · part 2"; a group of X's parts says which it holds ("X · parts 4–6"): named
        "part 2" too, it stood beside its own "part 2" (/find: "X · part 2 (×2)")."""
        numbers = [_part_number(c, name) for c in group]
        if all(n is not None for n in numbers):
            return f"{name} · parts {numbers[0]}–{numbers[-1]}"
        return f"{name} · part {part}"


def _part_number(node: Node, name: str) -> int | None:
    """N when ``node`` is the topic "``name`` · part N", else None."""
    if not node.is_topic:
        return None
    head, sep, number = node.topic_name.rpartition(" · part ")
    return int(number) if sep and head == name and number.isdigit() else None


def _created(node: Node) -> int:
    return node.created_index if node.is_topic else node.index

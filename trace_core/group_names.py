"""Names of grouping topics (the fan-out's groups): made of the largest parts that hold
two thirds of a group's exchanges, and made again when those parts change.

A group is named when the fan-out creates it; the topics filed into it later, or
growing inside it, would otherwise never reach its name ("Tomato Seedlings Outside"
over a jazz topic three times its size). Naming again only when the set of largest
parts changes keeps the cost (and, with ``judge="llm"``, the LLM calls) to the rare
moments the name could change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .nodes import Node, TopicNode

NameTopic = Callable[[list[tuple[str, str]], Sequence[float]], str]
NameGroup = Callable[[Sequence[str], Sequence[float]], str]


def part_weight(part: Node) -> float:
    """How much of a group a part is: a subtopic counts by its exchanges, an exchange as one."""
    return float(max(1, part.message_count)) if part.is_topic else 1.0


def largest_parts(parts: Sequence[Node]) -> list[int]:
    """Indexes (in conversation order) of the largest parts holding two thirds of the
    exchanges, and at least two: a group named by one part alone bore that part's name,
    and hid its other parts behind a copy of it ("Tomato Seedlings Outside" over
    "Tomato Seedlings Outside" and "Sarah Negative Peanuts")."""
    weights = [part_weight(p) for p in parts]
    keep, held, total = set(), 0.0, sum(weights)
    for k in sorted(range(len(parts)), key=lambda k: -weights[k]):
        if held >= total * 2 / 3 and len(keep) >= 2:
            break
        keep.add(k)
        held += weights[k]
    return sorted(keep)  # conversation order: the earlier word wins a tie


class GroupNames:
    """Handed the judges' ``name_topic(texts, weights)`` (a group whose largest parts
    include exchanges) and ``name_group(names, weights)`` (one of subtopics only)."""

    def __init__(self, name_topic: NameTopic, name_group: NameGroup | None = None) -> None:
        self.name_topic = name_topic
        self.name_group = name_group
        self._named_from: dict[str, tuple[str, ...]] = {}  # group id -> ids of the parts its name came from

    def name(self, parts: Sequence[Node], kept: list[int] | None = None) -> str:
        """A name for a group of these parts, from its largest ones (``kept``, when known).
        Subtopics' names are short texts: this runs for every group the fan-out creates."""
        chosen = [parts[k] for k in (largest_parts(parts) if kept is None else kept)]
        if self.name_group is not None and all(p.is_topic for p in chosen):
            return self.name_group([p.topic_name for p in chosen], [part_weight(p) for p in chosen])
        return self.name_topic([(p.topic_name, "") if p.is_topic else (p.user, p.assistant) for p in chosen],
                               [part_weight(p) for p in chosen])

    def refresh(self, group: TopicNode) -> bool:
        """Name ``group`` again when its largest parts are no longer those it was last
        seen with (the first look only records them: a group just made, or read from a
        file, has its name). True when the name changed."""
        parts = list(group.children)
        kept = largest_parts(parts)
        key = tuple(parts[k].node_id for k in kept)
        before = self._named_from.get(group.node_id)
        self._named_from[group.node_id] = key
        if before is None or before == key or not parts:
            return False
        name = self.name(parts, kept)
        if not name or name == group.topic_name:
            return False
        group.topic_name = name
        return True

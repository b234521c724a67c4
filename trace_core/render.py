"""The text form of a tree, as the TRACE README prints it:

    ROOT [0:4] (10 msgs)
    ├─ Sarah Peanut Allergy [0:0] (2 msgs)
    │    Sarah is allergic to peanuts. …
    └─ Tokyo Weather [1:1] (2 msgs)
"""

from __future__ import annotations

from collections.abc import Collection

from .nodes import TopicNode
from .synthesis.rendering import clip_text


def _msgs(node: TopicNode) -> int:
    return sum(len(m.messages) for m in node.iter_messages())


def _exchanges(node: TopicNode) -> str:
    n = node.message_count
    return f"{n} exchange" if n == 1 else f"{n} exchanges"


def render_tree(node: TopicNode, active: Collection[TopicNode], show_messages: bool = False,
                summary_chars: int = 120, count_exchanges: bool = False) -> str:
    """``node`` and everything below it; topics in ``active`` (the active path) are starred.
    Each topic counts its messages, as the TRACE README prints it, or its exchanges
    (``count_exchanges``: what Nexus's tree pane counts)."""
    def count(n: TopicNode) -> str:
        return _exchanges(n) if count_exchanges else f"{_msgs(n)} msgs"

    span = f" [{node.start_index}:{node.end_index}]" if node.start_index >= 0 else ""  # an empty tree has no range
    lines = [f"{node.topic_name}{span} ({count(node)})"]

    def walk(n: TopicNode, prefix: str) -> None:
        kids = [c for c in n.children if c.is_topic or show_messages]
        for i, c in enumerate(kids):
            last = i == len(kids) - 1
            branch, cont = ("└─ ", "   ") if last else ("├─ ", "│  ")
            if c.is_topic:
                mark = " *" if c in active else ""
                lines.append(f"{prefix}{branch}{c.topic_name} [{c.start_index}:{c.end_index}] ({count(c)}){mark}")
                if c.summary:
                    s = c.summary if len(c.summary) <= summary_chars else c.summary[: summary_chars - 1] + "…"
                    lines.append(f"{prefix}{cont}   {s}")
                walk(c, prefix + cont)
            else:
                lines.append(f"{prefix}{branch}#{c.index} {clip_text(c.user, 80)}")

    walk(node, "")
    return "\n".join(lines)

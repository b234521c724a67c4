"""The two kinds of node in the context tree.

A ``MessageNode`` is a leaf holding one completed exchange (user, assistant and an
optional system message). A ``TopicNode`` is an internal node with a short name, a
summary and the index range ``[start_index:end_index]`` of the exchanges below it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Literal

GROUP_PREFIX = "g"  # node ids of grouping nodes (see ``TopicNode.is_group``)
FORGOTTEN = "[forgotten]"  # each message of a forgotten exchange (``CTree.forget``)


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


@dataclass(eq=False)
class MessageNode:
    """One exchange. ``index`` is its position among all exchanges (0-based)."""

    index: int
    messages: list[dict]
    timestamp: str = ""
    node_id: str = field(default_factory=lambda: new_id("m"))
    parent: "TopicNode | None" = field(default=None, repr=False)
    archived: bool = False
    home_id: str = ""  # while archived: the topic it was archived from (for restore)

    is_topic: ClassVar[Literal[False]] = False  # a Literal: type checkers narrow Node by it

    def role_text(self, role: str) -> str:
        return "\n".join(m["content"] for m in self.messages if m["role"] == role)

    @property
    def user(self) -> str:
        return self.role_text("user")

    @property
    def assistant(self) -> str:
        return self.role_text("assistant")

    @property
    def system(self) -> str:
        return self.role_text("system")

    @property
    def forgotten(self) -> bool:
        """Forgotten (``CTree.forget``): archived, every message's text gone."""
        return self.archived and bool(self.messages) and all(m.get("content") == FORGOTTEN for m in self.messages)

    @property
    def text(self) -> str:
        """The exchange as one text, the form it is embedded and injected in."""
        parts = []
        if self.system:
            parts.append(f"System: {self.system}")
        parts.append(f"User: {self.user}")
        parts.append(f"Assistant: {self.assistant}")
        return "\n".join(parts)

    @property
    def start_index(self) -> int:
        return self.index

    @property
    def end_index(self) -> int:
        return self.index


@dataclass(eq=False)
class TopicNode:
    topic_name: str
    summary: str = ""
    start_index: int = -1
    end_index: int = -1
    children: list["Node"] = field(default_factory=list)
    node_id: str = field(default_factory=lambda: new_id("t"))
    parent: "TopicNode | None" = field(default=None, repr=False)
    created_index: int = -1  # exchange index when the topic was opened (age, for merges)

    is_topic: ClassVar[Literal[True]] = True

    @property
    def is_root(self) -> bool:
        return self.parent is None

    @property
    def is_group(self) -> bool:
        """A grouping node the fan-out made above the topics (when ROOT or another group
        overflowed): it holds topics only, and new topics are filed at its bottom level,
        as a B+tree inserts at its leaves. Its id says so, so it survives the session file."""
        return self.node_id.startswith(GROUP_PREFIX)

    @property
    def topic_children(self) -> list["TopicNode"]:
        return [c for c in self.children if c.is_topic]

    @property
    def message_children(self) -> list[MessageNode]:
        return [c for c in self.children if not c.is_topic]

    # iterative walks: nested generators cost a frame per level for every node yielded

    def iter_messages(self) -> Iterator[MessageNode]:
        """Every exchange below this node, in tree order."""
        stack: list[Iterator[Node]] = [iter(self.children)]
        while stack:
            for c in stack[-1]:
                if c.is_topic:
                    stack.append(iter(c.children))
                    break
                yield c
            else:
                stack.pop()

    def iter_topics(self) -> Iterator[TopicNode]:
        """This node and every topic below it, depth first."""
        stack = [self]
        while stack:
            t = stack.pop()
            yield t
            stack.extend(c for c in reversed(t.children) if c.is_topic)

    @property
    def message_count(self) -> int:
        return sum(1 for _ in self.iter_messages())

    def add_child(self, child: "Node") -> None:
        child.parent = self
        self.children.append(child)

    def remove_child(self, child: "Node") -> None:
        self.children.remove(child)
        child.parent = None

    def sort_children(self) -> None:
        self.children.sort(key=lambda c: (c.start_index, 0 if c.is_topic else 1))

    def recompute_range(self) -> None:
        """Set ``[start_index:end_index]`` from the children (children first)."""
        starts = [c.start_index for c in self.children if c.start_index >= 0]
        ends = [c.end_index for c in self.children if c.end_index >= 0]
        self.start_index = min(starts) if starts else -1
        self.end_index = max(ends) if ends else -1


Node = TopicNode | MessageNode

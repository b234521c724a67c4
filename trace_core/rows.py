"""The one row codec of tree nodes: ``NodeRow`` (a typed row of the ``nodes`` table, of
a reorganisation's journal and of undo), and the one routine that rebuilds a tree's
structure from rows (session open, undo, JSON import)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .nodes import MessageNode, Node, TopicNode


class BrokenRowsError(ValueError):
    """Rows that do not make a tree (a node pointing to a missing parent, an exchange
    without messages). The message says which."""


@dataclass(slots=True)  # slots, not frozen: a reorganisation of 10,000 topics writes 30,000 rows
class NodeRow:
    node_id: str
    parent_id: str | None  # an archived exchange: the topic it was archived from
    kind: str  # "topic" | "message"
    topic_name: str | None
    summary: str | None
    start_index: int
    end_index: int
    exchange_index: int | None
    created_index: int | None
    timestamp: str | None
    archived: int  # 0 | 1

    COLUMNS = ("node_id", "parent_id", "kind", "topic_name", "summary", "start_index", "end_index",
               "exchange_index", "created_index", "timestamp", "archived")

    @classmethod
    def of(cls, node: Node, parent_id: str | None) -> "NodeRow":
        if node.is_topic:
            return cls(node.node_id, parent_id, "topic", node.topic_name, node.summary, node.start_index,
                       node.end_index, None, node.created_index, None, 0)
        pid = node.home_id if node.archived else parent_id
        return cls(node.node_id, pid, "message", None, None, node.index, node.index, node.index, None,
                   node.timestamp, 1 if node.archived else 0)

    @classmethod
    def from_sql(cls, values) -> "NodeRow":
        return cls(*values)

    def as_sql(self) -> tuple:
        """The values in ``COLUMNS`` order (the ``nodes`` table, the journal's JSON)."""
        return (self.node_id, self.parent_id, self.kind, self.topic_name, self.summary, self.start_index,
                self.end_index, self.exchange_index, self.created_index, self.timestamp, self.archived)


def node_rows(root: TopicNode, archived: Iterable[MessageNode]) -> list[NodeRow]:
    """Every node of the tree below and including ``root``, then the archived exchanges."""
    rows = []
    for t in root.iter_topics():
        rows.append(NodeRow.of(t, t.parent.node_id if t.parent is not None else None))
        rows += [NodeRow.of(c, t.node_id) for c in t.children if not c.is_topic]
    rows += [NodeRow.of(m, None) for m in archived]
    return rows


def rebuild(rows: Iterable[NodeRow], root: TopicNode, exchange_for: Callable[[NodeRow], MessageNode]
            ) -> dict[str, Node]:
    """Link the nodes ``rows`` describe under ``root`` (whose row resets it); every other
    topic is made anew, every exchange is ``exchange_for(row)`` (made anew, or an existing
    one reused) and gets the row's id, archive state and parent. Children come out in
    conversation order. Returns the nodes by id; raises ``BrokenRowsError``."""
    nodes: dict[str, Node] = {}
    parents: dict[str, str | None] = {}
    for r in rows:
        created = r.created_index if r.created_index is not None else r.start_index
        if r.kind == "topic":
            node = root if r.node_id == root.node_id else TopicNode(r.topic_name or "", node_id=r.node_id)
            node.topic_name, node.summary = r.topic_name or "", r.summary or ""
            node.start_index, node.end_index, node.created_index = r.start_index, r.end_index, created
            node.children = []
        else:
            node = exchange_for(r)
            node.node_id = r.node_id
            node.archived = bool(r.archived)
            node.home_id = (r.parent_id or "") if r.archived else ""
        node.parent = None
        nodes[r.node_id] = node
        parents[r.node_id] = r.parent_id
    for nid, node in nodes.items():
        pid = parents[nid]
        if pid is None or (not node.is_topic and node.archived):
            continue
        parent = nodes.get(pid)
        if parent is None or not parent.is_topic:
            raise BrokenRowsError(f"node {nid} points to a missing parent {pid}")
        parent.children.append(node)
        node.parent = parent
    for n in nodes.values():
        if n.is_topic:
            n.sort_children()
    return nodes

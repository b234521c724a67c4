"""The reading side of ``CTree``: navigation and views of its tree model, all through
the model's public surface (``self.structure``)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .model import ExchangeView, TreeModel
from .nodes import MessageNode, Node, TopicNode


class TreeReading:
    """Mixed into ``CTree``: what a reader of the tree uses."""

    structure: TreeModel

    @property
    def root(self) -> TopicNode:
        return self.structure.root

    @property
    def current_node(self) -> TopicNode:
        return self.structure.current

    @current_node.setter
    def current_node(self, node: TopicNode) -> None:
        self.structure.current = node

    @property
    def conversation(self) -> list[dict]:
        """Every message in order (as ``{"role", "content"}``)."""
        return self.structure.conversation

    @property
    def archived(self) -> list[MessageNode]:
        """The soft-archived exchanges (a copy)."""
        return self.structure.archived

    def get_ancestors(self, node: Node, include_self: bool = True, exclude_root: bool = False) -> list[TopicNode]:
        """From the top down: ``[ROOT, ..., node]``."""
        return self.structure.get_ancestors(node, include_self, exclude_root)

    def thread_path(self, node: Node) -> str:
        return self.structure.thread_path(node)

    def active_path(self) -> list[TopicNode]:
        return self.structure.active_path()

    def is_frozen(self, node: Node) -> bool:
        """Off the active ancestry path (only frozen topics may be reorganised)."""
        return self.structure.is_frozen(node)

    def find(self, node_id: str) -> Node | None:
        return self.structure.find(node_id)

    def iter_topics(self) -> Iterable[TopicNode]:
        return self.root.iter_topics()

    @property
    def exchanges(self) -> list[MessageNode]:
        """Every exchange by index, archived ones included (a copy)."""
        return list(self.structure.exchanges)

    def exchange_view(self) -> ExchangeView:
        """The exchanges by index without a copy (read-only; hold ``lock`` to read it
        while other threads write)."""
        return self.structure.exchanges

    def exchange_vector(self, index: int) -> np.ndarray:
        return self.structure.vectors.exchange(index)

    def node_vector(self, node: Node) -> np.ndarray:
        """An exchange's unit vector, or the direction of a topic's exchanges."""
        return self.structure.vectors.node(node)

    def snapshot(self) -> dict:
        """A canonical description of the tree, for comparing two trees node for node."""
        return self.structure.snapshot()

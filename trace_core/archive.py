"""Soft-archiving exchanges: out of the tree, retrieval and prompts, but kept and restorable."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .nodes import MessageNode, TopicNode

if TYPE_CHECKING:
    from .tree import CTree


def recompute_ranges(node: TopicNode) -> None:
    """Ranges bottom-up for ``node`` and everything below it."""
    for c in node.children:
        if c.is_topic:
            recompute_ranges(c)
    node.sort_children()
    node.recompute_range()


def prune_empty(tree: "CTree", topic: TopicNode | None) -> None:
    """Remove topics left without exchanges, walking up from ``topic``."""
    while topic is not None and topic is not tree.root and not topic.children:
        parent = topic.parent
        parent.remove_child(topic)
        if tree._vdb is not None:
            tree._vdb.delete_topic_summary(topic.node_id)
        topic = parent


def fix_current(tree: "CTree") -> None:
    """After nodes moved or vanished, the current node is the newest live exchange's topic."""
    live = [x for x in tree._exchanges if not x.archived and x.parent is not None]
    tree.current_node = live[-1].parent if live else tree.root


def detach(tree: "CTree", x: MessageNode) -> list[TopicNode]:
    """Take ``x`` out of the tree; returns the topics whose content changed."""
    parent = x.parent
    touched = tree.get_ancestors(parent)
    parent.remove_child(x)
    x.archived = True
    x.home_id = parent.node_id
    tree._archived_nodes.append(x)
    prune_empty(tree, parent)
    return touched


def attach(tree: "CTree", x: MessageNode) -> list[TopicNode]:
    """Put an archived exchange back: in its old topic if that still exists, else next
    to its nearest live neighbour in the conversation."""
    home = tree.find(x.home_id) if x.home_id else None
    if home is None or not home.is_topic:
        live = [y for y in tree._exchanges if not y.archived and y.parent is not None]
        before = [y for y in live if y.index < x.index]
        after = [y for y in live if y.index > x.index]
        anchor = before[-1] if before else (after[0] if after else None)
        home = anchor.parent if anchor is not None else None
    if home is None:
        home = TopicNode("Restored Exchanges", created_index=x.index)
        tree.root.add_child(home)
    tree._archived_nodes.remove(x)
    x.archived = False
    x.home_id = ""
    home.add_child(x)
    return tree.get_ancestors(home)


def archive_exchanges(tree: "CTree", exchanges: Iterable[MessageNode]) -> list[MessageNode]:
    """Soft-archive ``exchanges`` (one transaction when the tree has a store)."""
    with tree._lock:
        done = [x for x in exchanges if not x.archived and x.parent is not None]
        touched: list[TopicNode] = []
        for x in done:
            touched += detach(tree, x)
        _settle(tree, done, touched, archived=True)
        return done


def restore_exchanges(tree: "CTree", exchanges: Iterable[MessageNode] | None = None) -> list[MessageNode]:
    """Bring archived exchanges back (all of them by default)."""
    with tree._lock:
        todo = list(tree._archived_nodes if exchanges is None else exchanges)
        done = [x for x in todo if x.archived]
        touched: list[TopicNode] = []
        for x in sorted(done, key=lambda m: m.index):
            touched += attach(tree, x)
        _settle(tree, done, touched, archived=False)
        return done


def _settle(tree: "CTree", changed: list[MessageNode], touched: list[TopicNode], archived: bool) -> None:
    """Ranges, fan-out, current node, summaries, then one transaction on disk."""
    if not changed:
        return
    recompute_ranges(tree.root)
    for t in list(tree.root.iter_topics()):
        if t is not tree.root:
            tree.balancer.balance(t)
    tree.balancer.balance(tree.root)
    recompute_ranges(tree.root)
    fix_current(tree)
    tree._invalidate_sums()
    live = set(tree.root.iter_topics())
    tree._stale.update(t for t in touched if t in live and t is not tree.root)
    tree.refresh_frozen_summaries()
    if tree._store is not None:
        with tree._vdb.transaction():
            for x in changed:
                tree._vdb.set_exchange_archived(x.node_id, archived)
            tree._store.write_structure(tree)

"""Shared by the synthetic benchmarks: lay leaf topics out as a balanced tree."""

from __future__ import annotations

from trace_core import CTree
from trace_core.nodes import TopicNode


def layout_balanced(tree: CTree, leaves: list[TopicNode], max_children: int = 5) -> None:
    """Group ``leaves`` bottom-up, ``max_children`` at a time, under ROOT; the last leaf
    is the current topic (what a long conversation's fan-out leaves behind)."""
    level = leaves
    while len(level) > max_children:
        nxt = []
        for k in range(0, len(level), max_children):
            group = level[k : k + max_children]
            w = TopicNode(group[0].topic_name + " and more", created_index=group[0].created_index)
            for g in group:
                w.add_child(g)
            w.recompute_range()
            nxt.append(w)
        level = nxt
    for t in level:
        tree.root.add_child(t)
    tree.root.recompute_range()
    tree.current_node = leaves[-1]

"""The tree's invariants, checked by tests after every operation.

1. Every exchange sits in exactly one leaf position (or in the archive), once.
2. Parent links agree with child lists; no topic is empty (except an empty ROOT).
3. Children are in conversation order (by start index).
4. Every topic's ``[start_index:end_index]`` is exactly the min and max index of the
   exchanges below it. (After a merge a range may span exchanges of another branch:
   ranges cover, they are not disjoint.)
5. Fan-out: at most ``max_children`` exchange children and at most ``max_children``
   topic children per node.
6. The current node is a topic in the tree.
7. A topic's cached vector sum (its centroid before normalising) is the sum of the
   vectors of the exchanges below it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .tree import CTree


class InvariantError(AssertionError):
    pass


def check_invariants(tree: "CTree") -> None:
    seen: dict[int, str] = {}
    topics = list(tree.root.iter_topics())
    topic_set = set(topics)

    def fail(msg: str) -> None:
        raise InvariantError(msg)

    for t in topics:
        for c in t.children:
            if c.parent is not t:
                fail(f"{c.node_id} is a child of {t.topic_name} but its parent link says otherwise")
            if not c.is_topic:
                if c.index in seen:
                    fail(f"exchange {c.index} appears twice")
                if c.archived:
                    fail(f"archived exchange {c.index} is still in the tree")
                seen[c.index] = c.node_id
    for t in topics:  # after the links: a broken link is the cause, a wrong range its symptom
        starts = [c.start_index for c in t.children]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            fail(f"children of {t.topic_name} are not in conversation order: {starts}")
        indices = [m.index for m in t.iter_messages()]
        if not indices:
            if t is not tree.root:
                fail(f"topic {t.topic_name} ({t.node_id}) is empty")
        elif (t.start_index, t.end_index) != (min(indices), max(indices)):
            fail(f"{t.topic_name} has range [{t.start_index}:{t.end_index}] but covers [{min(indices)}:{max(indices)}]")
        if len(t.message_children) > tree.max_children:
            fail(f"{t.topic_name} has {len(t.message_children)} exchange children > {tree.max_children}")
        if len(t.topic_children) > tree.max_children:
            fail(f"{t.topic_name} has {len(t.topic_children)} topic children > {tree.max_children}")
    for m in tree.archived:
        if m.index in seen:
            fail(f"exchange {m.index} is both archived and in the tree")
        if not m.archived or m.parent is not None:
            fail(f"archived exchange {m.index} is still attached")
        seen[m.index] = m.node_id
    exchanges = tree.exchange_view()
    n = len(exchanges)
    if sorted(seen) != list(range(n)):
        missing = sorted(set(range(n)) - set(seen))
        fail(f"exchanges missing from the tree: {missing[:10]}")
    for i, x in enumerate(exchanges):
        if x.index != i or seen[i] != x.node_id:
            fail(f"exchange list out of step at {i}")
    if sum(len(x.messages) for x in exchanges) != len(tree.conversation):
        fail("conversation length does not match the exchanges")
    if tree.current_node not in topic_set:
        fail("the current node is not a topic in the tree")
    for t in topics:
        cached = tree.structure.vectors.cached_sum(t.node_id)
        if cached is None:
            continue
        known = [tree.structure.vectors.known(m.index) for m in t.iter_messages()]
        msgs = [v for v in known if v is not None]
        want = np.sum(msgs, axis=0) if msgs else np.zeros_like(cached)
        if not np.allclose(cached, want, atol=1e-3):
            fail(f"the cached vector sum of {t.topic_name} does not match its exchanges")

"""The tree model: nodes, exchanges, structure operations and the vector cache.

Services (placement, archive, reorganizer, sentence index, persistence, rendering) are
handed this model and change the tree only through its public surface; ``CTree`` is
the facade that wires them together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

import numpy as np

from .embedders import Embedder, exchange_vector, normalise
from .nodes import MessageNode, Node, TopicNode
from .rows import BrokenRowsError, NodeRow, node_rows, rebuild

ROOT_ID = "root"
ARROW = " → "


class ExchangeView(Sequence[MessageNode]):
    """The exchanges by index, archived ones included; read-only, never a copy."""

    __slots__ = ("_items",)

    def __init__(self, items: list[MessageNode]) -> None:
        self._items = items

    @overload
    def __getitem__(self, i: int) -> MessageNode: ...

    @overload
    def __getitem__(self, i: slice) -> list[MessageNode]: ...

    def __getitem__(self, i):
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[MessageNode]:
        return iter(self._items)


class VectorCache:
    """Unit vectors of exchanges (embedded on demand) and vector sums of topics.
    ``invalidate()`` after the structure changed: sums are rebuilt bottom-up on use."""

    def __init__(self, exchanges: Sequence[MessageNode], embedder: Callable[[], Embedder]) -> None:
        self._exchanges = exchanges
        self._embedder = embedder
        self._vectors: dict[int, np.ndarray] = {}  # exchange index -> unit vector
        self._sums: dict[str, np.ndarray] = {}  # topic id -> sum of its exchanges' vectors

    def exchange(self, index: int) -> np.ndarray:
        vec = self._vectors.get(index)
        if vec is None:
            x = self._exchanges[index]
            vec = exchange_vector(*self._embedder().embed_batch([x.user, x.assistant]))
            self._vectors[index] = vec
        return vec

    def known(self, index: int) -> np.ndarray | None:
        """The exchange's vector if cached (no embedding)."""
        return self._vectors.get(index)

    def set_exchange(self, index: int, vector: np.ndarray) -> None:
        self._vectors[index] = vector

    def replace_exchanges(self, vectors: dict[int, np.ndarray]) -> None:
        self._vectors = dict(vectors)
        self._sums.clear()

    def node(self, node: Node) -> np.ndarray:
        """An exchange's vector, or a topic's centroid direction."""
        if not node.is_topic:
            return self.exchange(node.index)
        return normalise(self.sum_of(node))

    def sum_of(self, node: TopicNode) -> np.ndarray:
        s = self._sums.get(node.node_id)
        if s is None:  # from the children's sums: each level is summed once, not per ancestor
            parts = [self.sum_of(c) if c.is_topic else self.exchange(c.index) for c in node.children]
            s = np.sum(parts, axis=0) if parts else np.zeros(self._embedder().dim, dtype=np.float32)
            self._sums[node.node_id] = s
        return s

    def cached_sum(self, topic_id: str) -> np.ndarray | None:
        return self._sums.get(topic_id)

    def start_sum(self, topic: TopicNode, like: np.ndarray) -> None:
        """A new, empty topic: its sum is known (zero) without a walk."""
        self._sums[topic.node_id] = np.zeros_like(like)

    def add_to_sum(self, topic: TopicNode, vector: np.ndarray) -> None:
        """An exchange joined below ``topic``: a cached sum follows (others are built on use)."""
        if topic.node_id in self._sums:
            self._sums[topic.node_id] = self._sums[topic.node_id] + vector

    def forget(self, topic: TopicNode) -> None:
        self._sums.pop(topic.node_id, None)

    def invalidate(self) -> None:
        self._sums.clear()


class TreeModel:
    """The structure of one conversation: ROOT and its topics, the exchanges by index
    (archived ones included), the current topic, topics whose summary is stale, and the
    vector cache."""

    def __init__(self, embedder: Callable[[], Embedder]) -> None:
        self.root = TopicNode("ROOT", node_id=ROOT_ID)
        self.current: TopicNode = self.root
        self.conversation: list[dict] = []
        # bumped when messages already in ``conversation`` change (a replace, a forget): what
        # is computed from it by count alone went stale (/stats' whole history: a trial)
        self.text_revision = 0
        self._exchanges: list[MessageNode] = []
        self._archived: list[MessageNode] = []
        self.exchanges = ExchangeView(self._exchanges)
        self.vectors = VectorCache(self.exchanges, embedder)
        self.stale: set[TopicNode] = set()  # topics whose summary is out of date

    # --- reading ----------------------------------------------------------------------------

    @property
    def archived(self) -> list[MessageNode]:
        """The soft-archived exchanges (a copy)."""
        return list(self._archived)

    def get_ancestors(self, node: Node, include_self: bool = True, exclude_root: bool = False) -> list[TopicNode]:
        """From the top down: ``[ROOT, ..., node]``."""
        chain = []
        cur = node if include_self else node.parent
        while cur is not None:
            chain.append(cur)
            cur = cur.parent
        chain.reverse()
        if exclude_root and chain and chain[0] is self.root:
            chain = chain[1:]
        return chain

    def active_path(self) -> list[TopicNode]:
        return self.get_ancestors(self.current)

    def thread_path(self, node: Node) -> str:
        return ARROW.join(n.topic_name for n in self.get_ancestors(node if node.is_topic else node.parent))

    def is_frozen(self, node: Node) -> bool:
        """Off the active ancestry path (only frozen topics may be reorganised)."""
        if node.is_topic:
            return node not in set(self.active_path())
        return node.parent is not None and node.parent is not self.current

    def find(self, node_id: str) -> Node | None:
        for t in self.root.iter_topics():
            if t.node_id == node_id:
                return t
            for c in t.children:
                if not c.is_topic and c.node_id == node_id:
                    return c
        return None

    def live_exchanges(self) -> list[MessageNode]:
        return [x for x in self._exchanges if not x.archived and x.parent is not None]

    def texts(self, node: TopicNode, limit: int = 8) -> list[tuple[str, str]]:
        """(user, assistant) of the first ``limit`` exchanges below ``node``."""
        out = []
        for m in node.iter_messages():
            out.append((m.user, m.assistant))
            if len(out) >= limit:
                break
        return out

    def rows(self) -> list[NodeRow]:
        return node_rows(self.root, self._archived)

    # --- changing ------------------------------------------------------------------------------

    def append(self, node: MessageNode, parent: TopicNode, vector: np.ndarray) -> None:
        """A new exchange (the next index) under ``parent``, which becomes current."""
        parent.add_child(node)
        self._exchanges.append(node)
        self.vectors.set_exchange(node.index, vector)
        self.conversation.extend(dict(m) for m in node.messages)
        for t in self.get_ancestors(parent):
            if t.start_index < 0:
                t.start_index = node.index
            t.end_index = node.index
            self.vectors.add_to_sum(t, vector)
            self.stale.add(t)
        self.current = parent

    def replace_last(self, messages: list[dict], vector: np.ndarray, timestamp: str) -> int:
        """The newest exchange's messages replaced (same node, same topic, its vector and
        the sums above it follow); returns the index of its first message in the
        conversation."""
        node = self._exchanges[-1]
        delta = vector - self.vectors.exchange(node.index)
        first = len(self.conversation) - len(node.messages)
        node.messages = [dict(m) for m in messages]
        node.timestamp = timestamp
        self.conversation[first:] = [dict(m) for m in messages]
        self.text_revision += 1
        self.vectors.set_exchange(node.index, vector)
        for t in self.get_ancestors(node.parent):
            self.vectors.add_to_sum(t, delta)
            self.stale.add(t)
        return first

    def first_message_indices(self) -> list[int]:
        """Where each exchange's first message is in ``conversation``, by exchange index."""
        out, at = [], 0
        for x in self._exchanges:
            out.append(at)
            at += len(x.messages)
        return out

    def register(self, node: MessageNode, vector: np.ndarray) -> None:
        """An exchange already linked into a structure built by hand (benchmarks,
        imports): the next index, its vector, its messages."""
        self._exchanges.append(node)
        self.vectors.set_exchange(node.index, vector)
        self.conversation.extend(dict(m) for m in node.messages)

    def detach(self, x: MessageNode) -> tuple[list[TopicNode], list[TopicNode]]:
        """Take ``x`` out of the tree (archived, restorable). Returns the topics whose
        content changed and the topics removed because it left them empty."""
        parent = x.parent
        touched = self.get_ancestors(parent)
        parent.remove_child(x)
        x.archived = True
        x.home_id = parent.node_id
        self._archived.append(x)
        return touched, self.prune_empty(parent)

    def attach(self, x: MessageNode) -> list[TopicNode]:
        """Put an archived exchange back: in its old topic if that still exists, else next
        to its nearest live neighbour in the conversation. Returns the topics it joined."""
        home = self.find(x.home_id) if x.home_id else None
        if home is None or not home.is_topic:
            live = self.live_exchanges()
            before = [y for y in live if y.index < x.index]
            after = [y for y in live if y.index > x.index]
            anchor = before[-1] if before else (after[0] if after else None)
            home = anchor.parent if anchor is not None else None
        if home is None:
            home = TopicNode("Restored Exchanges", created_index=x.index)
            self.root.add_child(home)
        self._archived.remove(x)
        x.archived = False
        x.home_id = ""
        home.add_child(x)
        return self.get_ancestors(home)

    def prune_empty(self, topic: TopicNode | None) -> list[TopicNode]:
        """Remove topics left without children, walking up from ``topic``; returns them."""
        removed = []
        while topic is not None and topic is not self.root and not topic.children:
            parent = topic.parent
            parent.remove_child(topic)
            removed.append(topic)
            topic = parent
        return removed

    def dissolve(self, group: TopicNode) -> None:
        """A group left holding one part gives way to it: a group of one says nothing, and
        is named as its part (after a merge took its other parts, "Caroline Mel Melanie"
        over "Caroline Mel Melanie")."""
        (part,) = group.children
        parent = group.parent
        group.remove_child(part)
        parent.remove_child(group)
        parent.add_child(part)
        parent.sort_children()

    def recompute_ranges(self, node: TopicNode | None = None) -> None:
        """Children sorted and ranges recomputed bottom-up, for ``node`` (ROOT) and below."""
        node = node or self.root
        for c in node.children:
            if c.is_topic:
                self.recompute_ranges(c)
        node.sort_children()
        node.recompute_range()

    def fix_current(self) -> None:
        """After nodes moved or vanished, the current node is the newest live exchange's topic."""
        live = self.live_exchanges()
        self.current = live[-1].parent if live else self.root

    def replace_structure(self, rows: Iterable[NodeRow], current_id: str | None,
                          make_exchange: Callable[[NodeRow], MessageNode] | None = None,
                          conversation: list[dict] | None = None) -> None:
        """The structure ``rows`` describe (the one rebuild: session open, undo, import).
        With ``make_exchange`` the exchanges are made from their rows (read from a file)
        and replace the model's; without, the model's own exchanges are relinked (undo).
        Raises ``BrokenRowsError``."""
        made: list[MessageNode] = []
        if make_exchange is None:
            by_index = {x.index: x for x in self._exchanges}

            def exchange_for(r: NodeRow) -> MessageNode:
                x = by_index.get(r.exchange_index)
                if x is None:
                    raise BrokenRowsError(f"exchange {r.exchange_index} has a tree node but is not in the tree")
                return x
        else:
            def exchange_for(r: NodeRow) -> MessageNode:
                x = make_exchange(r)
                made.append(x)
                return x

        nodes = rebuild(rows, self.root, exchange_for)
        if make_exchange is not None:
            made.sort(key=lambda m: m.index)
            if [m.index for m in made] != list(range(len(made))):
                raise BrokenRowsError("the exchanges are not numbered 0..n-1")
            self._exchanges[:] = made
            self.conversation[:] = conversation if conversation is not None else [
                dict(m) for x in made for m in x.messages]
            self.text_revision += 1
        self._archived[:] = [x for x in self._exchanges if x.archived]
        current = nodes.get(current_id or "")
        self.current = current if current is not None and current.is_topic else self.root
        self.vectors.invalidate()
        self.stale.clear()

    def snapshot(self) -> dict:
        """A canonical description of the tree, for comparing two trees node for node."""

        def walk(n: Node):
            if n.is_topic:
                return ("T", n.node_id, n.topic_name, n.summary, n.start_index, n.end_index,
                        tuple(walk(c) for c in n.children))
            return ("M", n.node_id, n.index, n.timestamp, tuple((m["role"], m["content"]) for m in n.messages))

        return {
            "root": walk(self.root),
            "current": self.current.node_id,
            "archived": tuple(sorted(walk(m) for m in self._archived)),
            "conversation": tuple((m["role"], m["content"]) for m in self.conversation),
        }

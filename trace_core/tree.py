"""CTree: the context tree of a conversation (ChatIndex's tree, TRACE's API)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import numpy as np

from . import events as ev
from .embedders import Embedder, as_embedder, normalise
from .fanout import FanoutBalancer
from .judges import EmbeddingJudge, Judges, LLMJudge, Placement, PlacementContext
from .nodes import MessageNode, Node, TopicNode
from .persist import TreeStore, tree_from_json, tree_to_json
from .store import ConversationVector, ReadOnlySessionError, VectorDatabase, message_id
from .textutil import message_parts

ROOT_ID = "root"
ARROW = " → "


class SessionConflictError(RuntimeError):
    pass


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` as UTF-8 can hold it: surrogate pairs left split (e.g. by a JSON decoder)
    are joined, lone surrogates become U+FFFD. SQLite and the tokenizer refuse them."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _validate(messages) -> list[dict]:
    """The exchange's messages (made storable), or ``ValueError`` naming what is wrong."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"add() takes a list of messages, got {type(messages).__name__}")
    out: list[dict] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"message {i} is a {type(m).__name__}, not a dict with 'role' and 'content'")
        role, content = m.get("role"), m.get("content")
        if role not in ("user", "assistant", "system"):
            raise ValueError(f"message {i} has role {role!r}; expected 'user', 'assistant' or 'system'")
        if not isinstance(content, str):
            raise ValueError(f"message {i} ({role}) has content of type {type(content).__name__}, not str")
        if not content.strip():
            raise ValueError(f"message {i} ({role}) has empty content")
        out.append({"role": role, "content": storable(content)})
    roles = [m["role"] for m in out]
    for needed in ("user", "assistant"):
        if roles.count(needed) != 1:
            what = "no" if roles.count(needed) == 0 else "more than one"
            raise ValueError(f"an exchange needs exactly one {needed} message; got {what}")
    if roles.count("system") > 1:
        raise ValueError("an exchange takes at most one system message")
    return out


class CTree:
    def __init__(
        self,
        max_children: int = 5,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str = "gpt-4o-mini",
        auto_save_path: str | None = None,
        embed_fn=None,
        judge: str = "auto",
        *,
        embedding_judge: EmbeddingJudge | None = None,
        llm_timeout: float = 30.0,
        llm_judge=None,
    ) -> None:
        if not isinstance(max_children, int) or max_children < 2:
            raise ValueError("max_children must be an integer ≥ 2")
        self.max_children = max_children
        self.model = model
        self.auto_save_path = auto_save_path
        self.events = ev.EventBus()
        self._lock = threading.RLock()
        self._embed: Embedder | None = as_embedder(embed_fn)
        self._judge_mode = judge
        self._api_key, self._base_url = api_key, base_url
        llm = llm_judge
        if llm is None and judge != "embedding":
            from .llm import JSONLLM

            llm = LLMJudge(JSONLLM(model, api_key=api_key, base_url=base_url, timeout=llm_timeout))
        self.judges = Judges(judge, embedding_judge or EmbeddingJudge(), llm, self._on_llm_failure)
        self.root = TopicNode("ROOT", node_id=ROOT_ID)
        self.current_node: TopicNode = self.root
        self.conversation: list[dict] = []
        self._archived_nodes: list[MessageNode] = []
        self._exchanges: list[MessageNode] = []  # by index, archived ones included
        self._vectors: dict[int, np.ndarray] = {}  # exchange index -> unit vector
        self._sums: dict[str, np.ndarray] = {}  # topic id -> sum of its exchanges' vectors
        self._stale: set[TopicNode] = set()  # topics whose summary is out of date
        self._vdb: VectorDatabase | None = None
        self._store: TreeStore | None = None
        self._last_reorganize = None  # (op_id, state) when there is no store
        self.balancer = FanoutBalancer(max_children, self._node_vector, self._name_group, self._stale.add)

    # --- public attributes ---------------------------------------------------------------

    @property
    def embed_fn(self) -> Embedder:
        """The embedder (callable as ``embed_fn(text) -> list[float]``); MiniLM unless set."""
        if self._embed is None:
            from .embedders import MiniLMEmbedder

            self._embed = MiniLMEmbedder()
        return self._embed

    @embed_fn.setter
    def embed_fn(self, fn) -> None:
        self._embed = as_embedder(fn)

    @property
    def judge(self) -> str:
        return self._judge_mode

    @property
    def vdb(self) -> VectorDatabase | None:
        return self._vdb

    @vdb.setter
    def vdb(self, db: VectorDatabase | None) -> None:
        """Make ``db`` the session's store. An empty store receives this tree; a store
        holding a session is adopted by an empty tree; two different sessions conflict."""
        self.use_store(db)

    def use_store(self, db: VectorDatabase | None, *, progress: Callable[[int, int], None] | None = None) -> None:
        """``tree.vdb = db``, with ``progress(done, total)`` called after each exchange an
        empty store receives (a long JSON import). An exception it raises abandons the
        import: nothing is committed, the tree keeps no store, and the exception propagates."""
        with self._lock:
            if db is None:
                self._vdb, self._store = None, None
                return
            store = TreeStore(db)
            if store.has_tree():
                if self._exchanges:
                    raise SessionConflictError(
                        f"{db.path} already holds a conversation and this tree has its own; "
                        "open the file with CTree.open() or use a new file"
                    )
                self._vdb, self._store = db, store
                store.load_into(self)
                return
            if self._exchanges and db.read_only:
                raise ReadOnlySessionError(db.path, "receive this tree")
            self._vdb, self._store = db, store
            if self._exchanges:
                try:
                    self._check_embedder()
                    store.write_everything(self, progress)
                except BaseException:
                    self._vdb, self._store = None, None
                    raise

    # --- helpers ---------------------------------------------------------------------------

    def _on_llm_failure(self, task: str, problem: str) -> None:
        self.events.emit(ev.LLMFailed(task, problem, level="warning"))

    def _check_embedder(self) -> None:
        if self._vdb is not None:
            self._vdb.check_embedder(self.embed_fn.name, self.embed_fn.dim)

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

    def thread_path(self, node: Node) -> str:
        names = [n.topic_name for n in self.get_ancestors(node if node.is_topic else node.parent)]
        return ARROW.join(names)

    def active_path(self) -> list[TopicNode]:
        return self.get_ancestors(self.current_node)

    def is_frozen(self, node: Node) -> bool:
        """Off the active ancestry path (only frozen topics may be reorganised)."""
        if node.is_topic:
            return node not in set(self.active_path())
        return node.parent is not None and node.parent is not self.current_node

    def find(self, node_id: str) -> Node | None:
        for t in self.root.iter_topics():
            if t.node_id == node_id:
                return t
            for c in t.children:
                if not c.is_topic and c.node_id == node_id:
                    return c
        return None

    def iter_topics(self) -> Iterable[TopicNode]:
        return self.root.iter_topics()

    @property
    def exchanges(self) -> list[MessageNode]:
        return list(self._exchanges)

    def exchange_vector(self, index: int) -> np.ndarray:
        vec = self._vectors.get(index)
        if vec is None:
            x = self._exchanges[index]
            vecs = self.embed_fn.embed_batch([x.user, x.assistant])
            vec = normalise(vecs.mean(axis=0))
            self._vectors[index] = vec
        return vec

    def _node_vector(self, node: Node) -> np.ndarray:
        if not node.is_topic:
            return self.exchange_vector(node.index)
        return normalise(self._sum_of(node))

    def _sum_of(self, node: TopicNode) -> np.ndarray:
        s = self._sums.get(node.node_id)
        if s is None:  # from the children's sums: each level is summed once, not per ancestor
            parts = [self._sum_of(c) if c.is_topic else self.exchange_vector(c.index) for c in node.children]
            s = np.sum(parts, axis=0) if parts else np.zeros(self.embed_fn.dim, dtype=np.float32)
            self._sums[node.node_id] = s
        return s

    def _invalidate_sums(self) -> None:
        self._sums.clear()

    def _texts(self, node: TopicNode, limit: int = 8) -> list[tuple[str, str]]:
        out = []
        for m in node.iter_messages():
            out.append((m.user, m.assistant))
            if len(out) >= limit:
                break
        return out

    def _name_group(self, group: list[Node]) -> str:
        """A name for a new grouping topic: from its subtopics' names (short texts: this
        runs for every group the fan-out creates), or from its exchanges."""
        texts: list[tuple[str, str]] = []
        for n in group:
            if n.is_topic:
                texts.append((n.topic_name, ""))
            else:
                texts.append((n.user, n.assistant))
        return self.judges.name_topic(texts)

    # --- adding an exchange -----------------------------------------------------------------

    def add(self, messages, timestamp: str | None = None) -> MessageNode:
        """Store one completed exchange (user + assistant, optional system message)."""
        msgs = _validate(messages)
        self._refuse_if_read_only("add an exchange")
        started = time.perf_counter()
        ts = timestamp or datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            index = len(self._exchanges)
            node = MessageNode(index, msgs, ts)
            role_texts = [m["content"] for m in msgs]
            vecs = self.embed_fn.embed_batch(role_texts)
            if self._vdb is not None and index == 0:
                self._check_embedder()
            role_vecs = dict(zip([m["role"] for m in msgs], vecs))
            vector = normalise(role_vecs["user"] + role_vecs["assistant"])
            self.judges.embedding.observe(node.user, node.assistant)
            placement = self.judges.place(self._context(node, vector))
            old_path = self.active_path()
            topic = self._place(node, vector, placement)
            new_topics = [topic] if placement.action == "new" else []
            new_topics += self._balance_path()
            new_path = self.active_path()
            frozen = self._freeze(old_path, new_path, new_topics)
            self._persist_add(node, msgs, vecs, frozen, new_topics)
        elapsed = time.perf_counter() - started
        self.events.emit(ev.JudgeDecided(placement.judge, placement.action, topic.topic_name, placement.reason, index))
        if frozen:
            self.events.emit(ev.TopicsFrozen(tuple(t.topic_name for t in frozen), level="debug"))
        self.events.emit(ev.ExchangeAdded(index, node.node_id, self.thread_path(node), elapsed, level="debug"))
        if self.auto_save_path:
            self.save(self.auto_save_path)
        return node

    def _context(self, node: MessageNode, vector: np.ndarray) -> PlacementContext:
        path = self.active_path()
        recent = None
        if self.current_node is not self.root:
            tail = self.current_node.message_children[-3:]
            if tail:
                recent = normalise(np.sum([self.exchange_vector(m.index) for m in tail], axis=0))
            else:
                recent = self._node_vector(self.current_node)
        path_vecs = [None] + [self._node_vector(t) for t in path[1:]]
        return PlacementContext([t.topic_name for t in path], node.user, node.assistant, vector, recent, path_vecs)

    def _place(self, node: MessageNode, vector: np.ndarray, placement: Placement) -> TopicNode:
        path = self.active_path()
        if placement.action == "continue" and self.current_node is not self.root:
            parent = self.current_node
        else:
            anchor = path[min(max(placement.parent_level, 0), len(path) - 1)]
            parent = TopicNode(placement.name or "New Topic", created_index=node.index)
            anchor.add_child(parent)
            self._sums[parent.node_id] = np.zeros_like(vector)
        parent.add_child(node)
        self._exchanges.append(node)
        self._vectors[node.index] = vector
        self.conversation.extend(dict(m) for m in node.messages)
        for t in self.get_ancestors(parent):
            if t.start_index < 0:
                t.start_index = node.index
            t.end_index = node.index
            if t.node_id in self._sums:
                self._sums[t.node_id] = self._sums[t.node_id] + vector
            self._stale.add(t)
        self.current_node = parent
        return parent

    def _balance_path(self) -> list[TopicNode]:
        """Apply the fan-out bounds along the active path, deepest first."""
        created: list[TopicNode] = []
        for t in reversed(self.active_path()):
            made = self.balancer.balance(t)
            created += made
            for w in made + [t]:  # new topics, and t itself after a leaf split
                self._sums.pop(w.node_id, None)
            if made and self.current_node is t:
                # the newest exchange now sits in the last subtopic: continue there
                newest = self._exchanges[-1]
                self.current_node = newest.parent
        return created

    def _freeze(self, old_path, new_path, new_topics) -> list[TopicNode]:
        """Summarise topics that just left the active path (or were created off it)."""
        on_path = set(new_path)
        candidates = [t for t in list(old_path) + list(new_topics) if t not in on_path and t is not self.root]
        frozen = [t for t in dict.fromkeys(candidates) if t.parent is not None and (t in self._stale or not t.summary)]
        self._summarize(frozen)
        return frozen

    def _summarize(self, topics: list[TopicNode]) -> None:
        for t in topics:
            t.summary = self.judges.summarize(self._texts(t))
            self._stale.discard(t)

    def summary_vectors(self, topics: list[TopicNode]) -> np.ndarray:
        """The vectors topics are indexed under in ``topic_summaries``.

        With LLM-written summaries: the summary's embedding blended with the centroid of
        the topic's exchanges. With extractive summaries (embedding and auto judges) the
        summary is a few of those exchanges' own sentences, so the centroid alone
        represents the topic better, and costs no embedding call inside ``add()``.
        """
        centroids = np.array([self._node_vector(t) for t in topics], dtype=np.float32)
        if self._judge_mode != "llm":
            return centroids
        texts = self.embed_fn.embed_batch([f"{t.topic_name}. {t.summary}" for t in topics])
        return normalise(texts + centroids)

    def _persist_add(self, node, msgs, vecs, frozen, new_topics) -> None:
        if self._store is None:
            return
        self._store.persist_add(self, node, msgs, vecs, frozen, new_topics)

    # --- summaries and display ------------------------------------------------------------------

    def refresh_frozen_summaries(self) -> list[TopicNode]:
        """Summarise, in memory, frozen topics whose content changed (new topics too)."""
        path = set(self.active_path())
        todo = [t for t in self.root.iter_topics()
                if t is not self.root and t not in path and (t in self._stale or not t.summary)]
        self._summarize(todo)
        return todo

    def generate_summaries(self) -> int:
        """Summarise every topic whose summary is missing or out of date. Returns how many."""
        self._refuse_if_read_only("store summaries")
        with self._lock:
            todo = [t for t in self.root.iter_topics() if t is not self.root and (t in self._stale or not t.summary)]
            self._summarize(todo)
            if self._store is not None:
                self._store.write_topics(self, todo)
            return len(todo)

    def render_tree(self, node: TopicNode | None = None, show_messages: bool = False) -> str:
        from .render import render_tree

        return render_tree(self, node or self.root, show_messages)

    def print_tree(self, node: TopicNode | None = None, indent: int = 0, show_messages: bool = False) -> None:
        text = self.render_tree(node, show_messages)
        pad = " " * indent
        print("\n".join(pad + line for line in text.splitlines()))

    # --- persistence ----------------------------------------------------------------------------

    def save(self, filepath: str, save_conversation: bool = False) -> None:
        """Export the tree as JSON (format-versioned); written atomically."""
        with self._lock:
            tree_to_json(self, filepath, save_conversation)

    @classmethod
    def load(cls, filepath: str, api_key=None, base_url=None, model=None, embed_fn=None, **kwargs) -> "CTree":
        """Import a JSON export. A corrupt or foreign file raises ``SessionFileError``."""
        return tree_from_json(cls, filepath, api_key=api_key, base_url=base_url, model=model,
                              embed_fn=embed_fn, **kwargs)

    @classmethod
    def open(cls, path: str, api_key=None, base_url=None, model: str = "gpt-4o-mini", embed_fn=None,
             judge: str = "auto", max_children: int = 5, *, read_only: bool = False, **kwargs) -> "CTree":
        """Open (or create) a session file and restore its tree exactly.

        The tree holds the file's writer lock until ``tree.vdb.close()``: a second writer
        gets ``SessionLockedError``. ``read_only=True`` takes no lock, never writes, and
        refuses ``add()`` (and every other change) with ``ReadOnlySessionError``."""
        db = VectorDatabase(path, read_only=read_only)
        try:
            tree = cls(max_children=max_children, api_key=api_key, base_url=base_url, model=model,
                       embed_fn=embed_fn, judge=judge, **kwargs)
            store = TreeStore(db)
            if store.has_tree():
                stored_max = store.stored_max_children()
                if stored_max:
                    tree.max_children = tree.balancer.max_children = stored_max
            tree.vdb = db
            tree._check_embedder_if_any()
        except BaseException:
            db.close()  # a refused file keeps no lock
            raise
        return tree

    @property
    def read_only(self) -> bool:
        """Opened with ``read_only=True``: reading and searching only."""
        return self._vdb is not None and self._vdb.read_only

    def _refuse_if_read_only(self, action: str) -> None:
        if self._vdb is not None and self._vdb.read_only:
            raise ReadOnlySessionError(self._vdb.path, action)

    def _check_embedder_if_any(self) -> None:
        if self._vdb is not None and self._vdb.get_meta("embed_model") is not None:
            self._check_embedder()

    def snapshot(self) -> dict:
        """A canonical description of the tree, for comparing two trees node for node."""

        def walk(n: Node):
            if n.is_topic:
                return ("T", n.node_id, n.topic_name, n.summary, n.start_index, n.end_index,
                        tuple(walk(c) for c in n.children))
            return ("M", n.node_id, n.index, n.timestamp, tuple((m["role"], m["content"]) for m in n.messages))

        return {
            "root": walk(self.root),
            "current": self.current_node.node_id,
            "archived": tuple(sorted(walk(m) for m in self._archived_nodes)),
            "conversation": tuple((m["role"], m["content"]) for m in self.conversation),
        }

    # --- conversation vectors ------------------------------------------------------------------

    def conversation_vectors_for(self, node: MessageNode, first: int, vecs: np.ndarray) -> list[ConversationVector]:
        """The exchange's messages as conversation vectors; ``first`` is the index of its
        first message in ``conversation``."""
        msgs = node.messages
        path = self.thread_path(node) if node.parent is not None else ""
        return [
            ConversationVector(message_id(node.index, m["role"]), first + i, m["role"], m["content"], vecs[i],
                               node.timestamp, path, 0.0, node.node_id, node.index)
            for i, m in enumerate(msgs)
        ]

    # --- sentence index (idle time) --------------------------------------------------------------

    def _parts_indexed(self) -> int:
        """How many exchanges, from the first, have their parts in the store."""
        return int(self._vdb.get_meta("parts_indexed") or 0)

    def pending_parts(self) -> int:
        """Exchanges whose sentences are not embedded yet (see ``index_pending``)."""
        return 0 if self._vdb is None else len(self._exchanges) - self._parts_indexed()

    def _previous_text(self, x: MessageNode, m: dict) -> str:
        """What a message answers: the message before it in the conversation."""
        if m["role"] == "assistant":
            return x.user
        if m["role"] == "user" and x.index > 0:
            return self._exchanges[x.index - 1].assistant
        return ""

    def index_pending(self, max_exchanges: int | None = None, batch: int = 32) -> int:
        """Embed the parts of messages (``textutil.message_parts``: their sentences, and
        each read after the message it answers) for exchanges not done yet; returns how
        many exchanges were done. Retrieval scores a message by its best part too.

        This is idle-time work, kept off ``add()`` (it doubles the embedding cost of an
        exchange): Nexus runs it in the background after each reply; a library user calls
        it when convenient. Retrieval works without it, with message vectors only."""
        if self._vdb is None or self._vdb.read_only:
            return 0
        done = 0
        while max_exchanges is None or done < max_exchanges:
            with self._lock:
                start = self._parts_indexed()
                stop = min(len(self._exchanges), start + batch)
                if max_exchanges is not None:
                    stop = min(stop, start + max_exchanges - done)
                todo = [(message_id(x.index, m["role"]), message_parts(m["content"], self._previous_text(x, m)))
                        for x in self._exchanges[start:stop] for m in x.messages]
            if stop <= start:
                break
            texts = [t for _, parts in todo for t in parts]
            vecs = self.embed_fn.embed_batch(texts) if texts else []  # outside the lock
            rows, k = [], 0
            for mid, parts in todo:
                for p, t in enumerate(parts):
                    rows.append((mid, p, t, normalise(vecs[k])))
                    k += 1
            with self._lock, self._vdb.transaction():
                if self._parts_indexed() != start:
                    continue  # another thread did this batch meanwhile
                self._vdb.add_message_parts(rows)
                self._vdb.set_meta("parts_indexed", str(stop))
            done += stop - start
        return done

    # --- consolidation ---------------------------------------------------------------------------

    def reorganize(self, embed_fn=None, similarity_threshold: float = 0.55, prune_trivial_leaves: bool = False) -> dict:
        """Merge similar frozen topics (the four axioms) and optionally archive trivial
        exchanges. Returns ``merged``, ``pruned``, ``skipped``, ``vetoed``, ``duration_secs``…"""
        from .reorganize import Reorganizer

        self._refuse_if_read_only("reorganise it")
        return Reorganizer(self).run(embed_fn, similarity_threshold, prune_trivial_leaves)

    def undo_reorganize(self) -> dict:
        """Restore the tree exactly as before the last ``reorganize()``."""
        from .reorganize import undo_reorganize

        self._refuse_if_read_only("undo a reorganisation")
        return undo_reorganize(self)

    def archive(self, exchanges) -> list[MessageNode]:
        from .archive import archive_exchanges

        self._refuse_if_read_only("archive exchanges")
        return archive_exchanges(self, exchanges)

    def restore_archived(self, exchanges=None) -> list[MessageNode]:
        """Bring soft-archived exchanges back into the tree (all by default)."""
        from .archive import restore_exchanges

        self._refuse_if_read_only("restore exchanges")
        return restore_exchanges(self, exchanges)

    def replace_last(self, messages, timestamp: str | None = None) -> MessageNode:
        """Replace the newest exchange with ``messages`` (a regenerated or edited turn): the
        same node in the same topic, its vectors, stored rows and sentence index redone, so
        memory never holds both the old exchange and the new one."""
        msgs = _validate(messages)
        self._refuse_if_read_only("replace an exchange")
        with self._lock:
            if not self._exchanges:
                raise ValueError("there is no exchange to replace")
            node = self._exchanges[-1]
            if node.archived or node.parent is None:
                raise ValueError(f"exchange #{node.index} is archived: restore it before replacing it")
            vecs = self.embed_fn.embed_batch([m["content"] for m in msgs])
            role_vecs = dict(zip([m["role"] for m in msgs], vecs))
            vector = normalise(role_vecs["user"] + role_vecs["assistant"])
            delta = vector - self.exchange_vector(node.index)
            old_ids = [message_id(node.index, m["role"]) for m in node.messages]
            first = len(self.conversation) - len(node.messages)
            node.messages = [dict(m) for m in msgs]
            node.timestamp = timestamp or datetime.now(UTC).isoformat(timespec="seconds")
            self.conversation[first:] = [dict(m) for m in msgs]
            self._vectors[node.index] = vector
            for t in self.get_ancestors(node.parent):
                if t.node_id in self._sums:
                    self._sums[t.node_id] = self._sums[t.node_id] + delta
                self._stale.add(t)
            if self._vdb is not None:
                with self._vdb.transaction():
                    self._vdb.delete_exchange_rows(node.index, old_ids)
                    self._vdb.append_messages(node.index, first, msgs, node.timestamp)
                    for cv in self.conversation_vectors_for(node, first, vecs):
                        self._vdb.add_conversation_message(cv)
                    if self._parts_indexed() > node.index:  # its sentences are embedded again at idle time
                        self._vdb.set_meta("parts_indexed", str(node.index))
        if self.auto_save_path:
            self.save(self.auto_save_path)
        return node

    def on_event(self, fn: Callable[[ev.EngineEvent], None]) -> Callable[[], None]:
        return self.events.subscribe(fn)

"""CTree: the context tree of a conversation (ChatIndex's tree, TRACE's API)."""

from __future__ import annotations

import asyncio
import numbers
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np

from . import events as ev
from .archive import Archive
from .embedders import Embedder, EmbedFnLike, as_embedder, exchange_vector
from .errors import SessionDamagedError
from .exchange_input import storable, validate_exchange, validate_timestamp
from .fanout import FanoutBalancer, max_children_problem
from .forget import ForgetResult, Forgetting
from .group_names import GroupNames
from .judges import EmbeddingJudge, Judges, LLMJudge
from .model import ARROW, ROOT_ID, TreeModel
from .nodes import MessageNode, TopicNode
from .persist import TreeStore, conversation_vectors, load_json, open_session, stored_max_children, tree_to_json
from .placement import Placer
from .render import render_tree
from .reorganize import Reorganizer, UndoError, UndoLog, undo_reorganize
from .schema import meta_problem
from .sentence_index import SentenceIndex
from .store import ConversationVector, ReadOnlySessionError, SessionFileError, VectorDatabase, message_id
from .summaries import Summaries
from .textutil import DocumentFrequency
from .tree_view import TreeReading

__all__ = ["ARROW", "ROOT_ID", "CTree", "SessionConflictError", "storable"]


class SessionConflictError(RuntimeError):
    pass


def _check_model(name: object) -> None:
    if not isinstance(name, str) or not name.strip():  # 5 was asked for as model 5, failing every call
        raise ValueError(f"model must be the memory model's name at the server (text), not {name!r}")


def _check_settings(model: object, api_key: object, base_url: object, auto_save_path: object,
                    llm_timeout: object) -> None:
    """The constructor's settings, refused in words before anything is made: an
    ``auto_save_path`` of 5 raised TypeError from add() after the exchange was stored (a
    caller's retry stores it twice); ``base_url=5`` said "'int' object has no attribute
    'rstrip'" (a developer's trial)."""
    _check_model(model)
    for name, value in (("api_key", api_key), ("base_url", base_url)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be text or None, not {type(value).__name__}")
    if auto_save_path is not None and (not isinstance(auto_save_path, (str, bytes, os.PathLike))
                                       or not os.fspath(auto_save_path)):
        raise TypeError(f"auto_save_path must be a file path or None, not {auto_save_path!r}")
    # numpy's numbers too (np.float32(30) was refused)
    if isinstance(llm_timeout, (bool, np.bool_)) or not isinstance(llm_timeout, numbers.Real) \
            or not float(llm_timeout) > 0:
        raise ValueError(f"llm_timeout must be a number of seconds above 0, not {llm_timeout!r}")


class CTree(TreeReading):
    """The public facade (the TRACE README's API). Behind it: the tree model
    (``structure``) and the services handed what they use — placement, summaries,
    archive, reorganizer, sentence index, persistence (``TreeStore``), rendering."""

    def __init__(
        self,
        max_children: int = 5,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str = "gpt-4o-mini",
        auto_save_path: str | None = None,
        embed_fn: EmbedFnLike = None,
        judge: str = "auto",
        *,
        embedding_judge: EmbeddingJudge | None = None,
        llm_timeout: float = 30.0,
        llm_judge: LLMJudge | None = None,
    ) -> None:
        fanout_problem = max_children_problem(max_children)
        if fanout_problem:
            raise ValueError(fanout_problem)
        _check_settings(model, api_key, base_url, auto_save_path, llm_timeout)
        self.max_children = max_children
        self._model = model
        self.auto_save_path = auto_save_path
        # an application's rows read from a JSON export (``save(meta=)``): written to the
        # store ``use_store`` gives a loaded tree, beside its exchanges
        self.imported_meta: dict[str, str] = {}
        self.events = ev.EventBus()
        self._lock = threading.RLock()
        self._embed: Embedder | None = as_embedder(embed_fn)
        self._judge_mode = judge
        self._api_key, self._base_url = api_key, base_url
        llm = llm_judge
        if llm is None and judge != "embedding":
            from .llm import JSONLLM

            llm = LLMJudge(JSONLLM(model, api_key=api_key, base_url=base_url, timeout=float(llm_timeout)))
        self.judges = Judges(judge, embedding_judge or EmbeddingJudge(), llm, self._on_llm_failure)
        self.structure = TreeModel(lambda: self.embed_fn)
        self.summaries = Summaries(self.structure, self.judges, lambda: self.embed_fn, judge == "llm")
        self.group_names = GroupNames(self.judges.name_topic, self.judges.name_group)
        self.balancer = FanoutBalancer(max_children, self.structure.vectors.node, self.group_names.name,
                                       self.structure.stale.add)
        self.placer = Placer(self.structure, self.judges, self.balancer, self.summaries, self.group_names)
        self._vdb: VectorDatabase | None = None
        self._store: TreeStore | None = None
        self._undo = UndoLog()  # the last reorganisation's before state when there is no store
        self._closers: list[weakref.WeakMethod] = []  # close() of this tree's synthesizers

    # --- public attributes ---------------------------------------------------------------

    @property
    def embed_fn(self) -> Embedder:
        """The embedder (callable as ``embed_fn(text) -> list[float]``); MiniLM unless set."""
        if self._embed is None:
            from .embedders import MiniLMEmbedder

            self._embed = MiniLMEmbedder()
        return self._embed

    @embed_fn.setter
    def embed_fn(self, fn: EmbedFnLike) -> None:
        self._embed = as_embedder(fn)

    @property
    def judge(self) -> str:
        return self._judge_mode

    @property
    def lock(self) -> threading.RLock:
        """Hold it to read a consistent tree while other threads add or reorganise."""
        return self._lock

    @property
    def word_stats(self) -> DocumentFrequency:
        """How many exchanges each word appears in (names, focused queries)."""
        return self.judges.embedding.doc_freq

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
            store = TreeStore(db, self.structure, self.summaries, lambda: self.max_children)
            if store.has_tree():
                if self.structure.exchanges:
                    raise SessionConflictError(
                        f"{db.path} already holds a conversation and this tree has its own; "
                        "open the file with CTree.open() or use a new file"
                    )
                self._take_stored_settings(db)
                self._vdb, self._store = db, store
                store.load()
                self._count_words()
                return
            if self.structure.exchanges and db.read_only:
                raise ReadOnlySessionError(db.path, "receive this tree")
            self._vdb, self._store = db, store
            if self.structure.exchanges:
                try:
                    self._check_embedder()
                    store.write_everything(self.embed_fn, progress)
                except BaseException:
                    self._vdb, self._store = None, None
                    raise
            if not db.read_only:
                for key, value in self.imported_meta.items():
                    db.set_meta(key, value)

    def _take_stored_settings(self, db: VectorDatabase) -> None:
        """A stored session is adopted with its own fan-out bound (its nodes were split by
        it), and only by the embedder it was built with (``EmbedderMismatchError``), before
        anything changes: ``tree.vdb = db`` took a MiniLM session into a tree of another
        embedder, and every add() and prompt failed after ("shapes (16,) and (384,) not
        aligned"); the bound stayed the tree's own (a developer's trial)."""
        if db.get_meta("embed_model") is not None:
            db.check_embedder(self.embed_fn.name, self.embed_fn.dim)
        stored = stored_max_children(db)
        if stored:
            problem = max_children_problem(stored)
            if problem:
                raise SessionDamagedError(db.path, f"is damaged: its {problem}")
            self.max_children = self.balancer.max_children = stored

    # --- helpers ---------------------------------------------------------------------------

    def _on_llm_failure(self, task: str, problem: str) -> None:
        self.events.emit(ev.LLMFailed(task, problem, level="warning"))

    def _check_embedder(self) -> None:
        if self._vdb is not None:
            self._vdb.check_embedder(self.embed_fn.name, self.embed_fn.dim)

    # --- adding an exchange -----------------------------------------------------------------

    def add(self, messages: Sequence[Mapping[str, Any]], timestamp: str | None = None) -> MessageNode:
        """Store one completed exchange (user + assistant, optional system message)."""
        msgs = validate_exchange(messages)
        timestamp = validate_timestamp(timestamp)
        self._refuse_if_read_only("add an exchange")  # closed, it says so first
        started = time.perf_counter()
        ts = timestamp or datetime.now(UTC).isoformat(timespec="seconds")
        by_role = {m["role"]: m["content"] for m in msgs}
        with self._lock:
            vecs = self.embed_fn.embed_batch([m["content"] for m in msgs])
            role_vecs = dict(zip([m["role"] for m in msgs], vecs))
            vector = exchange_vector(role_vecs["user"], role_vecs["assistant"])
            ctx, state = self.placer.prepare(by_role["user"], by_role["assistant"], vector)
        # the judges outside the lock: an LLM judge takes seconds on a small model, and
        # the tree pane, the inspector and recall wait for the lock (9 s in a trial)
        decided = self.placer.decide(ctx)
        with self._lock:
            self.refuse_if_closed()  # closed while the judges decided: nothing placed
            index = len(self.structure.exchanges)
            node = MessageNode(index, msgs, ts)
            if self._vdb is not None and index == 0:
                self._check_embedder()
            if self.placer.state() != state:  # another writer moved the tree meanwhile: decided again, here
                decided = self.placer.decide(self.placer.context(node.user, node.assistant, vector))
            placed = self.placer.place(node, vector, decided)
            placement, topic, frozen = placed.placement, placed.topic, placed.frozen
            if self._store is not None:
                try:
                    self._store.persist_add(node, msgs, vecs, frozen, placed.new_topics, placed.renamed)
                except BaseException:
                    self._undo_placement()
                    raise
        elapsed = time.perf_counter() - started
        self.events.emit(ev.JudgeDecided(placement.judge, placement.action, topic.topic_name, placement.reason, index))
        if frozen:
            self.events.emit(ev.TopicsFrozen(tuple(t.topic_name for t in frozen), level="debug"))
        for group, before in placed.renamed:
            self.events.emit(ev.GroupRenamed(before, group.topic_name, group.node_id, level="debug"))
        self.events.emit(ev.ExchangeAdded(index, node.node_id, self.thread_path(node), elapsed, level="debug"))
        self._auto_save()
        return node

    def _auto_save(self) -> None:
        """The export ``auto_save_path`` names, after a change that is stored already: a
        failure is an event, not an exception (a caller's retry stored the exchange twice)."""
        if not self.auto_save_path:
            return
        try:
            self.save(self.auto_save_path)
        except (OSError, ValueError, SessionFileError) as exc:
            self.events.emit(ev.AutoSaveFailed(str(self.auto_save_path), str(exc), level="warning"))

    def _undo_placement(self) -> None:
        """The file refused the exchange (disk full, a writer holding the lock too long):
        the tree in memory goes back to what the file holds. Kept, the next exchange was
        written with a gap in the numbering, and the session no longer opened (a trial).
        The word statistics are counted again from it too: they kept the refused
        exchange's words (or a refused /forget's scrubbing), so names, focused queries and
        common-word cuts differed from the same file opened afresh (a review)."""
        if self._store is None:
            return
        try:
            self._store.load()
        except Exception:  # the store itself is gone (closed): it takes no later exchange either
            return
        self._count_words()

    def _count_words(self) -> None:
        """The word statistics (``word_stats``) of the exchanges the tree holds, counted afresh."""
        self.word_stats.clear()
        for x in self.structure.exchanges:
            self.judges.embedding.observe(x.user, x.assistant)

    @contextmanager
    def _as_stored_on_failure(self, *refusals: type[BaseException]) -> Iterator[None]:
        """A change the file refused goes from memory too (``refusals``: errors raised
        before anything changed). An archive, a forget, a replace or a reorganisation the
        file refused stayed in the tree: it showed [forgotten], the replacement or the
        merges, and the file, reopened, had none of them (a developer's trial)."""
        try:
            yield
        except refusals:
            raise
        except BaseException:
            with self._lock:
                self._undo_placement()
            raise

    async def aadd(self, messages: Sequence[Mapping[str, Any]], timestamp: str | None = None) -> MessageNode:
        """``add()`` for async apps: runs in a worker thread, off the event loop (the same
        lock, the same transaction: when it returns, the exchange is on disk)."""
        return await asyncio.to_thread(self.add, messages, timestamp)

    def summary_vectors(self, topics: list[TopicNode]) -> np.ndarray:
        """The vectors topics are indexed under in ``topic_summaries``.

        With LLM-written summaries: the summary's embedding blended with the centroid of
        the topic's exchanges. With extractive summaries (embedding and auto judges) the
        summary is a few of those exchanges' own sentences, so the centroid alone
        represents the topic better, and costs no embedding call inside ``add()``.
        """
        return self.summaries.vectors(topics)

    # --- summaries and display ------------------------------------------------------------------

    def refresh_frozen_summaries(self) -> list[TopicNode]:
        """Summarise, in memory, frozen topics whose content changed (new topics too)."""
        return self.summaries.refresh_frozen()

    def generate_summaries(self) -> int:
        """Summarise every topic whose summary is missing or out of date. Returns how many."""
        self._refuse_if_read_only("store summaries")
        with self._lock, self._as_stored_on_failure():  # refused, they stay due
            todo = self.summaries.refresh_all()
            if self._store is not None:
                self._store.write_topics(todo)
        if todo:
            self._auto_save()  # the export's summaries were the old ones (a review)
        return len(todo)

    def render_tree(self, node: TopicNode | None = None, show_messages: bool = False,
                    count_exchanges: bool = False) -> str:
        with self._lock:
            return render_tree(node or self.root, set(self.active_path()), show_messages,
                               count_exchanges=count_exchanges)

    def print_tree(self, node: TopicNode | None = None, indent: int = 0, show_messages: bool = False) -> None:
        text = self.render_tree(node, show_messages)
        pad = " " * indent
        print("\n".join(pad + line for line in text.splitlines()))

    # --- persistence ----------------------------------------------------------------------------

    def save(self, filepath: str, save_conversation: bool = False, meta: dict[str, str] | None = None) -> None:
        """Export the tree as JSON (format-versioned); written atomically. ``meta``: an
        application's rows of the session (``VectorDatabase.get_meta``) to keep with it: a
        loaded tree writes them to its new store."""
        if meta is not None:
            problem = meta_problem(meta)
            if problem:  # written, it made an export CTree.load refuses ("its meta is not a table of texts")
                raise ValueError(problem)
            # a lone surrogate raised UnicodeEncodeError: made storable, as add() makes messages
            meta = {storable(k): storable(v) for k, v in meta.items()}
        with self._lock:
            tree_to_json(self.structure, filepath, save_conversation, self.max_children, self.model,
                         self._embed.name if self._embed is not None else None, meta)

    @property
    def model(self) -> str:
        """The memory model the LLM judge asks (its name at the server)."""
        return self._model

    @model.setter
    def model(self, name: str) -> None:
        """Ask ``name`` from now on (a client that learns its server's model late, as the
        first one the server lists)."""
        _check_model(name)
        self._model = name
        if self.judges.llm is not None:
            self.judges.llm.model = name

    @classmethod
    def load(cls, filepath: str, api_key: str | None = None, base_url: str | None = None, model: str | None = None,
             embed_fn: EmbedFnLike = None, **kwargs: Any) -> "CTree":
        """Import a JSON export. A corrupt or foreign file raises ``SessionFileError``."""
        return load_json(cls, filepath, api_key=api_key, base_url=base_url, model=model, embed_fn=embed_fn, **kwargs)

    @classmethod
    def open(cls, path: str, api_key: str | None = None, base_url: str | None = None, model: str = "gpt-4o-mini",
             embed_fn: EmbedFnLike = None, judge: str = "auto", max_children: int = 5, *, read_only: bool = False,
             **kwargs: Any) -> "CTree":
        """Open (or create) a session file and restore its tree exactly. ``max_children``
        is a new file's bound: an existing file keeps the one it was built with.

        The tree holds the file's writer lock until ``tree.vdb.close()``: a second writer
        gets ``SessionLockedError``. ``read_only=True`` takes no lock, never writes, and
        refuses ``add()`` (and every other change) with ``ReadOnlySessionError``."""
        return open_session(cls, path, read_only, api_key=api_key, base_url=base_url, model=model,
                            embed_fn=embed_fn, judge=judge, max_children=max_children, **kwargs)

    @property
    def read_only(self) -> bool:
        """Opened with ``read_only=True``: reading and searching only."""
        return self._vdb is not None and self._vdb.read_only

    @property
    def closed(self) -> bool:
        """Its session file was closed (``close()``): it stores and reads nothing more."""
        return self._vdb is not None and self._vdb.closed

    def refuse_if_closed(self, action: str = "add an exchange") -> None:
        """After close(), add() raised sqlite's "Cannot operate on a closed database" and
        the tree in memory grew all the same (a trial); retrieval, reorganisation and
        summaries raised it too (a developer's trial)."""
        if self._vdb is not None and self._vdb.closed:
            raise SessionFileError(self._vdb.path, f"is closed (tree.close() or tree.vdb.close()): could not "
                                   f"{action}; CTree.open opens it again")

    def _refuse_if_read_only(self, action: str) -> None:
        self.refuse_if_closed(action)
        if self._vdb is not None and self._vdb.read_only:
            raise ReadOnlySessionError(self._vdb.path, action)

    def give_up_llm(self) -> None:
        """Wait no more for the memory model: a call in flight and every later one fall
        back to the embedding judge at once, so an ``add()`` under way stores its exchange
        in milliseconds. For an app that is closing (its ``add()`` waited up to the LLM's
        timeout for a placement, and the process ended first)."""
        self.judges.given_up.set()

    def verify_embedder(self) -> None:
        """Refuse (``EmbedderMismatchError``) an embedder other than the one the session
        file was built with."""
        if self._vdb is not None and self._vdb.get_meta("embed_model") is not None:
            self._check_embedder()

    # --- conversation vectors ------------------------------------------------------------------

    def conversation_vectors_for(self, node: MessageNode, first: int, vecs: np.ndarray) -> list[ConversationVector]:
        """The exchange's messages as conversation vectors; ``first`` is the index of its
        first message in ``conversation``."""
        return conversation_vectors(self.structure, node, first, vecs)

    # --- sentence index (idle time) --------------------------------------------------------------

    def _sentence_index(self) -> SentenceIndex | None:
        if self._vdb is None:
            return None
        return SentenceIndex(self.structure, self._vdb, lambda: self.embed_fn, self._lock)

    def pending_parts(self) -> int:
        """Exchanges whose sentences are not embedded yet (see ``index_pending``)."""
        index = self._sentence_index()
        return 0 if index is None else index.pending()

    def index_pending(self, max_exchanges: int | None = None, batch: int = 32) -> int:
        """Embed the parts of messages (``textutil.message_parts``: their sentences, and
        each read after the message it answers) for exchanges not done yet; returns how
        many exchanges were done. Retrieval scores a message by its best part too.

        This is idle-time work, kept off ``add()`` (it doubles the embedding cost of an
        exchange): Nexus runs it in the background after each reply; a library user calls
        it when convenient. Retrieval works without it, with message vectors only."""
        # batch=0 did nothing and said 0, as if nothing were left; "2" said "'<' not supported…"
        for name, value, least in (("max_exchanges", max_exchanges, 0), ("batch", batch, 1)):
            if (value is not None or name == "batch") and (
                    not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) or value < least):
                raise ValueError(f"{name} must be a whole number ≥ {least}, not {value!r}")
        max_exchanges, batch = None if max_exchanges is None else int(max_exchanges), int(batch)  # numpy's as plain
        self.refuse_if_closed("index sentences")
        index = self._sentence_index()
        if index is None or self._vdb is None or self._vdb.read_only:
            return 0
        return index.run(max_exchanges, batch)

    # --- consolidation ---------------------------------------------------------------------------

    def reorganize(self, embed_fn: EmbedFnLike = None, similarity_threshold: float = 0.55,
                   prune_trivial_leaves: bool = False, *, should_stop: Callable[[], bool] | None = None,
                   redo_undone: bool = False) -> dict:
        """Merge similar frozen topics (the four axioms) and optionally archive trivial
        exchanges. Returns ``merged``, ``pruned``, ``skipped``, ``vetoed``, ``duration_secs``…
        ``should_stop()``, asked between steps, ends it early (``cancelled``: True); what
        finished before is committed whole, nothing half-done is. The merges an
        ``undo_reorganize()`` took back are not made again unless ``redo_undone`` (a run
        the user asked for after the undo, not an idle one)."""
        if not isinstance(similarity_threshold, (int, float)) or not 0 < similarity_threshold <= 1:
            # a cosine: -1 merged everything, 2 nothing, both silently (a trial)
            raise ValueError(f"similarity_threshold is a cosine similarity in (0, 1], e.g. 0.55; "
                             f"got {similarity_threshold!r}")
        if should_stop is not None and not callable(should_stop):  # True said "'bool' object is not callable"
            raise TypeError(f"should_stop must be a function that returns True to stop, not {should_stop!r}")
        self._refuse_if_read_only("reorganise it")
        embedder = as_embedder(embed_fn) or self.embed_fn
        with self._as_stored_on_failure():  # finished rounds are on file: those stay
            done = Reorganizer(self.structure, self.judges, self.summaries, self.balancer, embedder, self.events.emit,
                               self._store, self._undo, self._lock).run(embed_fn, similarity_threshold,
                                                                        prune_trivial_leaves, should_stop=should_stop,
                                                                        redo_undone=redo_undone)
        if done.get("merged") or done.get("pruned"):  # the export held the tree of before (a developer's trial)
            self._auto_save()
        return done

    def undo_reorganize(self) -> dict:
        """Restore the tree exactly as before the last ``reorganize()``."""
        self._refuse_if_read_only("undo a reorganisation")
        with self._as_stored_on_failure(UndoError):
            done = undo_reorganize(self.structure, self._store, self._undo, self._lock)
        self._auto_save()
        return done

    def _own_exchanges(self, exchanges: Iterable[MessageNode], action: str) -> list[MessageNode]:
        """``exchanges`` as this tree's nodes, or ``TypeError`` in words (``archive([5])``
        said "'int' object has no attribute 'archived'": a developer's trial)."""
        out = list(exchanges)
        for x in out:
            if not isinstance(x, MessageNode) or x.index >= len(self.structure.exchanges) \
                    or self.structure.exchanges[x.index] is not x:
                raise TypeError(f"{action} takes this tree's exchanges (tree.exchanges[i]), not {x!r:.60}")
        return out

    def archive(self, exchanges: Iterable[MessageNode]) -> list[MessageNode]:
        self._refuse_if_read_only("archive exchanges")
        todo = self._own_exchanges(exchanges, "archive")
        with self._as_stored_on_failure():
            done = self._archive().archive(todo)
        self._auto_save()
        return done

    def restore_archived(self, exchanges: Iterable[MessageNode] | None = None) -> list[MessageNode]:
        """Bring soft-archived exchanges back into the tree (all by default)."""
        self._refuse_if_read_only("restore exchanges")
        todo = None if exchanges is None else self._own_exchanges(exchanges, "restore_archived")
        with self._as_stored_on_failure():
            done = self._archive().restore(todo)
        self._auto_save()
        return done

    def forget(self, exchanges: Iterable[MessageNode], meta: Mapping[str, str | None] | None = None) -> ForgetResult:
        """Forget ``exchanges`` for good (unlike ``archive``): each stays in its place,
        archived, its messages' text replaced by ``FORGOTTEN`` in memory and in the
        session file, its words gone from the vectors, the keyword index, the sentence
        parts, the topic names and summaries, and from the undo record of the last
        reorganisation (which can then no longer be undone). ``meta``: an application's
        rows of the session file written in the same purge (None deletes one), for its
        own copies of the text."""
        self._refuse_if_read_only("forget exchanges")
        problem = meta_problem(meta, none_deletes=True) if meta is not None else ""
        if problem:
            raise ValueError(problem)
        if meta is not None:  # a lone surrogate failed the file's write after the tree had forgotten
            meta = {storable(k): None if v is None else storable(v) for k, v in meta.items()}
        exchanges = self._own_exchanges(exchanges, "forget")
        with self._lock, self._as_stored_on_failure():
            done = Forgetting(self.structure, self._archive(), self.judges, self.group_names, self.summaries,
                              self._store, self._sentence_index(), self._undo, self.word_stats, lambda: self.embed_fn,
                              self._lock).forget(exchanges, meta)
        self._auto_save()
        return done

    def _archive(self) -> Archive:
        return Archive(self.structure, self.balancer, self.summaries, self._store, self._lock, self._undo)

    def replace_last(self, messages: Sequence[Mapping[str, Any]], timestamp: str | None = None) -> MessageNode:
        """Replace the newest exchange with ``messages`` (a regenerated or edited turn): the
        same node in the same topic, its vectors, stored rows and sentence index redone, so
        memory never holds both the old exchange and the new one."""
        msgs = validate_exchange(messages)
        timestamp = validate_timestamp(timestamp)
        self._refuse_if_read_only("replace an exchange")
        with self._lock:
            if not self.structure.exchanges:
                raise ValueError("there is no exchange to replace")
            node = self.structure.exchanges[-1]
            if node.archived or node.parent is None:
                raise ValueError(f"exchange #{node.index} is forgotten: there is nothing to replace" if node.forgotten
                                 else f"exchange #{node.index} is archived: restore it before replacing it")
            vecs = self.embed_fn.embed_batch([m["content"] for m in msgs])
            role_vecs = dict(zip([m["role"] for m in msgs], vecs))
            vector = exchange_vector(role_vecs["user"], role_vecs["assistant"])
            old_ids = [message_id(node.index, m["role"]) for m in node.messages]
            with self._as_stored_on_failure():
                first = self.structure.replace_last(msgs, vector,
                                                    timestamp or datetime.now(UTC).isoformat(timespec="seconds"))
                renamed = self._rename_own_topic(node)
                self._undo.end()
                if self._store is not None:
                    self._store.write_replaced(node, first, old_ids, vecs, renamed=renamed is not None)
        self._auto_save()
        return node

    def _rename_own_topic(self, node: MessageNode) -> str | None:
        """A topic that holds only ``node`` was named from its old text: named again from
        the new one (an edited "story about a cat" no longer files a dog under "Cat").
        Returns the old name when it changed."""
        topic = node.parent
        if topic is None or topic.is_root or topic.children != [node]:
            return None
        name = self.judges.name_topic([(node.user, node.assistant)])
        if not name or name == topic.topic_name:
            return None
        before, topic.topic_name = topic.topic_name, name
        return before

    def on_event(self, fn: Callable[[ev.EngineEvent], None]) -> Callable[[], None]:
        return self.events.subscribe(fn)

    # --- lifetime --------------------------------------------------------------------------------

    def on_close(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (a bound method: held weakly) when the tree is closed."""
        self._closers.append(weakref.WeakMethod(fn))

    def close(self) -> None:
        """Close what belongs to the tree: its synthesizers' threads, then its session
        file (and the file's writer lock). Closing twice is harmless."""
        closers, self._closers = self._closers, []
        for ref in closers:
            fn = ref()
            if fn is not None:
                fn()
        if self._vdb is not None:
            with self._lock:  # an add() writing now finishes first
                self._vdb.close()

    def __enter__(self) -> "CTree":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

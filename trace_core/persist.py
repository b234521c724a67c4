"""Writing a tree to, and reading it from, the session database and JSON exports."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .embedders import Embedder, exchange_vector, normalise
from .exchange_input import validate_exchange, validate_timestamp
from .fanout import max_children_problem
from .model import TreeModel
from .nodes import MessageNode, Node, TopicNode
from .rows import BrokenRowsError, NodeRow
from .schema import RESERVED_META, SQLITE_HEADER
from .store import ConversationVector, SessionFileError, VectorDatabase, message_id
from .summaries import Summaries

JSON_FORMAT = "trace-ctree"
JSON_VERSION = 1


def _parent_id(node: Node) -> str | None:
    return node.parent.node_id if node.parent is not None else None


def conversation_vectors(model: TreeModel, node: MessageNode, first: int, vecs: np.ndarray) -> list[ConversationVector]:
    """The exchange's messages as conversation vectors; ``first`` is the index of its
    first message in the conversation."""
    path = model.thread_path(node) if node.parent is not None else ""
    return [
        ConversationVector(message_id(node.index, m["role"]), first + i, m["role"], m["content"], vecs[i],
                           node.timestamp, path, 0.0, node.node_id, node.index)
        for i, m in enumerate(node.messages)
    ]


def side_vector(sides: dict[str, np.ndarray]) -> np.ndarray:
    """An exchange's vector from its stored messages' vectors (user and assistant)."""
    if len(sides) == 2:
        return exchange_vector(sides["user"], sides["assistant"])
    return normalise(next(iter(sides.values())))


def has_tree(db: VectorDatabase) -> bool:
    """Whether the store holds a session's tree."""
    return db.get_meta("current_node") is not None


def stored_max_children(db: VectorDatabase) -> int | None:
    v = db.get_meta("max_children")
    return int(v) if v else None


KEPT_APART_KEY = "reorganize.kept_apart"


class TreeStore:
    """The tree's side of a ``VectorDatabase``: handed the store, the tree model, the
    summaries (for the vectors topics are indexed under) and the tree's fan-out bound."""

    def __init__(self, db: VectorDatabase, model: TreeModel, summaries: Summaries,
                 max_children: Callable[[], int]) -> None:
        self.db = db
        self.model = model
        self.summaries = summaries
        self.max_children = max_children

    def has_tree(self) -> bool:
        return has_tree(self.db)

    # --- writing ------------------------------------------------------------------------

    def _frozen_topics(self, topics) -> list[TopicNode]:
        path = set(self.model.active_path())
        return [t for t in topics if t.parent is not None and t not in path and t.summary]

    def _upsert_summaries(self, topics: list[TopicNode]) -> None:
        if not topics:
            return
        vecs = self.summaries.vectors(topics)
        self.db.upsert_topic_summaries(
            [(t.node_id, t.topic_name, t.summary, v, t.start_index, t.end_index) for t, v in zip(topics, vecs)])

    def _meta(self) -> None:
        self.db.set_meta("current_node", self.model.current.node_id)
        self.db.set_meta("max_children", str(self.max_children()))

    def persist_add(self, node: MessageNode, msgs, vecs, frozen, new_topics, renamed=()) -> None:
        """One transaction: the exchange, its vectors, the nodes it changed (groups named
        again among them, with their exchanges' thread paths), new summaries."""
        model = self.model
        first = len(model.conversation) - len(msgs)
        changed: dict[str, Node] = {node.node_id: node}
        groups = [g for g, _old in renamed]
        for t in model.active_path() + list(new_topics) + list(frozen) + groups:
            changed[t.node_id] = t
        moved: list[Node] = list(groups)
        for t in new_topics:
            for c in t.children:  # children moved under a new subtopic changed parent
                changed[c.node_id] = c
                moved.append(c)
        with self.db.transaction():
            self.db.append_messages(node.index, first, msgs, node.timestamp)
            for cv in conversation_vectors(model, node, first, vecs):
                self.db.add_conversation_message(cv)
            self.db.save_nodes([NodeRow.of(n, _parent_id(n)) for n in changed.values()])
            self._upsert_summaries(self._frozen_topics(list(dict.fromkeys([*frozen, *groups]))))
            if moved:
                self._refresh_paths(moved)
            self._meta()

    def _refresh_paths(self, nodes: list[Node]) -> None:
        paths: dict[str, str] = {}
        by_topic: dict[str, str] = {}  # exchanges share their topic's path: compute it once
        for n in nodes:
            msgs = n.iter_messages() if n.is_topic else [n]
            for m in msgs:
                if m.parent.node_id not in by_topic:
                    by_topic[m.parent.node_id] = self.model.thread_path(m.parent)
                paths[m.node_id] = by_topic[m.parent.node_id]
        self.db.update_thread_paths(paths)

    def write_topics(self, topics: list[TopicNode]) -> None:
        with self.db.transaction():
            self.db.save_nodes([NodeRow.of(t, _parent_id(t)) for t in topics])
            self._upsert_summaries(self._frozen_topics(topics))

    def write_structure(self) -> None:
        """Replace every node row, every topic summary and the thread paths (joins the
        caller's transaction: a reorganisation commits whole or not at all)."""
        model = self.model
        with self.db.transaction():
            self.db.replace_all_nodes(model.rows())
            frozen = self._frozen_topics(model.root.iter_topics())
            keep = {t.node_id for t in frozen}
            self.db.delete_topic_summaries(self.db.topic_summary_ids() - keep)
            indexed = self.db.indexed_topics()
            stale = [t for t in frozen
                     if indexed.get(t.node_id) != (t.topic_name, t.summary, t.start_index, t.end_index)]
            self._upsert_summaries(stale)
            self._refresh_paths([model.root])
            self._meta()

    def write_archive_state(self, changed: list[MessageNode], archived: bool) -> None:
        """Exchanges archived or restored, and the structure around them: one transaction."""
        with self.db.transaction():
            for x in changed:
                self.db.set_exchange_archived(x.node_id, archived)
            self.write_structure()
            self.db.journal_clear()  # see ``UndoLog.end``

    def write_forgotten(self, exchanges: list[MessageNode], vector: np.ndarray, old_names: list[str],
                        meta: Mapping[str, str | None]) -> tuple[bool, bool]:
        """Forgotten exchanges (``Forgetting``): their rows written again from their new
        text (``vector``: its embedding), archived; the sentence parts cued by them
        dropped; the structure, and the paths that named ``old_names``; the reorganisation
        journal dropped (it holds the names and summaries of before); ``meta`` rows
        written (None: deleted); the file purged. Returns whether an undo record was
        dropped, and whether the purge was complete."""
        db = self.db
        firsts = self.model.first_message_indices()
        with db.purging() as purge:
            with db.transaction():
                for key, value in meta.items():
                    if value is None:
                        db.delete_meta(key)
                    else:
                        db.set_meta(key, value)
                # a user message's parts include it read after the reply before it
                db.delete_message_parts([message_id(x.index + 1, "user") for x in exchanges])
                for x in exchanges:
                    db.delete_exchange_rows(x.index, [message_id(x.index, m["role"]) for m in x.messages])
                    db.append_messages(x.index, firsts[x.index], x.messages, x.timestamp)
                    for cv in conversation_vectors(self.model, x, firsts[x.index], np.array([vector] * len(x.messages))):
                        db.add_conversation_message(cv)
                    db.set_exchange_archived(x.node_id, True)
                dropped = db.journal_clear()
                self.write_structure()
                db.replace_stored_paths(old_names)
        return dropped, purge.complete

    def write_reorganized(self, op_id: str, journal: list[tuple[str, dict]]) -> None:
        """A reorganisation: its journal (the before state first), archive flags, the structure."""
        with self.db.transaction():
            self.db.journal_extend(op_id, journal)
            for x in self.model.archived:
                self.db.set_exchange_archived(x.node_id, True)
            self.write_structure()

    def last_reorganization(self) -> tuple[str | None, dict | None]:
        """The last reorganisation's id and its before state, if any."""
        op_id = self.db.journal_last_op()
        if not op_id:
            return None, None
        return op_id, next((p for k, p in self.db.journal_entries(op_id) if k == "before"), None)

    def merges_of(self, op_id: str) -> list[tuple[str, str]]:
        """A reorganisation's merges: (absorber id, absorbed id)."""
        return [(p["into"], p["absorbed"]) for k, p in self.db.journal_entries(op_id) if k == "merge"]

    def kept_apart(self) -> set[tuple[str, str]]:
        """The topic pairs an undo took apart again: no later reorganisation merges them."""
        raw = self.db.get_meta(KEPT_APART_KEY)
        try:
            return {(str(a), str(b)) for a, b in json.loads(raw)} if raw else set()
        except (ValueError, TypeError):  # an unreadable note keeps nothing apart; the tree is intact
            return set()

    def write_undone(self, op_id: str, kept_apart: set[tuple[str, str]]) -> None:
        """The tree after an undo, the journal without the undone operation, and the pairs
        it took apart (kept apart from now on)."""
        with self.db.transaction():
            for x in self.model.exchanges:
                self.db.set_exchange_archived(x.node_id, x.archived)
            self.write_structure()
            self.db.journal_delete(op_id)
            self.db.set_meta(KEPT_APART_KEY, json.dumps(sorted(kept_apart)))

    def write_replaced(self, node: MessageNode, first: int, old_ids: list[str], vecs: np.ndarray,
                       renamed: bool = False) -> None:
        """The newest exchange written again (``CTree.replace_last``): its messages, vectors
        and FTS rows (and its topic's name, ``renamed``); its sentences are embedded again
        at idle time."""
        with self.db.transaction():
            # its own row too: it holds the exchange's time, which the replacement's is now
            rows = [NodeRow.of(node, _parent_id(node))]
            if renamed:
                rows.append(NodeRow.of(node.parent, _parent_id(node.parent)))
            self.db.save_nodes(rows)
            self.db.delete_exchange_rows(node.index, old_ids)
            self.db.append_messages(node.index, first, node.messages, node.timestamp)
            for cv in conversation_vectors(self.model, node, first, vecs):
                self.db.add_conversation_message(cv)
            if int(self.db.get_meta("parts_indexed") or 0) > node.index:
                self.db.set_meta("parts_indexed", str(node.index))
            self.db.journal_clear()  # see ``UndoLog.end``

    def write_everything(self, embedder: Embedder, progress=None) -> None:
        """A store that was empty receives a whole tree (e.g. after a JSON import).
        ``progress(done, total)`` after each exchange; if it raises, nothing is committed."""
        model = self.model
        with self.db.transaction():
            first = 0
            total = len(model.exchanges)
            for x in model.exchanges:
                if progress is not None:
                    progress(x.index, total)
                self.db.append_messages(x.index, first, x.messages, x.timestamp)
                vecs = embedder.embed_batch([m["content"] for m in x.messages])
                for cv in conversation_vectors(model, x, first, vecs):
                    self.db.add_conversation_message(cv)
                # the exchange's vector from these, as opening the file reads it: the topic
                # summaries below embedded every exchange again (half of a 3,000-exchange /load)
                sides = {m["role"]: v for m, v in zip(x.messages, vecs) if m["role"] in ("user", "assistant")}
                if sides:
                    model.vectors.set_exchange(x.index, side_vector(sides))
                if x.archived:
                    self.db.set_exchange_archived(x.node_id, True)
                first += len(x.messages)
            if progress is not None:
                progress(total, total)  # the last chance to abandon: the structure is written next
            self.write_structure()

    # --- reading ------------------------------------------------------------------------

    def load(self) -> None:
        """The stored tree into the model (exchanges, structure, current topic, vectors)."""
        by_exchange: dict[int, list[dict]] = {}
        for _idx, xidx, role, content, _ts in self.db.load_messages():
            by_exchange.setdefault(xidx, []).append({"role": role, "content": content})

        def make(r: NodeRow) -> MessageNode:
            if r.exchange_index not in by_exchange:
                raise BrokenRowsError(f"exchange {r.exchange_index} has a tree node but no messages")
            return MessageNode(r.exchange_index, by_exchange[r.exchange_index], r.timestamp or "")

        try:
            self.model.replace_structure(self.db.load_nodes(), self.db.get_meta("current_node"), make)
        except BrokenRowsError as exc:
            raise SessionFileError(self.db.path, str(exc)) from None
        self.model.vectors.replace_exchanges(self._exchange_vectors())

    def _exchange_vectors(self) -> dict[int, np.ndarray]:
        sides: dict[int, dict[str, np.ndarray]] = {}
        for xidx, role, v in self.db.message_vectors():
            if role in ("user", "assistant"):
                sides.setdefault(xidx, {})[role] = v
        return {k: side_vector(s) for k, s in sides.items()}


# --- JSON export / import -------------------------------------------------------------------


def _node_json(node: Node) -> dict:
    if node.is_topic:
        return {"type": "topic", "id": node.node_id, "name": node.topic_name, "summary": node.summary,
                "start": node.start_index, "end": node.end_index, "created": node.created_index,
                "children": [_node_json(c) for c in node.children]}
    d = {"type": "message", "id": node.node_id, "index": node.index, "timestamp": node.timestamp,
         "messages": node.messages}
    if node.archived:
        d["archived_from"] = node.home_id
    return d


def refuse_export_target(filepath: str) -> None:
    """A JSON export never replaces a database (a session file: a slip of "s.db" for
    "s.json" replaced the tree's own open session, and the exchanges added after it were
    lost: a trial), a session's own log, index or lock file, nor a folder (it said a
    temporary file's name)."""
    if os.path.isdir(filepath) or filepath.endswith(("/", os.sep)):
        raise SessionFileError(filepath, "is a folder: give the export a file name, e.g. export.json")
    if not filepath:  # it said a temporary file's name in the folder above
        raise SessionFileError('""', "is no file name: give the export one, e.g. export.json")
    real = os.path.realpath(filepath)
    for suffix in ("-wal", "-shm", "-journal", ".lock"):
        # "s.db-wal" replaced: the exchanges not yet copied from the log into the file
        # were lost when the process ended without closing the session (a developer's trial)
        if real.endswith(suffix) and _is_sqlite(real[: -len(suffix)]):
            raise SessionFileError(filepath, f"belongs to the session {real[: -len(suffix)]} (its {suffix[1:]} "
                                   "file): an export would replace it; save to another name, e.g. export.json")
    if _is_sqlite(filepath):
        raise SessionFileError(filepath, "is a SQLite database (a session file?): an export would replace it; "
                               "save to another name, e.g. export.json")


def _is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_HEADER
    except OSError:
        return False


def tree_to_json(model: TreeModel, filepath: str, save_conversation: bool, max_children: int, model_name: str,
                 embedder_name: str | None, meta: dict[str, str] | None = None) -> None:
    data = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "max_children": max_children,
        "model": model_name,
        "embedder": embedder_name,
        "current_node": model.current.node_id,
        "root": _node_json(model.root),
        "archived": [_node_json(m) for m in model.archived],
    }
    if save_conversation:
        data["conversation"] = model.conversation
    if meta:
        data["meta"] = dict(meta)
    filepath = os.fsdecode(filepath)  # a pathlib.Path or bytes as well
    refuse_export_target(filepath)
    directory = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, filepath)  # atomic: a crash leaves the old export or the new one
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass
class JsonTree:
    """A JSON export, read and checked: the tree's rows and exchanges, ready to rebuild."""

    max_children: int
    model: str | None
    rows: list[NodeRow]
    exchanges: dict[int, MessageNode]
    conversation: list[dict] | None
    current: str
    meta: dict[str, str] = field(default_factory=dict)  # an application's rows, kept with the tree


def _index(value: object) -> int:
    """An exchange index of an export: a whole number SQLite can store."""
    index = int(value)  # type: ignore[call-overload]
    if not -1 <= index < 2**62:  # -1: a topic with no exchange yet; 10**30 reached SQLite: "Python int too large to convert" (a trial)
        raise ValueError(f"exchange index {index} out of range")
    return index


def _json_rows(d: dict, parent_id: str | None, path: str, out: JsonTree, archived: bool = False) -> None:
    kind = d.get("type")
    if kind == "topic":
        start = _index(d["start"])
        out.rows.append(NodeRow(str(d["id"]), parent_id, "topic", str(d["name"]), str(d.get("summary", "")), start,
                                _index(d["end"]), None, _index(d.get("created", start)), None, 0))
        for c in d.get("children", []):
            _json_rows(c, str(d["id"]), path, out)
        return
    if kind == "message":
        # the checks add() makes: a "tool" role, empty content or "yesterday" as a time were
        # loaded and stored as they were (a developer's trial)
        try:
            msgs = validate_exchange(d["messages"])
            ts = validate_timestamp(d.get("timestamp") or None) or ""  # as add() stores it
        except ValueError as exc:
            raise SessionFileError(path, f"is a damaged TRACE export: exchange {d.get('index')}: {exc}") from None
        index = _index(d["index"])
        out.exchanges[index] = MessageNode(index, msgs, ts)
        pid = d.get("archived_from", "") if archived else parent_id
        out.rows.append(NodeRow(str(d["id"]), pid, "message", None, None, index, index, index, None, ts,
                                1 if archived else 0))
        return
    raise SessionFileError(path, f"unknown node type {kind!r}")


def read_json(filepath: str) -> JsonTree:
    """A TRACE JSON export; a corrupt or foreign file raises ``SessionFileError``."""
    try:
        with open(filepath, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise SessionFileError(filepath, "does not exist") from None
    except UnicodeDecodeError:
        raise SessionFileError(filepath, "is not a text file (not a TRACE JSON export)") from None
    except json.JSONDecodeError as exc:
        if exc.doc.strip() and exc.pos == len(exc.doc) - len(exc.doc.lstrip()):  # no JSON at all (a README)
            raise SessionFileError(filepath, "is not a TRACE JSON export (it is not JSON)") from None
        raise SessionFileError(filepath, f"is not valid JSON (truncated or corrupt?): {exc}") from None
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise SessionFileError(filepath, "is JSON but not a TRACE tree export")
    if int(data.get("version", 0)) > JSON_VERSION:
        raise SessionFileError(filepath, f"was written by a newer TRACE (format {data.get('version')})")
    try:
        fanout = data.get("max_children", 5)
        problem = max_children_problem(fanout)
        if problem:
            raise SessionFileError(filepath, f"is a damaged TRACE export: its {problem}")
        meta = data.get("meta", {})
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise SessionFileError(filepath, "is a damaged TRACE export: its meta is not a table of texts")
        # an application's rows only: an engine key in an older export ("app") made the new file unreadable
        own = {k: v for k, v in meta.items() if k not in RESERVED_META}
        out = JsonTree(fanout, data.get("model"), [], {},
                       data.get("conversation") or None, str(data.get("current_node", "root")), own)
        _json_rows(data["root"], None, filepath, out)
        for m in data.get("archived", []):
            _json_rows(m, None, filepath, out, archived=True)
    except SessionFileError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a list where a node was: AttributeError
        raise SessionFileError(filepath, f"is a damaged TRACE export ({type(exc).__name__}: {exc})") from None
    return out


def open_session(cls, path: str, read_only: bool, max_children: int = 5, **kwargs):
    """``CTree.open``: the session file (created if missing), its tree restored exactly,
    its stored fan-out bound kept; a refused file keeps no lock."""
    tree = cls(max_children=max_children, **kwargs)  # bad arguments refused before a file is made
    db = VectorDatabase(path, read_only=read_only)
    try:
        tree.vdb = db  # a stored session brings its own fan-out bound, and checks the embedder
        tree.verify_embedder()
    except BaseException:
        db.close()
        raise
    return tree


def load_json(cls, filepath: str, model: str | None = None, **kwargs):
    """``CTree.load``: a tree from a JSON export (``SessionFileError`` for a bad file)."""
    data = read_json(filepath)
    kwargs.pop("max_children", None)  # the export keeps its own bound (its nodes were split by it), as open() does
    stored_model = data.model if isinstance(data.model, str) and data.model.strip() else None
    # the caller's arguments are said as they are: a bad or unknown one read "is a damaged TRACE export"
    tree = cls(max_children=data.max_children, model=model or stored_model or "gpt-4o-mini", **kwargs)
    try:
        tree.structure.replace_structure(data.rows, data.current, lambda r: data.exchanges[r.exchange_index],
                                         data.conversation)
    except (BrokenRowsError, KeyError, TypeError, ValueError) as exc:
        raise SessionFileError(filepath, f"is a damaged TRACE export ({exc})") from None
    for x in tree.structure.exchanges:
        tree.judges.embedding.observe(x.user, x.assistant)
    tree.imported_meta = data.meta
    return tree

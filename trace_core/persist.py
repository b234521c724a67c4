"""Writing a tree to, and reading it from, the session database and JSON exports."""

from __future__ import annotations

import json
import os
import tempfile
from typing import TYPE_CHECKING

import numpy as np

from .embedders import normalise
from .nodes import MessageNode, Node, TopicNode
from .store import SessionFileError, VectorDatabase, _vec

if TYPE_CHECKING:
    from .tree import CTree

JSON_FORMAT = "trace-ctree"
JSON_VERSION = 1


def _row(node: Node, parent_id: str | None) -> tuple:
    if node.is_topic:
        return (node.node_id, parent_id, "topic", node.topic_name, node.summary, node.start_index,
                node.end_index, None, node.created_index, None, 0)
    archived = 1 if node.archived else 0
    pid = node.home_id if node.archived else parent_id
    return (node.node_id, pid, "message", None, None, node.index, node.index, node.index, None, node.timestamp,
            archived)


def _parent_id(node: Node) -> str | None:
    return node.parent.node_id if node.parent is not None else None


class TreeStore:
    """The tree's side of a ``VectorDatabase``."""

    def __init__(self, db: VectorDatabase) -> None:
        self.db = db

    def has_tree(self) -> bool:
        return self.db.get_meta("current_node") is not None

    def stored_max_children(self) -> int | None:
        v = self.db.get_meta("max_children")
        return int(v) if v else None

    # --- writing ------------------------------------------------------------------------

    def _frozen_topics(self, tree: "CTree", topics) -> list[TopicNode]:
        path = set(tree.active_path())
        return [t for t in topics if t.parent is not None and t not in path and t.summary]

    def _upsert_summaries(self, tree: "CTree", topics: list[TopicNode]) -> None:
        if not topics:
            return
        vecs = tree.summary_vectors(topics)
        self.db.upsert_topic_summaries(
            [(t.node_id, t.topic_name, t.summary, v, t.start_index, t.end_index) for t, v in zip(topics, vecs)])

    def _meta(self, tree: "CTree") -> None:
        self.db.set_meta("current_node", tree.current_node.node_id)
        self.db.set_meta("max_children", str(tree.max_children))

    def persist_add(self, tree: "CTree", node: MessageNode, msgs, vecs, frozen, new_topics) -> None:
        """One transaction: the exchange, its vectors, the nodes it changed, new summaries."""
        first = len(tree.conversation) - len(msgs)
        changed: dict[str, Node] = {node.node_id: node}
        for t in tree.active_path() + list(new_topics) + list(frozen):
            changed[t.node_id] = t
        moved: list[Node] = []
        for t in new_topics:
            for c in t.children:  # children moved under a new subtopic changed parent
                changed[c.node_id] = c
                moved.append(c)
        with self.db.transaction():
            self.db.append_messages(node.index, first, msgs, node.timestamp)
            for cv in tree.conversation_vectors_for(node, first, vecs):
                self.db.add_conversation_message(cv)
            self.db.save_nodes([_row(n, _parent_id(n)) for n in changed.values()])
            self._upsert_summaries(tree, self._frozen_topics(tree, frozen))
            if moved:
                self._refresh_paths(tree, moved)
            self._meta(tree)

    def _refresh_paths(self, tree: "CTree", nodes: list[Node]) -> None:
        paths: dict[str, str] = {}
        by_topic: dict[str, str] = {}  # exchanges share their topic's path: compute it once
        for n in nodes:
            msgs = n.iter_messages() if n.is_topic else [n]
            for m in msgs:
                if m.parent.node_id not in by_topic:
                    by_topic[m.parent.node_id] = tree.thread_path(m.parent)
                paths[m.node_id] = by_topic[m.parent.node_id]
        self.db.update_thread_paths(paths)

    def write_topics(self, tree: "CTree", topics: list[TopicNode]) -> None:
        with self.db.transaction():
            self.db.save_nodes([_row(t, _parent_id(t)) for t in topics])
            self._upsert_summaries(tree, self._frozen_topics(tree, topics))

    def all_rows(self, tree: "CTree") -> list[tuple]:
        rows = []
        for t in tree.root.iter_topics():
            rows.append(_row(t, _parent_id(t)))
            rows += [_row(c, t.node_id) for c in t.children if not c.is_topic]
        rows += [_row(m, None) for m in tree._archived_nodes]
        return rows

    def write_structure(self, tree: "CTree") -> None:
        """Replace every node row, every topic summary and the thread paths (joins the
        caller's transaction: a reorganisation commits whole or not at all)."""
        with self.db.transaction():
            self.db.replace_all_nodes(self.all_rows(tree))
            frozen = self._frozen_topics(tree, tree.root.iter_topics())
            keep = {t.node_id for t in frozen}
            self.db.delete_topic_summaries(self.db.topic_summary_ids() - keep)
            indexed = self.db.indexed_topics()
            stale = [t for t in frozen
                     if indexed.get(t.node_id) != (t.topic_name, t.summary, t.start_index, t.end_index)]
            self._upsert_summaries(tree, stale)
            self._refresh_paths(tree, [tree.root])
            self._meta(tree)

    def write_everything(self, tree: "CTree") -> None:
        """A store that was empty receives a whole tree (e.g. after a JSON import)."""
        with self.db.transaction():
            first = 0
            for x in tree._exchanges:
                self.db.append_messages(x.index, first, x.messages, x.timestamp)
                vecs = tree.embed_fn.embed_batch([m["content"] for m in x.messages])
                for cv in tree.conversation_vectors_for(x, first, vecs):
                    self.db.add_conversation_message(cv)
                if x.archived:
                    self.db.set_exchange_archived(x.node_id, True)
                first += len(x.messages)
            self.write_structure(tree)

    # --- reading ------------------------------------------------------------------------

    def load_into(self, tree: "CTree") -> None:
        rows = self.db.load_nodes()
        messages = self.db.load_messages()
        by_exchange: dict[int, list[dict]] = {}
        for _idx, xidx, role, content, _ts in messages:
            by_exchange.setdefault(xidx, []).append({"role": role, "content": content})
        nodes: dict[str, Node] = {}
        parents: dict[str, str | None] = {}
        for nid, pid, kind, name, summary, start, end, xidx, created, ts, archived in rows:
            if kind == "topic":
                if nid == tree.root.node_id:
                    node = tree.root
                    node.start_index, node.end_index = start, end
                else:
                    node = TopicNode(name or "", summary or "", start, end, node_id=nid,
                                     created_index=created if created is not None else start)
            else:
                if xidx not in by_exchange:
                    raise SessionFileError(self.db.path, f"exchange {xidx} has a tree node but no messages")
                node = MessageNode(xidx, by_exchange[xidx], ts or "", node_id=nid, archived=bool(archived))
                if archived:
                    node.home_id = pid or ""
            nodes[nid] = node
            parents[nid] = pid
        for nid, node in nodes.items():
            pid = parents[nid]
            if not node.is_topic and node.archived:
                continue
            if pid is None:
                continue
            parent = nodes.get(pid)
            if parent is None or not parent.is_topic:
                raise SessionFileError(self.db.path, f"node {nid} points to a missing parent {pid}")
            parent.children.append(node)
            node.parent = parent
        for n in nodes.values():
            if n.is_topic:
                n.sort_children()
        exchanges = sorted((n for n in nodes.values() if not n.is_topic), key=lambda m: m.index)
        if [m.index for m in exchanges] != list(range(len(exchanges))):
            raise SessionFileError(self.db.path, "the stored exchanges are not numbered 0..n-1")
        tree._exchanges = exchanges
        tree._archived_nodes = [m for m in exchanges if m.archived]
        tree.conversation = [dict(m) for x in exchanges for m in x.messages]
        current = nodes.get(self.db.get_meta("current_node") or "", tree.root)
        tree.current_node = current if current.is_topic else tree.root
        tree._vectors = self._exchange_vectors()
        for x in exchanges:
            tree.judges.embedding.observe(x.user, x.assistant)
        tree._invalidate_sums()
        tree._stale.clear()

    def _exchange_vectors(self) -> dict[int, np.ndarray]:
        sums: dict[int, np.ndarray] = {}
        for xidx, role, blob in self.db.con.execute(
            "SELECT exchange_index, role, embedding FROM conversation_vectors"
        ):
            if role in ("user", "assistant"):
                v = _vec(blob)
                sums[xidx] = sums[xidx] + v if xidx in sums else v.copy()
        return {k: normalise(v) for k, v in sums.items()}


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


def tree_to_json(tree: "CTree", filepath: str, save_conversation: bool) -> None:
    data = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "max_children": tree.max_children,
        "model": tree.model,
        "embedder": tree._embed.name if tree._embed is not None else None,
        "current_node": tree.current_node.node_id,
        "root": _node_json(tree.root),
        "archived": [_node_json(m) for m in tree._archived_nodes],
    }
    if save_conversation:
        data["conversation"] = tree.conversation
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


def _build(d: dict, path: str) -> Node:
    kind = d.get("type")
    if kind == "topic":
        t = TopicNode(str(d["name"]), str(d.get("summary", "")), int(d["start"]), int(d["end"]),
                      node_id=str(d["id"]), created_index=int(d.get("created", d["start"])))
        for c in d.get("children", []):
            t.add_child(_build(c, path))
        return t
    if kind == "message":
        msgs = d["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            raise SessionFileError(path, f"exchange {d.get('index')} has malformed messages")
        return MessageNode(int(d["index"]), msgs, str(d.get("timestamp", "")), node_id=str(d["id"]))
    raise SessionFileError(path, f"unknown node type {kind!r}")


def tree_from_json(cls, filepath: str, **kwargs) -> "CTree":
    try:
        with open(filepath, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise SessionFileError(filepath, "does not exist") from None
    except UnicodeDecodeError:
        raise SessionFileError(filepath, "is not a text file (not a TRACE JSON export)") from None
    except json.JSONDecodeError as exc:
        raise SessionFileError(filepath, f"is not valid JSON (truncated or corrupt?): {exc}") from None
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise SessionFileError(filepath, "is JSON but not a TRACE tree export")
    if int(data.get("version", 0)) > JSON_VERSION:
        raise SessionFileError(filepath, f"was written by a newer TRACE (format {data.get('version')})")
    model = kwargs.pop("model", None) or data.get("model") or "gpt-4o-mini"
    try:
        tree = cls(max_children=int(data.get("max_children", 5)), model=model, **kwargs)
        root = _build(data["root"], filepath)
        archived = [_build(m, filepath) for m in data.get("archived", [])]
    except SessionFileError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionFileError(filepath, f"is a damaged TRACE export ({type(exc).__name__}: {exc})") from None
    tree.root.children = []
    for c in root.children:
        tree.root.add_child(c)
    tree.root.start_index, tree.root.end_index = root.start_index, root.end_index
    for m, d in zip(archived, data.get("archived", [])):
        m.archived = True
        m.home_id = d.get("archived_from", "")
    exchanges = sorted(list(tree.root.iter_messages()) + archived, key=lambda m: m.index)
    if [m.index for m in exchanges] != list(range(len(exchanges))):
        raise SessionFileError(filepath, "its exchanges are not numbered 0..n-1")
    tree._exchanges = exchanges
    tree._archived_nodes = archived
    for x in exchanges:
        tree.judges.embedding.observe(x.user, x.assistant)
    tree.conversation = data.get("conversation") or [dict(m) for x in exchanges for m in x.messages]
    current = tree.find(data.get("current_node", "root"))
    tree.current_node = current if current is not None and current.is_topic else tree.root
    return tree

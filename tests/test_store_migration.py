"""Schema 7: SQLite keeps the FTS5 indexes in step with their tables (triggers). A file
written by schema 6 (its DDL and rows as that version wrote them, FTS rows by hand) is
upgraded in place when opened, keeps every exchange and stays searchable."""

from __future__ import annotations

import sqlite3

import numpy as np

from trace_core import ConversationVector, CTree, VectorDatabase
from trace_core.store import SCHEMA_VERSION

# the schema as version 6 left it (trace_core/store.py MIGRATIONS 1-6 at commit 617716e)
SCHEMA_6 = [
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE messages(idx INTEGER PRIMARY KEY, exchange_index INTEGER NOT NULL,
        role TEXT NOT NULL, content TEXT NOT NULL, timestamp TEXT)""",
    "CREATE INDEX messages_exchange ON messages(exchange_index)",
    """CREATE TABLE nodes(node_id TEXT PRIMARY KEY, parent_id TEXT, kind TEXT NOT NULL,
        topic_name TEXT, summary TEXT, start_index INTEGER, end_index INTEGER,
        exchange_index INTEGER, created_index INTEGER, timestamp TEXT,
        archived INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE conversation_vectors(message_id TEXT PRIMARY KEY, message_index INTEGER, role TEXT, text TEXT,
        embedding BLOB, timestamp TEXT, thread_path TEXT, node_id TEXT,
        exchange_index INTEGER, archived INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE topic_summaries(node_id TEXT PRIMARY KEY, topic_name TEXT, summary TEXT, embedding BLOB,
        start_index INTEGER, end_index INTEGER, updated_at TEXT)""",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(text, message_id UNINDEXED, tokenize='porter unicode61')",
    """CREATE VIRTUAL TABLE topics_fts USING fts5(topic_name, summary, node_id UNINDEXED,
        tokenize='porter unicode61')""",
    """CREATE TABLE journal(id INTEGER PRIMARY KEY AUTOINCREMENT, op_id TEXT NOT NULL, kind TEXT NOT NULL,
        payload TEXT NOT NULL, created_at TEXT NOT NULL)""",
    "CREATE INDEX conversation_vectors_node ON conversation_vectors(node_id)",
    "CREATE TABLE thread_paths(node_id TEXT PRIMARY KEY, path TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE message_parts(message_id TEXT NOT NULL, part INTEGER NOT NULL, text TEXT NOT NULL,
        embedding BLOB NOT NULL, PRIMARY KEY(message_id, part))""",
]

EXCHANGE = [("user", "My kayak is bright orange."), ("assistant", "An orange kayak is easy to spot.")]


def unit(*xs) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def write_schema_6(path: str) -> None:
    """A one-exchange session exactly as schema 6 stored it."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    for stmt in SCHEMA_6:
        con.execute(stmt)
    con.executemany("INSERT INTO meta VALUES(?, ?)", [
        ("app", "trace-session"), ("current_node", "t1"), ("max_children", "5"),
        ("embed_model", "unit-3"), ("embed_dim", "3")])
    con.executemany("INSERT INTO nodes VALUES(?,?,?,?,?,?,?,?,?,?,?)", [
        ("root", None, "topic", "ROOT", "", 0, 0, None, -1, None, 0),
        ("t1", "root", "topic", "Orange Kayak", "", 0, 0, None, 0, None, 0),
        ("m1", "t1", "message", None, None, 0, 0, 0, None, "2024-05-01T10:00:00", 0)])
    for k, (role, text) in enumerate(EXCHANGE):
        con.execute("INSERT INTO messages VALUES(?,?,?,?,?)", (k, 0, role, text, "2024-05-01T10:00:00"))
        rowid = con.execute(
            "INSERT INTO conversation_vectors VALUES(?,?,?,?,?,?,?,?,?,0)",
            (f"x0-{role}", k, role, text, unit(1, k, 0).tobytes(), "2024-05-01T10:00:00", "ROOT → Orange Kayak",
             "m1", 0)).lastrowid
        con.execute("INSERT INTO messages_fts(rowid, text, message_id) VALUES(?,?,?)", (rowid, text, f"x0-{role}"))
    rowid = con.execute("INSERT INTO topic_summaries VALUES(?,?,?,?,?,?,?)",
                        ("t0", "Boats", "Rowing on the lake", unit(0, 1, 0).tobytes(), 0, 0, "2024")).lastrowid
    con.execute("INSERT INTO topics_fts(rowid, topic_name, summary, node_id) VALUES(?,?,?,?)",
                (rowid, "Boats", "Rowing on the lake", "t0"))
    con.execute("PRAGMA user_version=6")
    con.close()


def triggers(path: str) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    finally:
        con.close()


def test_a_schema_6_file_is_upgraded_and_stays_searchable(tmp_path):
    path = str(tmp_path / "old.db")
    write_schema_6(path)
    assert triggers(path) == set()
    db = VectorDatabase(path)
    assert db.schema_version == SCHEMA_VERSION == 7
    assert triggers(path) >= {"conversation_vectors_fts_insert", "conversation_vectors_fts_delete",
                              "conversation_vectors_fts_update", "topic_summaries_fts_insert",
                              "topic_summaries_fts_delete", "topic_summaries_fts_update"}
    # what schema 6 indexed by hand is still found
    assert {m for m, _ in db.keyword_search_messages("orange kayak")} == {"x0-user", "x0-assistant"}
    assert [n for n, _ in db.keyword_search_topics("rowing")] == ["t0"]
    # rows written now are indexed by SQLite itself, replaced and deleted with their table rows
    db.add_conversation_message(ConversationVector("x1-user", 2, "user", "I paddle on Sundays", unit(0, 0, 1),
                                                   "2024-05-02", "ROOT", node_id="m2", exchange_index=1))
    assert [m for m, _ in db.keyword_search_messages("paddle")] == ["x1-user"]
    db.add_conversation_message(ConversationVector("x1-user", 2, "user", "I swim on Sundays", unit(0, 0, 1),
                                                   "2024-05-02", "ROOT", node_id="m2", exchange_index=1))
    assert db.keyword_search_messages("paddle") == [] and [m for m, _ in db.keyword_search_messages("swim")] == [
        "x1-user"]
    db.upsert_topic_summary("t0", "Boats", "Sailing at sea", unit(0, 1, 0))
    assert db.keyword_search_topics("rowing") == [] and [n for n, _ in db.keyword_search_topics("sailing")] == ["t0"]
    db.delete_topic_summary("t0")
    assert db.keyword_search_topics("sailing") == []
    db.close()


def test_the_upgraded_session_opens_with_its_tree(tmp_path, hash_embed):
    path = str(tmp_path / "old.db")
    write_schema_6(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value=? WHERE key='embed_model'", (hash_embed.name,))
    con.execute("UPDATE meta SET value='64' WHERE key='embed_dim'")
    con.execute("UPDATE conversation_vectors SET embedding=?", (np.ones(64, dtype=np.float32).tobytes(),))
    con.commit()
    con.close()
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    assert [x.user for x in tree.exchanges] == ["My kayak is bright orange."]
    assert tree.current_node.topic_name == "Orange Kayak"
    tree.add([{"role": "user", "content": "Is orange a good colour for a canoe?"},
              {"role": "assistant", "content": "Yes, canoes in orange are visible."}])
    assert {m for m, _ in tree.vdb.keyword_search_messages("canoe")} == {"x1-user", "x1-assistant"}
    tree.vdb.close()
    assert len(CTree.open(path, judge="embedding", embed_fn=hash_embed).exchanges) == 2

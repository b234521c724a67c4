"""The session store: vectors, FTS, persistence of the tree, bad files, embedder checks."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from trace_core import (
    ConversationVector,
    CTree,
    EmbedderMismatchError,
    ReadOnlySessionError,
    SessionConflictError,
    SessionFileError,
    VectorDatabase,
)
from trace_core.invariants import check_invariants
from trace_core.store import SCHEMA_VERSION


def ex(user: str, assistant: str = "ok") -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def unit(*xs) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_vector_database_api(tmp_path):
    db = VectorDatabase(str(tmp_path / "v.db"))
    assert (tmp_path / "v.db").exists()
    db.add_conversation_message(ConversationVector("a", 0, "user", "cats purr", unit(1, 0, 0), "t0", "ROOT → Cats"))
    db.add_conversation_message(ConversationVector("b", 1, "assistant", "dogs bark", unit(0, 1, 0), "t1", "ROOT → Dogs"))
    db.add_conversation_message(ConversationVector("c", 2, "user", "kittens", unit(0.9, 0.1, 0), "t2", "ROOT → Cats"))
    hits = db.search_conversation(unit(1, 0, 0), top_k=2, min_similarity=0.5)
    assert [h.message_id for h in hits] == ["a", "c"]
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-5) and hits[0].thread_path == "ROOT → Cats"
    assert db.search_conversation(unit(0, 0, 1), top_k=2, min_similarity=0.5) == []

    db.upsert_topic_summary("t1", "Cats", "All about cats", unit(1, 0, 0))
    db.upsert_topic_summary("t2", "Dogs", "All about dogs", unit(0, 1, 0))
    res = db.search_topic_summaries(unit(1, 0.2, 0), top_k=3, min_similarity=0.40)
    assert [r["node_id"] for r in res] == ["t1"]
    assert set(res[0]) >= {"node_id", "topic_name", "summary", "similarity"}
    db.upsert_topic_summary("t1", "Cats", "Felines", unit(0, 0, 1))  # upsert replaces
    assert db.search_topic_summaries(unit(1, 0, 0), min_similarity=0.4) == []
    db.delete_topic_summary("t2")
    assert db.search_topic_summaries(unit(0, 1, 0), min_similarity=0.4) == []
    assert [m for m, _ in db.keyword_search_messages("do dogs bark?")] == ["b"]
    assert [n for n, _ in db.keyword_search_topics("felines")] == ["t1"]
    # the cache and the file agree: a second connection sees the same
    db2 = VectorDatabase(str(tmp_path / "v.db"), read_only=True)
    assert [h.message_id for h in db2.search_conversation(unit(1, 0, 0), top_k=2)] == ["a", "c"]


def test_a_vector_of_another_size_is_refused_and_the_store_stays_searchable(tmp_path):
    # a topic summary of 2 dimensions in a store of 3 was stored: every topic search of
    # the session failed from then on, reopened too ("query has dimension 3, the index holds 2")
    path = str(tmp_path / "v.db")
    db = VectorDatabase(path)
    db.add_conversation_message(ConversationVector("a", 0, "user", "cats purr", unit(1, 0, 0), "t0", "ROOT"))
    db.upsert_topic_summary("t1", "Cats", "All about cats", unit(1, 0, 0))
    db.delete_topic_summary("t1")  # the topic index is empty: only the messages say the size
    with pytest.raises(ValueError, match="topic 't2': its vector has shape 2, this store's vectors have 3"):
        db.upsert_topic_summary("t2", "Dogs", "All about dogs", [1.0, 0.0])
    with pytest.raises(ValueError, match="message 'b': its vector has shape 2"):
        db.add_conversation_message(ConversationVector("b", 1, "user", "dogs", [0.0, 1.0], "t1", "ROOT"))
    db.upsert_topic_summary("t3", "Cats", "Felines", unit(1, 0, 0))
    assert [r["node_id"] for r in db.search_topic_summaries(unit(1, 0, 0))] == ["t3"]
    db.close()
    db = VectorDatabase(path)
    assert [r["node_id"] for r in db.search_topic_summaries(unit(1, 0, 0))] == ["t3"]
    db.close()


def test_a_closed_or_read_only_store_says_so_in_typed_errors(tmp_path):
    # sqlite3's own errors came out: ProgrammingError "Cannot operate on a closed
    # database", OperationalError "attempt to write a readonly database"
    path = str(tmp_path / "v.db")
    cv = ConversationVector("a", 0, "user", "cats purr", unit(1, 0, 0), "t0", "ROOT")
    with VectorDatabase(path) as db:  # a context manager, as the tree is
        db.add_conversation_message(cv)
        db.upsert_topic_summary("t1", "Cats", "All about cats", unit(1, 0, 0))
        assert db.search_conversation(unit(1, 0, 0))  # the index is cached
    assert db.closed
    for call in (lambda: db.search_conversation(unit(1, 0, 0)), lambda: db.search_topic_summaries(unit(1, 0, 0)),
                 lambda: db.add_conversation_message(cv), lambda: db.get_meta("embed_dim")):
        with pytest.raises(SessionFileError, match="is closed"):
            call()
    db.close()  # twice: harmless
    ro = VectorDatabase(path, read_only=True)
    for call in (lambda: ro.add_conversation_message(cv), lambda: ro.delete_topic_summary("t1"),
                 lambda: ro.upsert_topic_summary("t2", "Dogs", "dogs", unit(0, 1, 0))):
        with pytest.raises(ReadOnlySessionError, match="is open read-only"):
            call()
    assert [r["node_id"] for r in ro.search_topic_summaries(unit(1, 0, 0))] == ["t1"]
    ro.close()


def test_an_sql_bug_in_a_write_is_raised_as_one_and_a_refused_write_as_the_file_s(tmp_path):
    """Any OperationalError inside a write was said "could not be written" (a full disk's
    words) — "no such column" too, a bug in the SQL that the user could do nothing about.
    Only SQLite's refusals by the file (full, busy or locked, read-only, I/O) are
    ``SessionWriteError``; the change is rolled back either way."""
    from trace_core import SessionWriteError

    path = str(tmp_path / "v.db")
    cv = ConversationVector("a", 0, "user", "cats purr", unit(1, 0, 0), "t0", "ROOT")
    with VectorDatabase(path) as db:
        with pytest.raises(sqlite3.OperationalError, match="no such column") as info:
            with db.transaction() as con:
                con.execute("INSERT INTO meta VALUES('k', 'v')")
                con.execute("UPDATE meta SET nonsense = 1")
        assert not isinstance(info.value, SessionFileError)
        assert db.get_meta("k") is None  # rolled back
        db.add_conversation_message(cv)  # and the store goes on
        pages = db.con.execute("PRAGMA page_count").fetchone()[0]
        db.con.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
        with pytest.raises(SessionWriteError, match="could not be written .database or disk is full."):
            with db.transaction() as con:
                con.execute("INSERT INTO meta VALUES('big', ?)", ("x" * 200_000,))
        assert db.get_meta("big") is None


def test_no_file_name_a_folder_name_or_bytes_are_said_or_taken(tmp_path, monkeypatch, hash_embed):
    # "" said FileNotFoundError "No such file or directory: ''" (an export: a temporary
    # file's name in the folder above); "new/" made the folder, then IsADirectoryError;
    # b"s.db" failed with "can't concat str to bytes"
    monkeypatch.chdir(tmp_path)
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add(ex("hello there"))
    for call in (lambda: CTree.open("", embed_fn=hash_embed), lambda: tree.save("")):
        with pytest.raises(SessionFileError, match="is no file name"):
            call()
    for call in (lambda: CTree.open("new/", embed_fn=hash_embed), lambda: tree.save("new/")):
        with pytest.raises(SessionFileError, match="is a folder"):
            call()
    assert not (tmp_path / "new").exists()
    tree.save(b"b.json")
    CTree.open(b"b.db", embed_fn=hash_embed).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.db", "b.json"]


def test_a_message_or_topic_with_no_text_or_a_lone_surrogate_loses_nothing(tmp_path):
    # a text of None was stored and read back as None; a lone surrogate raised
    # UnicodeEncodeError after the message's old row had been deleted
    path = str(tmp_path / "v.db")
    db = VectorDatabase(path)
    db.add_conversation_message(ConversationVector("a", 0, "user", "cats purr", unit(1, 0, 0), "t0", "ROOT"))
    with pytest.raises(TypeError, match="message 'a': text must be text, not NoneType; nothing was stored"):
        db.add_conversation_message(ConversationVector("a", 0, "user", None, unit(1, 0, 0), "t0", "ROOT"))
    with pytest.raises(TypeError, match="message 5: message_id must be text"):
        db.add_conversation_message(ConversationVector(5, 0, "user", "x", unit(1, 0, 0), "t0", "ROOT"))
    with pytest.raises(TypeError, match="topic 't1': summary must be text"):
        db.upsert_topic_summary("t1", "Cats", None, unit(1, 0, 0))
    assert [(h.message_id, h.text) for h in db.search_conversation(unit(1, 0, 0))] == [("a", "cats purr")]
    db.add_conversation_message(ConversationVector("a", 0, "user", "cats \ud800 purr", unit(1, 0, 0), "t0", "ROOT"))
    db.upsert_topic_summary("t1", "Cats \udc80", "All about cats", unit(1, 0, 0))
    db.close()
    db = VectorDatabase(path)
    assert [h.text for h in db.search_conversation(unit(1, 0, 0))] == ["cats \ufffd purr"]
    assert [r["topic_name"] for r in db.search_topic_summaries(unit(1, 0, 0))] == ["Cats \ufffd"]
    db.close()


def test_fts_query_treats_user_text_as_words(tmp_path):
    db = VectorDatabase(str(tmp_path / "v.db"))
    db.add_conversation_message(ConversationVector("a", 0, "user", "NEAR the AND gate", unit(1, 0), "t", "p"))
    # FTS5 syntax in the query is searched for as words, never parsed (no error)
    assert [m for m, _ in db.keyword_search_messages('"NEAR(" AND OR * gate)')] == ["a"]
    assert db.keyword_search_messages("*** ((( ") == []


def test_schema_version_and_pragmas(tmp_path):
    db = VectorDatabase(str(tmp_path / "s.db"))
    assert db.schema_version == SCHEMA_VERSION
    assert db.con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.con.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_schema_5_moves_thread_paths_out_of_the_vector_rows(tmp_path):
    path = str(tmp_path / "old.db")
    db = VectorDatabase(path)
    db.add_conversation_message(ConversationVector("a", 0, "user", "cats", unit(1, 0), "t", "ROOT → Old",
                                                node_id="n1", exchange_index=0))
    db.add_conversation_message(ConversationVector("b", 1, "user", "plain", unit(0, 1), "t", "ROOT → Free"))
    db.close()
    # make it a schema-4 file whose paths live only in conversation_vectors
    con = sqlite3.connect(path)
    con.execute("DROP TABLE thread_paths")
    con.execute("UPDATE conversation_vectors SET thread_path='ROOT → Pets' WHERE node_id='n1'")
    con.execute("PRAGMA user_version=4")
    con.commit()
    con.close()
    db = VectorDatabase(path)
    assert db.schema_version == SCHEMA_VERSION >= 5
    got = db.get_conversation_messages(["a", "b"])
    assert got["a"].thread_path == "ROOT → Pets" and got["b"].thread_path == "ROOT → Free"
    db.update_thread_paths({"n1": "ROOT → Animals → Cats"})
    assert db.search_conversation(unit(1, 0), top_k=1)[0].thread_path == "ROOT → Animals → Cats"


def test_session_reopens_identically(tmp_path, minilm):
    path = str(tmp_path / "session.db")
    tree = CTree(judge="embedding", embed_fn=minilm, max_children=3)
    tree.vdb = VectorDatabase(path)
    talk = [
        ("My sister Sarah is allergic to peanuts.", "Noted: Sarah must avoid peanuts."),
        ("What's the weather in Tokyo?", "Rainy, 18 degrees."),
        ("Will it rain in Tokyo tomorrow too?", "Showers are likely tomorrow."),
        ("How do I fix a flat bike tire?", "Remove the wheel and patch the tube."),
        ("My bike chain squeaks as well.", "Clean and oil the chain."),
        ("Should I also check the bike brakes?", "Yes, check the pads."),
        ("Back to Sarah: her birthday is in May.", "A May birthday, noted."),
        ("Let's plan her surprise party.", "Invite friends, book a venue."),
    ]
    for u, a in talk:
        tree.add(ex(u, a), timestamp="2024-05-01T10:00:00")
        check_invariants(tree)
    snap = tree.snapshot()
    tree.vdb.close()  # one writer per file: the reopened tree writes next
    reopened = CTree.open(path, judge="embedding", embed_fn=minilm)
    check_invariants(reopened)
    assert reopened.snapshot() == snap
    assert reopened.max_children == 3
    # frozen topics are indexed; the recorded vectors find the right exchange
    frozen = [t for t in reopened.iter_topics() if t is not reopened.root and reopened.is_frozen(t)]
    assert frozen and reopened.vdb.topic_summary_ids() == {t.node_id for t in frozen}
    hit = reopened.vdb.search_conversation(minilm.embed("peanut allergy"), top_k=1, min_similarity=0.3)[0]
    assert "peanuts" in hit.text and hit.thread_path.startswith("ROOT → ")
    # and it goes on where it stopped
    reopened.add(ex("Sarah also likes chocolate cake.", "Chocolate cake it is."))
    check_invariants(reopened)
    assert len(CTree.open(path, judge="embedding", embed_fn=minilm, read_only=True).exchanges) == len(talk) + 1


def test_assigning_a_store_adopts_or_receives(tmp_path, hash_embed):
    path = str(tmp_path / "s.db")
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add(ex("before the store existed"))
    tree.vdb = VectorDatabase(path)  # an empty store receives the tree
    tree.add(ex("after"))
    fresh = CTree(judge="embedding", embed_fn=hash_embed)
    fresh.vdb = VectorDatabase(path, read_only=True)  # an empty tree adopts the stored session
    assert fresh.snapshot() == tree.snapshot()
    other = CTree(judge="embedding", embed_fn=hash_embed)
    other.add(ex("a different conversation"))
    with pytest.raises(SessionConflictError, match="already holds a conversation"):
        other.vdb = VectorDatabase(path, read_only=True)


def test_an_adopted_session_keeps_its_bound_and_refuses_another_embedder(tmp_path, hash_embed):
    # tree.vdb = VectorDatabase(path) took a session into a tree of another embedder:
    # every add() and prompt failed after it ("shapes (16,) and (64,) not aligned"); the
    # file's fan-out bound (3) gave way to the tree's (5)
    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed, max_children=3)
    for i in range(4):
        tree.add(ex(f"exchange {i} about gardening"))
    tree.close()

    def small(text: str) -> list[float]:
        return [1.0, float(len(text) % 7), 0.5]

    other = CTree(judge="embedding", embed_fn=small)
    db = VectorDatabase(path)
    with pytest.raises(EmbedderMismatchError, match="built with the embedder hash-bow-64"):
        other.vdb = db
    assert other.vdb is None and other.exchanges == [] and other.max_children == 5
    db.close()
    same = CTree(judge="embedding", embed_fn=hash_embed)
    same.vdb = VectorDatabase(path)
    assert same.max_children == 3 and len(same.exchanges) == 4
    same.add(ex("one more about gardening"))
    check_invariants(same)
    same.close()


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bad_session_files_get_a_clear_error_and_are_not_touched(tmp_path, hash_embed):
    good = tmp_path / "good.db"
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.vdb = VectorDatabase(str(good))
    for i in range(30):
        tree.add(ex(f"exchange number {i} " + "words " * 40))
    tree.vdb.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = good.read_bytes()

    cases = {
        "random.db": (b"this is not a database at all" * 10, "not a SQLite database"),
        "truncated.db": (data[: len(data) // 3], "damaged|truncated|malformed"),
        "header-only.db": (data[:100], "damaged|truncated|malformed"),
    }
    for name, (content, problem) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        before = _digest(p)
        with pytest.raises(SessionFileError, match=problem) as err:
            CTree.open(str(p), judge="embedding", embed_fn=hash_embed)
        assert str(p) in str(err.value)
        assert _digest(p) == before, name
        assert not (tmp_path / (name + "-wal")).exists()

    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE invoices(id INTEGER, amount REAL)")
    con.commit()
    con.close()
    before = _digest(foreign)
    with pytest.raises(SessionFileError, match="another program"):
        VectorDatabase(str(foreign))
    assert _digest(foreign) == before

    newer = tmp_path / "newer.db"
    newer.write_bytes(data)
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")
    con.commit()
    con.close()
    before = _digest(newer)
    with pytest.raises(SessionFileError, match="newer TRACE"):
        VectorDatabase(str(newer))
    assert _digest(newer) == before


def test_a_different_embedder_is_detected(tmp_path, hash_embed, minilm):
    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    tree.add(ex("hello"))
    assert tree.vdb.get_meta("embed_model") == "all-MiniLM-L6-v2"
    assert tree.vdb.get_meta("embed_dim") == "384"
    tree.vdb.close()
    with pytest.raises(EmbedderMismatchError, match="all-MiniLM-L6-v2.*384.*hash-bow-64.*64"):
        CTree.open(path, judge="embedding", embed_fn=hash_embed)


def test_bulk_upsert_equals_one_by_one(tmp_path):
    rows = [(f"t{k}", f"Topic {k}", f"summary number {k} about item{k}", unit(1, k % 3, k % 5), k, k + 1)
            for k in range(60)]
    a, b = VectorDatabase(str(tmp_path / "a.db")), VectorDatabase(str(tmp_path / "b.db"))
    for r in rows[:30]:
        a.upsert_topic_summary(*r)
        b.upsert_topic_summary(*r)
    changed = [(i, n + " v2", s + " again", e, x, y) for i, n, s, e, x, y in rows]
    for r in changed:
        a.upsert_topic_summary(*r)
    b.upsert_topic_summaries(changed)
    assert a.indexed_topics() == b.indexed_topics()
    for q in ("item7", "again", "item59"):
        assert a.keyword_search_topics(q) == b.keyword_search_topics(q)
    qv = unit(1, 2, 4)
    assert [h["node_id"] for h in a.search_topic_summaries(qv, top_k=10, min_similarity=0)] == \
        [h["node_id"] for h in b.search_topic_summaries(qv, top_k=10, min_similarity=0)]


def test_postings_scoring_matches_fts5_and_follows_the_rows(tmp_path, monkeypatch):
    """BM25 scored in numpy from FTS5's row ids (what a large session uses) ranks as FTS5
    does where no word repeats, and follows rows added, replaced and archived after it
    was loaded."""
    import trace_core.store as store
    from trace_core.keywords import first_varint

    db = VectorDatabase(str(tmp_path / "p.db"))
    lines = ["the kayak trip on the lake", "a kayak", "we sold the old kayak and bought a canoe for the lake",
             "baking sourdough bread", "bread and butter", "the lake was cold"]
    for k, text in enumerate(lines):
        db.add_conversation_message(ConversationVector(f"x{k}-user", k, "user", text, unit(1, k), "t", "p"))
    for query in ("kayak", "lake kayak", "bread", "canoe lake", "sourdough butter"):
        fts = db.fts_ranked_messages(query, 10)
        ours = db.postings_search(query, 10)
        assert [m for m, _ in ours] == [m for m, _ in fts], query
        assert np.allclose([s for _, s in ours], [s for _, s in fts], rtol=1e-6)
    # rows written after the sizes were read: added, replaced in place, archived
    db.add_conversation_message(ConversationVector("x9-user", 9, "user", "a canoe", unit(1, 9), "t", "p", node_id="n9"))
    db.add_conversation_message(ConversationVector("x1-user", 1, "user", "a paddle", unit(1, 1), "t", "p"))
    assert [m for m, _ in db.postings_search("canoe", 10)] == [m for m, _ in db.fts_ranked_messages("canoe", 10)]
    assert "x1-user" not in {m for m, _ in db.postings_search("kayak", 10)}
    assert [m for m, _ in db.postings_search("paddle", 10)] == ["x1-user"]
    db.set_exchange_archived("n9", True)
    assert [m for m, _ in db.postings_search("canoe", 10)] == ["x2-user"]  # archived rows are not returned
    monkeypatch.setattr(store, "SCORED_FROM", 0)  # a large session's path
    assert db.keyword_search_messages("bread", 10) == db.postings_search("bread", 10)
    assert first_varint(bytes([0x81, 0x00])) == 128 and first_varint(bytes([0x0B, 0x00])) == 11
    db.close()


def test_postings_search_leaves_out_a_stem_found_in_most_rows(tmp_path):
    """Callers drop common words by their own word counts; FTS5 matches stems, so
    "plans" finds every "plan" too. The postings path counts the stem's rows first."""
    db = VectorDatabase(str(tmp_path / "s.db"))
    texts = [f"can you help me plan day {k}" for k in range(80)] + ["the wedding is in May", "wedding cake"]
    for k, text in enumerate(texts):
        db.add_conversation_message(ConversationVector(f"x{k}-user", k, "user", text, unit(1, k), "t", "p"))
    everything = {m for m, _ in db.postings_search("wedding plans", 100)}
    assert len(everything) == 82  # "plans" matched every "plan"
    kept = {m for m, _ in db.postings_search("wedding plans", 100, max_share=0.2)}
    assert kept == {"x80-user", "x81-user"}  # the stem in 80 of 82 rows is left out
    db.close()


def test_the_message_index_survives_a_file_without_fts_sizes(tmp_path):
    """BM25's row sizes are read with the cosine index; a file without them (damaged
    FTS5 tables) still gives the cosine index, and keyword search falls back to FTS5."""
    path = str(tmp_path / "d.db")
    db = VectorDatabase(path)
    db.add_conversation_message(ConversationVector("x0-user", 0, "user", "a kayak", unit(1, 0), "t", "p"))
    db.close()
    con = sqlite3.connect(path)
    con.execute("DROP TABLE messages_fts_docsize")
    con.commit()
    con.close()
    db = VectorDatabase(path)
    assert db.conversation_index().ids == ["x0-user"]
    try:
        db.keyword_search_messages("kayak")
    except sqlite3.DatabaseError:
        pass  # FTS5's own answer to its missing table: not the cosine index's concern
    db.close()


def test_a_session_file_renamed_while_open_keeps_every_exchange_and_refuses_more(tmp_path, hash_embed):
    """A session renamed in a file manager while open: SQLite neither checkpoints a moved
    file on closing nor stops writing to the log under the old name, so every exchange
    since the last checkpoint (and one added after the move, said as remembered) stayed
    in an orphaned log, and the renamed file opened without them."""
    from trace_core import SessionMovedError

    path, moved = tmp_path / "trip.db", tmp_path / "renamed trip.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=hash_embed)
    tree.add(ex("my sister lives in Köln"))
    tree.add(ex("my bike is red"))
    path.rename(moved)
    with pytest.raises(SessionMovedError, match="renamed, moved or deleted while open"):
        tree.add(ex("my cat is called Miso"))
    assert [x.user for x in tree.exchanges] == ["my sister lives in Köln", "my bike is red"]  # as the file holds
    tree.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["renamed trip.db"]  # the old name's log went into it
    again = CTree.open(str(moved), judge="embedding", embed_fn=hash_embed)
    assert [x.user for x in again.exchanges] == ["my sister lives in Köln", "my bike is red"]
    again.close()


def test_a_session_file_deleted_or_replaced_while_open_is_written_no_more(tmp_path, hash_embed):
    from trace_core import SessionMovedError

    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=hash_embed)
    tree.add(ex("first"))
    path.unlink()
    with pytest.raises(SessionMovedError):
        tree.add(ex("second"))
    with pytest.raises(SessionMovedError):
        tree.vdb.set_meta("k", "v")
    tree.close()
    assert not path.exists()  # nothing made again under the name
    other = tmp_path / "t.db"
    tree = CTree.open(str(other), judge="embedding", embed_fn=hash_embed)
    tree.add(ex("mine"))
    stranger = tmp_path / "stranger.db"
    stranger.write_bytes(b"not mine")
    stranger.replace(other)  # another file put in its place (a sync tool)
    with pytest.raises(SessionMovedError):
        tree.add(ex("more"))
    tree.close()
    assert other.read_bytes() == b"not mine"  # the file put there is not touched


def test_a_change_of_working_folder_is_no_move(tmp_path, hash_embed, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tree = CTree.open("s.db", judge="embedding", embed_fn=hash_embed)  # a path relative to the working folder
    tree.add(ex("first"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tree.add(ex("second"))  # the file has not moved: still written
    tree.close()
    again = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=hash_embed, read_only=True)
    assert [x.user for x in again.exchanges] == ["first", "second"]
    again.close()


def test_a_new_file_beside_another_files_write_ahead_log_is_refused(tmp_path, hash_embed):
    """A log left at a name by a file moved or deleted while open (a process that died
    before closing it) was read into a new session made there: SQLite replays any log
    beside a database, and the new session opened with the other one's exchanges."""
    import os
    import shutil

    old = tmp_path / "old.db"
    tree = CTree.open(str(old), judge="embedding", embed_fn=hash_embed)
    tree.vdb.con.execute("PRAGMA wal_autocheckpoint=0")
    tree.add(ex("the other session's secret"))
    shutil.copy(f"{old}-wal", tmp_path / "new.db-wal")  # as a killed process leaves it
    tree.close()
    with pytest.raises(SessionFileError, match="new.db: does not exist, but a write-ahead log of another file does"):
        CTree.open(str(tmp_path / "new.db"), judge="embedding", embed_fn=hash_embed)
    assert not (tmp_path / "new.db").exists() and os.path.getsize(tmp_path / "new.db-wal") > 0
    (tmp_path / "empty.db-wal").write_bytes(b"")  # an empty one holds nothing: no harm
    CTree.open(str(tmp_path / "empty.db"), judge="embedding", embed_fn=hash_embed).close()


def test_nexus_takes_no_session_name_a_write_ahead_log_holds(tmp_path, monkeypatch):
    from nexus import sessions

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    Path(f"{sessions.resolve('bread')}-wal").write_bytes(b"x" * 32)
    assert sessions.imported_session_path(Path("bread.json")).name == "bread-2.db"
    mine = sessions.resolve("mine")
    mine.write_bytes(b"")
    with pytest.raises(ValueError, match="the write-ahead log of an earlier session named bread is still there"):
        sessions.rename_target(mine, "bread")

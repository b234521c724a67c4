"""add() with text SQLite and the tokenizer cannot take (issue 10.2, engine part): lone
surrogates (valid JSON, e.g. a model's "\\ud800") are made safe before storing; bad input
raises the README's ValueError and stores nothing."""

from __future__ import annotations

import json

import pytest

from trace_core import CTree
from trace_core.invariants import check_invariants
from trace_core.tree import storable


def test_lone_surrogates_are_stored_as_replacement_characters(tmp_path, minilm):
    path = str(tmp_path / "s.db")
    reply = json.loads('"half an emoji: \\ud83d and a stray \\udfff, a whole one: \\ud83d\\ude00"')
    assert "\ud83d" in reply  # what a model's JSON stream can hand us
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    node = tree.add([{"role": "user", "content": "tell me \ud800 something"},
                     {"role": "assistant", "content": reply}])
    assert node.user == "tell me \ufffd something"
    assert node.assistant == "half an emoji: \ufffd and a stray \ufffd, a whole one: 😀"
    # split pairs (two code units in a str) are joined, not replaced
    tree.add([{"role": "user", "content": "pair \ud83d\ude00 here"}, {"role": "assistant", "content": "ok"}])
    tree.vdb.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=minilm, read_only=True)
    check_invariants(reopened)
    assert [x.assistant for x in reopened.exchanges] == [node.assistant, "ok"]
    assert reopened.exchanges[1].user == "pair 😀 here"
    hits = reopened.vdb.keyword_search_messages("emoji")
    assert hits and hits[0][0] == "x0-assistant"
    reopened.vdb.close()


@pytest.mark.parametrize("messages, words", [
    ("hello", "takes a list of messages"),
    ([{"role": "user", "content": "q"}], "exactly one assistant"),
    ([{"role": "user", "content": b"bytes"}, {"role": "assistant", "content": "a"}], "not str"),
    ([{"role": "user", "content": "   "}, {"role": "assistant", "content": "a"}], "empty content"),
    ([{"role": "robot", "content": "q"}, {"role": "assistant", "content": "a"}], "has role 'robot'"),
    ([("user", "q"), {"role": "assistant", "content": "a"}], "not a dict"),
])
def test_bad_input_raises_value_error_and_stores_nothing(tmp_path, minilm, messages, words):
    path = str(tmp_path / "bad.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    with pytest.raises(ValueError, match=words):
        tree.add(messages)
    assert tree.exchanges == [] and tree.vdb.load_messages() == []
    tree.vdb.close()


def test_storable_leaves_ordinary_text_alone():
    text = "naïve café — 東京 😀 \x00 tab\t"
    assert storable(text) is text


def test_an_exchange_the_file_refuses_leaves_the_tree_as_the_file_holds_it(tmp_path, minilm):
    """A write refused (disk full; another connection holding the file past the busy
    timeout) left the exchange in memory; the next one was written with a gap in the
    numbering and the session no longer opened, not even with /repair (trial)."""
    import sqlite3

    import pytest

    def ex(user: str, assistant: str) -> list[dict]:
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    tree.add(ex("My sister Anna lives in Lisbon.", "Noted."))
    tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
    with pytest.raises(sqlite3.OperationalError):
        tree.add(ex("This one the disk refuses.", "Lost."))
    assert len(tree.exchanges) == 1 and tree.structure.exchanges[-1].index == 0
    tree.vdb.con.execute("PRAGMA query_only = OFF")
    tree.add(ex("And this one is stored.", "Yes."))
    assert [x.index for x in tree.exchanges] == [0, 1]
    tree.vdb.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=minilm, read_only=True)
    assert [x.user for x in reopened.exchanges] == ["My sister Anna lives in Lisbon.", "And this one is stored."]
    reopened.vdb.close()


def test_every_change_the_file_refuses_leaves_the_tree_as_the_file_holds_it(tmp_path, hash_embed):
    """archive, restore, forget, replace_last and reorganize changed
    the tree and then the file refused the write: the tree showed the change (an exchange
    archived by a failed forget, the replacement, the merges) and the file, reopened, had
    none of it (a developer's trial)."""
    import sqlite3

    import pytest

    def ex(user: str, assistant: str) -> list[dict]:
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed, max_children=3)
    subjects = ["dogs and puppies", "car engines", "tax returns", "jazz music"]
    for i in range(16):
        tree.add(ex(f"talk about {subjects[i % 4]} number {i}", f"reply on {subjects[i % 4]}"))
    tree.archive([tree.exchanges[3]])

    def shape(t: CTree) -> tuple:
        return (t.render_tree(show_messages=True),
                [(x.messages, x.archived, x.forgotten) for x in t.exchanges], t.current_node.node_id)

    stored = shape(tree)
    changes = {"archive": lambda: tree.archive([tree.exchanges[1]]),
               "restore": lambda: tree.restore_archived([tree.exchanges[3]]),
               "forget": lambda: tree.forget([tree.exchanges[2]]),
               "replace_last": lambda: tree.replace_last(ex("replaced by a new question", "a new answer")),
               "reorganize": lambda: tree.reorganize(similarity_threshold=0.05)}
    for name, change in changes.items():
        tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        with pytest.raises(sqlite3.OperationalError):
            change()
        tree.vdb.con.execute("PRAGMA query_only = OFF")
        assert shape(tree) == stored, name
    tree.forget([tree.exchanges[2]])  # the tree's own nodes still work after it
    stored = shape(tree)
    tree.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=hash_embed, read_only=True)
    assert shape(reopened) == stored
    reopened.close()


def test_after_a_refused_write_the_tree_counts_and_finds_as_the_file_opened_afresh(tmp_path, hash_embed):
    """After a write the file refused, the tree went back to what the file holds but its
    word statistics kept the refused exchange's words (a /forget's scrubbing too): a word
    in half the exchanges turned "common", dropped from the focused query and topic names,
    where the same file opened afresh kept it. They are counted again from the file."""
    from trace_core import SessionWriteError
    from trace_core.synthesizer import PromptSynthesizer

    def ex(user: str, assistant: str) -> list[dict]:
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed, max_children=3)
    for i in range(20):  # "graz" in 10 of 20: not common; in 11 of 21 it is
        where = "graz" if i % 2 else f"town{i}"
        tree.add(ex(f"the weather in {where} on day {i}", f"sunny in {where}, day {i}"))

    def found(t: CTree) -> tuple:
        synth = PromptSynthesizer(ctree=t, vector_db=t.vdb, memory_token_budget=200)
        return (dict(t.word_stats.counts), t.word_stats.docs,
                synth.synthesize_prompt("graz weather", recent_messages=[]),
                t.vdb.keyword_search_messages("graz weather"))

    refusals = {"add": lambda: tree.add(ex("the train to graz", "it leaves from graz at noon")),
                "forget": lambda: tree.forget([tree.exchanges[1]])}
    for name, change in refusals.items():
        tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        with pytest.raises(SessionWriteError):
            change()
        tree.vdb.con.execute("PRAGMA query_only = OFF")
        fresh = CTree.open(path, judge="embedding", embed_fn=hash_embed, read_only=True)
        try:
            assert found(tree) == found(fresh), name
        finally:
            fresh.close()
    tree.close()


def test_a_full_disk_or_a_held_file_is_a_session_error_in_words(tmp_path, hash_embed):
    """A full disk said sqlite3.OperationalError "database or disk is full", which no
    ``except SessionFileError`` caught (a developer's trial)."""
    import sqlite3

    import pytest

    from nexus.turn import store_problem
    from trace_core import SessionFileError, SessionWriteError

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "a small first one"}, {"role": "assistant", "content": "ok"}])
    pages = tree.vdb.con.execute("PRAGMA page_count").fetchone()[0]
    tree.vdb.con.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
    with pytest.raises(SessionWriteError, match="s.db: could not be written .database or disk is full.") as info:
        tree.add([{"role": "user", "content": "word " * 50_000}, {"role": "assistant", "content": "ok"}])
    assert isinstance(info.value, SessionFileError) and isinstance(info.value, sqlite3.OperationalError)
    assert store_problem(info.value) == "the disk is full" and len(tree.exchanges) == 1
    tree.vdb.con.execute("PRAGMA max_page_count = 1073741823")
    tree.add([{"role": "user", "content": "room again"}, {"role": "assistant", "content": "ok"}])
    assert [x.index for x in tree.exchanges] == [0, 1]
    tree.close()


def test_a_timestamp_that_is_no_date_and_a_reply_before_its_question_are_refused(tmp_path, minilm):
    """"not a date" and 12345 were stored and shown to the model as date lines; an
    [assistant, user] exchange was taken (trial)."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    ok = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]
    for bad, words in (("not a date", "is not an ISO 8601 date"), (12345, "not int")):
        with pytest.raises(ValueError, match=words):
            tree.add(ok, timestamp=bad)
    with pytest.raises(ValueError, match="comes before the user's"):
        tree.add(list(reversed(ok)))
    tree.add(ok, timestamp="2024-05-01T10:00:00+00:00")
    tree.add(ok, timestamp="2024-05-02")
    assert [x.timestamp[:10] for x in tree.exchanges] == ["2024-05-01", "2024-05-02"]
    tree.vdb.close()


def test_basic_and_week_iso_dates_are_stored_in_the_extended_form(tmp_path, minilm):
    """"20231013T100000" and "2023-W41-1" were stored as given: the memory block showed
    "[20231013T1]", and "What did I do on October 13, 2023?" found nothing (a trial)."""
    from trace_core import CTree, PromptSynthesizer

    tree = CTree(judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "I repainted the garden shed green."},
              {"role": "assistant", "content": "Nice."}], timestamp="20231013T100000")
    tree.add([{"role": "user", "content": "I planted tulips along the fence."},
              {"role": "assistant", "content": "Lovely."}], timestamp="2023-W41-1")
    tree.add([{"role": "user", "content": "My cat knocked a vase over."},
              {"role": "assistant", "content": "Oh no."}], timestamp="2023-10-20T09:00")
    assert [x.timestamp for x in tree.exchanges] == ["2023-10-13T10:00:00", "2023-10-09T00:00:00", "2023-10-20T09:00"]
    q = "What did I do on October 13, 2023?"
    block = PromptSynthesizer(ctree=tree).synthesize_prompt(q, minilm.embed(q), None, [])
    assert "[2023-10-13]" in block and "repainted the garden shed" in block and "20231013T1" not in block


def test_a_message_vector_of_another_size_is_refused_before_it_is_stored(tmp_path, minilm):
    """One 3-number vector through VectorDatabase.add_conversation_message was accepted,
    and every synthesis and search of the session failed from then on, after a reopen
    too (a trial)."""
    from trace_core import ConversationVector, PromptSynthesizer

    path = str(tmp_path / "v.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My bike is a green Peugeot."}, {"role": "assistant", "content": "Nice."}])
    for bad in ([0.1] * 3, [], [[0.1] * 384]):
        with pytest.raises(ValueError, match="nothing was stored"):
            tree.vdb.add_conversation_message(ConversationVector("ext-2", 6, "user", "bad", bad,
                                                                "2024-01-01T00:00:00", "ROOT"))
    tree.vdb.close()
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    q = "What bike do I have?"
    assert "Peugeot" in PromptSynthesizer(ctree=tree).synthesize_prompt(q, minilm.embed(q), None, [])
    assert tree.vdb.search_conversation(minilm.embed(q), top_k=3)
    tree.vdb.close()


@pytest.mark.parametrize("bad", [{"judge": "embeddings"}, {"max_children": 1}])
def test_open_with_a_bad_argument_makes_no_file(tmp_path, minilm, bad):
    """CTree.open('new.db', judge='embeddings') raised, and left a 118 KB session file
    behind (a trial): the arguments are checked first."""
    path = tmp_path / "new.db"
    with pytest.raises(ValueError):
        CTree.open(str(path), embed_fn=minilm, **bad)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_add_after_close_is_refused_in_words_and_changes_nothing(tmp_path, minilm):
    """After close(), add() raised sqlite's "Cannot operate on a closed database" and the
    tree in memory grew by one each time: a later save() exported exchanges never stored
    (a trial)."""
    from trace_core import SessionFileError

    path = str(tmp_path / "c.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My bike is a green Peugeot."}, {"role": "assistant", "content": "Nice."}])
    tree.close()
    for _ in range(2):
        with pytest.raises(SessionFileError, match="is closed"):
            tree.add([{"role": "user", "content": "And a red one."}, {"role": "assistant", "content": "Two."}])
    assert len(tree.exchange_view()) == 1
    again = CTree.open(path, judge="embedding", embed_fn=minilm)
    assert [x.user for x in again.exchanges] == ["My bike is a green Peugeot."]
    again.close()


def test_counts_and_budgets_below_zero_are_refused_in_words(tmp_path, minilm):
    """search_conversation(top_k=-1) returned all hits but one (a slice), and
    synthesize_prompt(memory_token_budget=-5) was taken silently (a trial)."""
    from trace_core import PromptSynthesizer

    tree = CTree.open(str(tmp_path / "k.db"), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My bike is a green Peugeot."}, {"role": "assistant", "content": "Nice."}])
    q = minilm.embed("bike")
    for call in (lambda: tree.vdb.search_conversation(q, top_k=-1),
                 lambda: tree.vdb.search_topic_summaries(q, top_k=-1),
                 lambda: PromptSynthesizer(ctree=tree).synthesize_prompt("bike?", q, None, [], memory_token_budget=-5),
                 lambda: PromptSynthesizer(ctree=tree).synthesize_prompt("bike?", q, None, [], top_k_docs=-1)):
        with pytest.raises(ValueError, match="whole number ≥ 0"):
            call()
    assert tree.vdb.search_conversation(q, top_k=0) == []
    tree.close()


def test_a_store_failure_is_said_by_its_problem_not_by_the_sessions_name(tmp_path):
    # the words were matched in the whole message, path too: a session named
    # "readonly-notes" had a file held by another connection said as a read-only file
    import sqlite3

    from nexus.turn import store_problem
    from trace_core import SessionWriteError
    from trace_core.errors import SessionFileError

    path = str(tmp_path / "sessions" / "readonly-notes.db")
    said = store_problem(SessionWriteError(path, sqlite3.OperationalError("database is locked")))
    assert "read-only" not in said and "database is locked" in said and "SessionWriteError" not in said
    # SQLite's "disk I/O error" (a file-size limit, ulimit -f, in a trial) said with what it may be, not as
    # "SessionWriteError: /path/s.db: could not be written (disk I/O error); nothing of this change was stored"
    assert store_problem(SessionWriteError(path, sqlite3.OperationalError("disk I/O error"))) == \
        "the session file could not be written (a disk I/O error: a failing disk, or a file-size limit reached)"
    assert store_problem(SessionWriteError(path, sqlite3.OperationalError("database or disk is full"))) == \
        "the disk is full"
    assert store_problem(SessionFileError(str(tmp_path / "is closed (old)" / "s.db"), "is damaged")) != \
        "the session was closed"
    assert store_problem(sqlite3.OperationalError("attempt to write a readonly database")) == \
        "the session file cannot be written (read-only)"

"""MemoryService: the memory of one session as a service (real SQLite files, MiniLM)."""

from __future__ import annotations

import threading

import pytest

from nexus.memory_service import MemoryService, NothingToRemember, SessionNameError, context_key, session_path
from trace_core import CTree
from trace_core.invariants import check_invariants

FACTS = [
    ("My sister Ana lives in Lisbon and teaches piano.", "Lisbon and piano, noted."),
    ("I'm allergic to peanuts, keep that in mind for recipes.", "Understood: no peanuts."),
    ("Our team ships the Orion release on March 3rd.", "Orion ships March 3rd."),
    ("My bike is a green Brompton I bought in 2019.", "A green Brompton from 2019."),
    ("The wifi password at the cabin is written on the fridge.", "On the fridge, got it."),
]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def open_svc(name: str, embed) -> MemoryService:
    return MemoryService.open(session_path(name), embed_fn=embed, judge="embedding")


@pytest.mark.parametrize("bad", ["../x", "..", "a/b", "/etc/passwd", "a\\b", "", " ", "-x", ".hidden", "a..b",
                                 "x" * 65, "a b", "naïve\x00"])
def test_session_names_are_plain_names(data_dir, bad):
    with pytest.raises(SessionNameError, match="not a session name"):
        session_path(bad)


def test_session_names_resolve_in_the_sessions_folder(data_dir):
    # "foo.db.db" was made in the current folder, outside the sessions folder (a trial)
    assert session_path("foo.db.db") == session_path("foo") == session_path("foo.db")
    assert session_path("foo").parent == data_dir / "sessions"
    p = session_path("work-notes_2")
    assert p == data_dir / "sessions" / "work-notes_2.db"
    assert session_path("work-notes_2.db") == p  # the file name works too


def test_remember_recall_with_provenance(data_dir, minilm):
    svc = open_svc("s1", minilm)
    try:
        assert svc.outline() == "ROOT (0 exchanges)"  # no range: it read "ROOT [-1:-1]" (trial)
        for i, (u, a) in enumerate(FACTS):
            r = svc.remember(u, a)
            assert r.exchange == i and r.session == "s1" and r.branch
        rec = svc.recall("Which city does my sister live in?", budget_tokens=300)
        assert "Lisbon" in rec.block
        assert rec.tokens <= 300 and rec.budget == 300
        assert rec.exchanges and rec.exchanges[0].index == 0  # the best-ranked exchange is the Lisbon one
        assert rec.exchanges[0].similarity > 0.3 and rec.exchanges[0].branch
        assert rec.branches and all(b.path for b in rec.branches)
        # each branch counts the exchanges shown under it, not its block's lines with their
        # date lines (one too many, a trial)
        shown = {x.index for x in rec.exchanges}
        assert sum(b.exchanges for b in rec.branches) == len(shown), (rec.branches, shown)
        assert rec.as_dict()["exchanges"][0]["index"] == 0
        assert svc.recall("anything", budget_tokens=0).block == ""
        # a lone surrogate (a JSON client's "\ud800"): the memory still comes, as it went
        # without through the proxy ("recall failed (TypeError …)"; trial)
        odd = svc.recall("Which city does my sister live in? \ud800", budget_tokens=300)
        assert "Lisbon" in odd.block and "\ufffd" in odd.query
        with pytest.raises(ValueError, match="budget_tokens"):
            svc.recall("x", budget_tokens=-1)
        with pytest.raises(ValueError):
            svc.remember("question", "   ")  # nothing stored for bad input
        assert svc.stats()["exchanges"] == 5
        assert svc.exchange(2)["messages"][0]["content"] == FACTS[2][0]
        with pytest.raises(IndexError, match="#0..#4"):
            svc.exchange(9)
        assert "ROOT" in svc.outline()
    finally:
        svc.close()
    tree = CTree.open(str(session_path("s1")), embed_fn=minilm, judge="embedding")
    assert [(x.user, x.assistant) for x in tree.exchanges] == FACTS
    tree.vdb.close()


def test_search_across_sessions_names_each_session(data_dir, minilm):
    other = open_svc("holiday", minilm)
    other.remember("We booked the ferry to Naxos for August 12.", "Ferry to Naxos on August 12.")
    svc = open_svc("main", minilm)
    try:
        for u, a in FACTS:
            svc.remember(u, a)
        own = svc.search("ferry to Naxos", k=5)
        assert all(h.session == "main" for h in own.hits)
        session_path("zero").write_bytes(b"")  # an empty file: nothing to search, nothing to report
        both = svc.search("ferry to Naxos", k=5, all_sessions=True)
        assert both.hits[0].session == "holiday" and "Naxos" in both.hits[0].text
        assert not [s for s in both.skipped if s.startswith("zero")], both.skipped
        assert {h.session for h in both.hits} >= {"holiday"}
        # the other session is being written by its owner meanwhile: reading it never blocks that
        other.remember("The ferry leaves at 7:30 from Piraeus.", "7:30 from Piraeus.")
        again = svc.search("what time does the ferry leave", k=3, all_sessions=True)
        assert any("7:30" in h.text and h.session == "holiday" for h in again.hits)
    finally:
        svc.close()
        other.close()


def test_search_skips_a_session_with_another_embedder(data_dir, minilm, hash_embed):
    odd = open_svc("hashed", hash_embed)
    odd.remember("ferry tickets", "booked")
    odd.close()
    svc = open_svc("main", minilm)
    try:
        svc.remember("ferry tickets for Naxos", "booked for August")
        res = svc.search("ferry", all_sessions=True)
        assert all(h.session == "main" for h in res.hits)
        assert any(s.startswith("hashed:") and "hash-bow-64" in s for s in res.skipped)
    finally:
        svc.close()


def test_concurrent_remember_and_recall_keep_every_exchange_once(data_dir, hash_embed):
    svc = open_svc("busy", hash_embed)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(25):
                svc.remember(f"writer {w} note {i} about topic {i % 5}", f"ack {w}/{i}")
                svc.recall(f"topic {i % 5}", 200)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    svc.wait_indexed()
    assert not errors
    check_invariants(svc.tree)
    svc.close()
    tree = CTree.open(str(session_path("busy")), embed_fn=hash_embed, judge="embedding")
    got = sorted(x.assistant for x in tree.exchanges)
    assert got == sorted(f"ack {w}/{i}" for w in range(4) for i in range(25))
    check_invariants(tree)
    tree.vdb.close()


def test_search_refuses_a_count_below_one_and_cuts_a_huge_hit(data_dir, minilm):
    """k=0 and k=-3 were taken (clamped to 1) where recall refuses a bad budget; a
    megabyte message came back whole in every hit and broke an MCP client's 1 MiB event
    limit for good (found in a new-user trial). A hit carries its first 2,000 characters and
    the message's whole length (the exchange resource has the rest)."""
    from nexus.memory_service import HIT_CHARS

    svc = open_svc("big", minilm)
    try:
        huge = "Big paste: lorem ipsum dolor sit amet. " * 30000
        svc.remember(huge, "That is a lot of lorem ipsum.")
        for bad in (0, -3):
            with pytest.raises(ValueError, match="1 or more"):
                svc.search("lorem ipsum", k=bad)
        hit = next(h for h in svc.search("Big paste: lorem ipsum dolor sit amet", k=3).hits if h.role == "user")
        assert len(hit.text) == HIT_CHARS and hit.text.endswith("…") and hit.chars == len(huge)
        assert huge.startswith(hit.text[:-1])
    finally:
        svc.close()


def test_recall_leaves_out_what_the_caller_already_has(data_dir, minilm):
    """A proxy's client sends its history with its own copy of the replies: an exchange
    whose user message is already in that history was injected again (found in a
    new-user trial); it is left out even when the reply the client kept differs."""
    svc = open_svc("boat", minilm)
    try:
        svc.remember("My boat is named Albatross.", "What a lovely name for a boat!")
        svc.remember("I sail it on Lake Geneva every summer.", "Lake Geneva is beautiful in summer.")
        recent = [{"role": "user", "content": "My boat is named Albatross."},
                  {"role": "assistant", "content": "Nice name."}]
        block = svc.recall("What is my boat called and where do I sail it?", recent=recent).block
        assert "Lake Geneva" in block and "My boat is named Albatross" not in block
        assert "My boat is named Albatross" in svc.recall("What is my boat called and where do I sail it?").block
    finally:
        svc.close()


def test_reasoning_is_never_stored_by_the_one_writer(data_dir, minilm):
    """MCP's remember kept "<think>reasoning</think>", and recall put it in the block (a trial)."""
    svc = open_svc("think", minilm)
    try:
        with pytest.raises(ValueError, match="nothing but reasoning"):
            svc.remember("hello there", "<think>reasoning</think>")
        svc.remember("Where is Porto?", "<think>the user asks a city</think>Porto is in Portugal.")
        assert svc.tree.exchanges[-1].assistant == "Porto is in Portugal." and len(svc.tree.exchanges) == 1
    finally:
        svc.close()


def test_a_question_asked_again_is_a_regenerate_only_soon_and_after_the_same_messages(data_dir, hash_embed):
    from datetime import UTC, datetime, timedelta

    svc = open_svc("regen", hash_embed)
    notes = [{"role": "system", "content": "Notes: lunch with Bob on Tuesday."}]
    try:
        svc.remember("Plan my week?", "Gym Monday.", earlier=notes)
        assert svc.regenerating("Plan my week?", notes) == 0
        assert svc.regenerating("Plan my week? ", notes) == 0  # as stored: stripped
        # the same words after other messages: another chat, or asked again after the answer
        assert svc.regenerating("Plan my week?", [{"role": "system", "content": "Notes: dentist Friday."}]) is None
        assert svc.regenerating("Plan my week?", [*notes, {"role": "user", "content": "Plan my week?"},
                                                  {"role": "assistant", "content": "Gym Monday."}]) is None
        assert svc.regenerating("Plan my month?", notes) is None
        r = svc.remember("Plan my week?", "Rest on Sunday.", replaces=0, earlier=notes)
        assert (r.exchange, r.replaced) == (0, True)
        assert svc.regenerating("Plan my week?", notes) == 0  # regenerated twice
        # a number that is no longer the newest (another request stored in between) adds instead
        svc.remember("Other question", "Other answer.")
        assert svc.regenerating("Plan my week?", notes) is None
        r = svc.remember("Plan my week?", "Late answer.", replaces=0)
        assert (r.exchange, r.replaced) == (2, False)
        # stored without its messages (MCP's remember), or two hours ago: never a regenerate
        assert svc.regenerating("Plan my week?", []) is None
        old = (datetime.now(UTC) - timedelta(hours=2)).isoformat(timespec="seconds")
        svc.tree.add([{"role": "user", "content": "Plan my year?"}, {"role": "assistant", "content": "Travel."}],
                     timestamp=old)
        svc._newest_context = (3, context_key([]))
        assert svc.regenerating("Plan my year?", []) is None
        assert svc.regenerating("Plan my year?", [{"role": "user", "content": "x"}]) is None
        assert [x.assistant for x in svc.tree.exchanges] == ["Rest on Sunday.", "Other answer.", "Late answer.",
                                                             "Travel."]
        check_invariants(svc.tree)
    finally:
        svc.close()


def test_an_answer_that_says_nothing_is_never_remembered(data_dir, hash_embed):
    """What Nexus does not store, MCP and the proxy do not either (a bare "User:", a date
    line, the client's system prompt said back were stored: a trial)."""
    svc = open_svc("nothing", hash_embed)
    try:
        for said in ("User:", "[2026-12-03]", "-", "Memory from earlier in this conversation, by topic:"):
            with pytest.raises(NothingToRemember, match="says nothing"):
                svc.remember("what is up", said)
        with pytest.raises(NothingToRemember):
            svc.remember("My brother Tom is a pilot.", "Answer in one short sentence.",
                         own_system="Answer in one short sentence.")
        assert svc.remember("How many?", "42").exchange == 0  # a number is an answer
        assert len(svc.tree.exchanges) == 1
    finally:
        svc.close()


def test_only_a_keyword_match_near_the_best_is_marked_as_holding_the_words(data_dir, minilm):
    """"where does my sister live": hits at cosine 0.17 and 0.08 were marked ≡ for
    "living" alone (a trial); and a cosine of -0.001 read "-0.00"."""
    from nexus.memory_service import score_text

    svc = open_svc("marks", minilm)
    try:
        for u in ("My sister Ana lives in Porto with her cat.", "Living costs in Berlin went up again.",
                  "I repaired the bike's rear brake.", "The sister ship sailed at dawn, living up to its name."):
            svc.remember(u, "Noted.")
        assert svc.search("😀", k=6).hits == [] and svc.search("?!", k=6).hits == []  # as the memory block
        hits = svc.search("where does my sister live", k=6).hits
        marked = {h.text for h in hits if h.words}
        assert "My sister Ana lives in Porto with her cat." in marked
        assert "Living costs in Berlin went up again." not in marked
    finally:
        svc.close()
    assert score_text(-0.001) == "0.00" and score_text(-0.25) == "-0.25" and score_text(0.5) == "0.50"

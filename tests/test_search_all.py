"""`/search --all` in Nexus: every session of the user, each hit naming its session; the
other sessions are opened read-only, even while another process writes one."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from nexus.app import NexusApp
from nexus.config import load_config
from nexus.memory_service import MemoryService, session_path
from nexus.widgets import Notice


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def config(server_url: str, tmp_path):
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    cfg.set("server", "base_url", server_url)
    cfg.set("models", "chat", "test-model")
    cfg.set("memory", "judge", "embedding")
    cfg.set("memory", "idle_reorganize_seconds", 0)
    cfg.set("web", "enabled", False)
    return cfg


def notices(app) -> str:
    return "\n".join(n.plain for n in app.query(Notice))


async def wait_for(pilot, cond, timeout: float = 30.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < end, notices(pilot.app)
        await pilot.pause(0.05)


HOLDER = """
import sys, time
from nexus.memory_service import MemoryService, session_path
from trace_core.embedders import MiniLMEmbedder
svc = MemoryService.open(session_path("trip"), embed_fn=MiniLMEmbedder(), judge="embedding")
svc.remember("The ferry to Naxos leaves at 7:30 from Piraeus.", "7:30 from Piraeus, noted.")
print("ready", flush=True)
sys.stdin.readline()
svc.remember("We also booked a room in Naxos town.", "Room in Naxos town, noted.")
print("written", flush=True)
svc.close()
"""


async def test_search_all_names_each_session_and_never_blocks_the_writer(server, tmp_path, data_dir, minilm):
    own = MemoryService.open(session_path("home"), embed_fn=minilm, judge="embedding")
    own.remember("I water the tomatoes every morning.", "Tomatoes, every morning.")
    own.close()
    # another process holds "trip" open for writing for the whole test
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    try:
        assert holder.stdout.readline().strip() == "ready"
        app = NexusApp(config(server.base_url, tmp_path), session_path("home"), embed_fn=minilm)
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(pilot, lambda: app.session is not None and app.embedder_state == "ready")
            inp = app.query_one("#prompt")
            inp.value = "/search --all ferry to Naxos"
            await pilot.press("enter")
            await wait_for(pilot, lambda: "Memory search in every session" in notices(app))
            text = notices(app)
            assert "[trip]" in text and "7:30 from Piraeus" in text
            inp.value = "/search --all tomatoes"
            await pilot.press("enter")
            await wait_for(pilot, lambda: "[home]" in notices(app))
        # the writer was never blocked by the reads
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "written"
        assert holder.wait(60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_session_without_the_rarer_word_does_not_hold_the_query_s_words(data_dir, minilm):
    """`/search --all Miso vet`: the session holding both words gave one hit; eleven from a
    session of notes naming only Miso came next, each marked ≡ "holds its words" and
    lifted as if it did — the words were weighed against each session's own best match,
    and that session's best held "Miso" alone (a new-user trial)."""
    from nexus.memory_service import search_sessions

    pets = MemoryService.open(session_path("pets"), embed_fn=minilm, judge="embedding")
    pets.remember("My cat Miso is 7 years old and hates the vet.", "Poor Miso.")
    pets.remember("I'm flying to Lisbon on March 14th.", "Have a good trip.")
    pets.remember("Miso needs her rabies shot before I travel.", "Book it soon.")
    notes = MemoryService.open(session_path("notes"), embed_fn=minilm, judge="embedding")
    for i in range(6):
        notes.remember(f"Note {i} about my cat Miso: detail number {i}.", f"Got it, note {i}.")
    notes.close()
    try:
        res = search_sessions(pets.tree, pets.path, "Miso vet", k=12)
    finally:
        pets.close()
    first = res.hits[0]
    assert first.session == "pets" and "hates the vet" in first.text and first.words
    assert not [h for h in res.hits if h.session == "notes" and h.words]
    # lifted as a hit holding half the terms is (KEYWORD_LIFT × (1/2)²), not as one holding both
    from nexus.memory_service import KEYWORD_LIFT

    assert all(h.rank - h.score <= KEYWORD_LIFT / 4 + 1e-3 for h in res.hits if h.session == "notes")


def test_a_long_hit_keeps_its_word_lift_for_words_past_the_cut(data_dir, minilm):
    """The terms a hit holds were counted in its text as shown, cut at 2,000 characters:
    a long note naming Miso at its start and the vet at its end counted one term of two,
    and /search --all took three quarters of its word lift away (as /search does not)."""
    from nexus.memory_service import HIT_CHARS, search_sessions

    pets = MemoryService.open(session_path("pets"), embed_fn=minilm, judge="embedding")
    long_note = "My cat Miso had a long day. " + "We walked along the river and watched the boats. " * 60 + \
        "In the end the vet said she is fine."
    assert long_note.index("vet") > HIT_CHARS
    pets.remember("Miso saw the vet today.", "Good to hear.")
    pets.remember(long_note, "Glad she is fine.")
    pets.remember("I'm flying to Lisbon on March 14th.", "Have a good trip.")
    try:
        alone = search_sessions(pets.tree, pets.path, "Miso vet", k=10, all_sessions=False)
        everywhere = search_sessions(pets.tree, pets.path, "Miso vet", k=10, all_sessions=True)
    finally:
        pets.close()

    def lift(res):
        hit = next(h for h in res.hits if h.text.startswith("My cat Miso had a long day"))
        return round(hit.rank - hit.score, 3)

    assert lift(alone) > 0 and lift(everywhere) == lift(alone)


def test_a_japanese_word_inside_a_sentence_is_found_as_a_word(data_dir, minilm):
    """`/search ポチ` found "ポチは毎朝公園を散歩します。" by its cosine alone, not marked ≡ as
    holding the word, and a message without it came in between (a trial): the keyword index
    reads an unspaced Japanese sentence as one word."""
    from nexus.memory_service import search_sessions

    dog = MemoryService.open(session_path("dog"), embed_fn=minilm, judge="embedding")
    dog.remember("私の犬の名前はポチです。柴犬です。", "My dog named Polly.")
    dog.remember("ポチは毎朝公園を散歩します。", "I walk every day to the park.")
    dog.remember("My project deadline is Friday the 12th.", "You have a deadline for this project.")
    dog.remember("東京に住んでいます。", "Tokyo is a big city.")
    other = MemoryService.open(session_path("other"), embed_fn=minilm, judge="embedding")
    other.remember("ポチの好きなおやつはチーズです。", "Cheese, noted.")
    other.close()
    try:
        here = search_sessions(dog.tree, dog.path, "ポチ", k=10, all_sessions=False)
        everywhere = search_sessions(dog.tree, dog.path, "ポチ 散歩", k=10)
    finally:
        dog.close()
    held = [h for h in here.hits if "ポチ" in h.text]
    assert len(held) == 2 and all(h.words for h in held), here.hits
    assert here.hits[:2] == held and not [h for h in here.hits if h.words and "ポチ" not in h.text]
    # across sessions, a hit holds as many of the words as it has: both, or one of two
    first = everywhere.hits[0]
    assert first.text.startswith("ポチは毎朝") and first.words, everywhere.hits
    cheese = next(h for h in everywhere.hits if h.session == "other")
    assert cheese.rank < first.rank

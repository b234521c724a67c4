"""``/quit`` during ``/ingest`` and ``/reorganize`` (issue 10, item 5): real ``python -m
nexus`` processes in tmux against the scripted server, which is made to hang in the
call that used to hold the exit (a vision description, the text model's reload, an LLM
merge veto). The exit is timed against a ``/quit`` with nothing running in the same run
and the session file is reopened: every acknowledged exchange is there, nothing half-done."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from scripted_server import Reply, ScriptedServer
from test_sessions_app import Terminal, big_export

from trace_core import CTree, VectorDatabase
from trace_core.invariants import check_invariants

pytestmark = pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")


class ServedTerminal(Terminal):
    """``python -m nexus`` in tmux, talking to ``server`` with these settings."""

    def __init__(self, tmp: Path, name: str, session: Path, server: ScriptedServer, **env: str) -> None:
        super().__init__(tmp, name, session, OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test",
                         NEXUS_MODEL="test-model", NEXUS_IDLE_REORGANIZE="0", **env)

    def send(self, line: str) -> None:
        self.type(line)
        subprocess.run(["tmux", "send-keys", "-t", self.name, "Enter"], check=True)


def idle_quit(tmp: Path, server: ScriptedServer, **env: str) -> float:
    """Seconds a /quit with nothing running takes (the same machine, the same moment)."""
    term = ServedTerminal(tmp, "idle", tmp / "idle.db", server, **env)
    try:
        term.wait("embedder ready", 120)
        return term.quit()
    finally:
        term.close()


def wait_until(cond, secs: float, what: str) -> None:
    end = time.monotonic() + secs
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_quit_during_a_long_ingest_exits_within_2_s_and_keeps_every_described_image(tmp_path):
    """/ingest of 20 images: two are described and stored, the third description hangs
    (60 s) and the text model's reload would take 30 s. /quit gives both up."""
    from PIL import Image

    vision = []  # descriptions asked for, in order

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            vision.append(1)
            if len(vision) <= 2:
                return Reply(f"Picture number {len(vision)}.", delay=0.2)
            return Reply("A description nobody waits for.", delay=60)
        return Reply('{"action": "continue"}' if req.get("response_format") else "ok")

    folder = tmp_path / "pics"
    folder.mkdir()
    for i in range(20):
        Image.new("RGB", (64, 48), (10 * i, 20, 200)).save(folder / f"p{i:02d}.jpg")
    env = {"NEXUS_VISION_MODEL": "qwen2-vl", "NEXUS_SERVER_KIND": "lmstudio", "NEXUS_JUDGE": "embedding"}
    with ScriptedServer() as server:
        server.state.catalogue = {"test-model": {"type": "llm", "loaded": ["test-model"]},
                                  "qwen2-vl": {"type": "vlm"}}
        server.state.load_delay = {"test-model": 30.0}  # the swap back to the text model is slow
        server.respond(respond)
        baseline = idle_quit(tmp_path, server, **env)
        session = tmp_path / "s.db"
        term = ServedTerminal(tmp_path, "ingest", session, server, **env)
        try:
            term.wait("embedder ready", 120)
            term.send(f"/ingest {folder}")
            term.wait("Ingested p01.jpg (2/20)", 60)
            wait_until(lambda: len(vision) >= 3, 30, "the third description")
            time.sleep(0.5)  # well inside the hanging call
            took = term.quit()
        finally:
            term.close()
    print(f"/quit during /ingest: {took:.2f} s; with nothing running: {baseline:.2f} s")
    assert took <= baseline + 2.0, f"/quit during /ingest took {took:.2f} s, with nothing running {baseline:.2f} s"
    assert term.rc.read_text().split() == ["EXITED", "0"]
    tree = CTree.open(str(session), judge="embedding", read_only=True)
    try:
        check_invariants(tree)
        ingested = [(x.user, x.assistant) for x in tree.exchanges if x.user.startswith("/ingest")]
        assert ingested == [(f"/ingest {folder / 'p00.jpg'}", "Picture number 1."),
                            (f"/ingest {folder / 'p01.jpg'}", "Picture number 2.")]
    finally:
        tree.vdb.close()


def test_quit_while_the_text_model_loads_again_after_esc_exits_within_2_s(tmp_path):
    """/ingest, Esc after two images: the swap back to the text model hangs (30 s load).
    /quit does not wait for it; every image described before Esc is stored."""
    from PIL import Image

    vision = []

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            vision.append(1)
            return Reply(f"Picture number {len(vision)}.", delay=0.5)
        return Reply('{"action": "continue"}' if req.get("response_format") else "ok")

    def reloads(server) -> int:
        return sum(1 for r in list(server.state.requests) if r.path.rstrip("/") == "/api/v1/models/load"
                   and (r.body or {}).get("model") == "test-model")

    folder = tmp_path / "pics"
    folder.mkdir()
    for i in range(20):
        Image.new("RGB", (64, 48), (10 * i, 20, 200)).save(folder / f"p{i:02d}.jpg")
    env = {"NEXUS_VISION_MODEL": "qwen2-vl", "NEXUS_SERVER_KIND": "lmstudio", "NEXUS_JUDGE": "embedding"}
    with ScriptedServer() as server:
        server.state.catalogue = {"test-model": {"type": "llm", "loaded": ["test-model"]},
                                  "qwen2-vl": {"type": "vlm"}}
        server.state.load_delay = {"test-model": 30.0}
        server.respond(respond)
        baseline = idle_quit(tmp_path, server, **env)
        session = tmp_path / "s.db"
        term = ServedTerminal(tmp_path, "esc", session, server, **env)
        try:
            term.wait("embedder ready", 120)
            term.send(f"/ingest {folder}")
            term.wait("Ingested p01.jpg (2/20)", 60)
            subprocess.run(["tmux", "send-keys", "-t", term.name, "Escape"], check=True)
            wait_until(lambda: reloads(server) >= 1, 30, "the text model's reload")
            time.sleep(0.5)  # well inside the hanging load
            took = term.quit()
        finally:
            term.close()
    print(f"/quit while the text model loads again: {took:.2f} s; with nothing running: {baseline:.2f} s")
    assert took <= baseline + 2.0, f"/quit took {took:.2f} s, with nothing running {baseline:.2f} s"
    assert term.rc.read_text().split() == ["EXITED", "0"]
    tree = CTree.open(str(session), judge="embedding", read_only=True)
    try:
        check_invariants(tree)
        ingested = [x.assistant for x in tree.exchanges if x.user.startswith("/ingest")]
        assert 2 <= len(ingested) < 20
        assert ingested == [f"Picture number {k}." for k in range(1, len(vision) + 1)]  # every one described
    finally:
        tree.vdb.close()


def test_quit_during_a_long_reorganize_exits_within_2_s_and_the_file_is_as_before(tmp_path, minilm):
    """/reorganize with the LLM judge ("auto"): three merge vetoes answered, the fourth
    hangs (60 s). /quit gives it up; the round it was in was never applied, so the file
    reopens exactly as before, consistent and with every exchange."""
    export = tmp_path / "big.json"
    big_export(export, 100)  # 20 topics, all alike: many pairs to judge
    session = tmp_path / "s.db"
    tree = CTree.load(str(export), embed_fn=minilm, judge="embedding")
    db = VectorDatabase(str(session))
    tree.use_store(db)
    before = tree.snapshot()
    db.close()
    vetoes = []

    def respond(req):
        if "merge" in str(req.get("response_format") or ""):
            vetoes.append(1)
            return Reply('{"merge": false}', delay=0.2 if len(vetoes) <= 3 else 60)
        return Reply('{"action": "continue"}' if req.get("response_format") else "ok")

    with ScriptedServer() as server:
        server.respond(respond)
        baseline = idle_quit(tmp_path, server, NEXUS_JUDGE="auto")
        term = ServedTerminal(tmp_path, "reorganize", session, server, NEXUS_JUDGE="auto")
        try:
            term.wait("embedder ready", 120)
            term.send("/reorganize")
            wait_until(lambda: len(vetoes) >= 4, 60, "the fourth merge veto")
            time.sleep(0.5)  # well inside the hanging call
            took = term.quit()
        finally:
            term.close()
    print(f"/quit during /reorganize: {took:.2f} s; with nothing running: {baseline:.2f} s")
    assert took <= baseline + 2.0, f"/quit during /reorganize took {took:.2f} s, with nothing running {baseline:.2f} s"
    assert term.rc.read_text().split() == ["EXITED", "0"]
    reopened = CTree.open(str(session), judge="embedding", embed_fn=minilm, read_only=True)
    try:
        check_invariants(reopened)
        assert reopened.snapshot() == before
        assert len(reopened.exchanges) == 100
    finally:
        reopened.vdb.close()


def test_quit_during_a_long_cpu_bound_reorganize_leaves_the_file_before_or_after(tmp_path, minilm):
    """No LLM (the embedding judge): /reorganize of 1,000 exchanges in 200 alike topics
    takes seconds of CPU. /quit mid-way: the file reopens consistent, with every
    exchange, either as before or with whole rounds of merges applied."""
    export = tmp_path / "big.json"
    big_export(export, 1000)
    session = tmp_path / "s.db"
    tree = CTree.load(str(export), embed_fn=minilm, judge="embedding")
    db = VectorDatabase(str(session))
    tree.use_store(db)
    before = tree.snapshot()
    texts = [(x.user, x.assistant) for x in tree.exchanges]
    topics = sum(1 for _ in tree.iter_topics())
    db.close()
    with ScriptedServer() as server:
        baseline = idle_quit(tmp_path, server, NEXUS_JUDGE="embedding")
        term = ServedTerminal(tmp_path, "cpu", session, server, NEXUS_JUDGE="embedding")
        try:
            term.wait("embedder ready", 120)
            term.send("/reorganize")
            term.wait("/reorganize: ", 30)
            started = time.monotonic()
            time.sleep(0.2)  # inside the run (1.6 s in all on a quiet machine: quit early in it)
            assert "Reorganised:" not in term.screen(), "finished before /quit: make the session bigger"
            took = term.quit()
            ran = time.monotonic() - started
        finally:
            term.close()
    print(f"/quit during a CPU-bound /reorganize ({ran - took:.1f} s in): {took:.2f} s; "
          f"with nothing running: {baseline:.2f} s")
    assert took <= baseline + 2.0, f"/quit during /reorganize took {took:.2f} s, with nothing running {baseline:.2f} s"
    assert term.rc.read_text().split() == ["EXITED", "0"]
    reopened = CTree.open(str(session), judge="embedding", embed_fn=minilm, read_only=True)
    try:
        check_invariants(reopened)
        assert [(x.user, x.assistant) for x in reopened.exchanges] == texts
        after = reopened.snapshot()
        print(f"reopened {'as before' if after == before else 'after whole rounds'}: "
              f"{sum(1 for _ in reopened.iter_topics())} topics (were {topics})")
    finally:
        reopened.vdb.close()


def test_quit_during_a_scenario_waiting_for_the_llm_judge_exits_within_2_s(tmp_path):
    """/scenario with --judge llm: a step waiting for the judge held /quit (and a blank
    terminal) until the 15 s exit guard ended the process (trial). The third judge call
    hangs here for 60 s."""
    asked = []

    def respond(req):
        if req.get("response_format"):
            asked.append(1)
            return Reply('{"action": "continue", "name": "Topic"}', delay=0.0 if len(asked) <= 2 else 60)
        return Reply("ok")

    env = {"NEXUS_JUDGE": "embedding"}
    with ScriptedServer() as server:
        server.respond(respond)
        baseline = idle_quit(tmp_path, server, **env)
        term = ServedTerminal(tmp_path, "scenario", tmp_path / "s.db", server, **env)
        try:
            term.wait("embedder ready", 120)
            term.send("/scenario multihop --judge llm")
            wait_until(lambda: len(asked) >= 3, 60, "the third judge call")
            time.sleep(0.5)  # well inside the hanging call
            took = term.quit()
            screen = term.screen()
        finally:
            term.close()
    print(f"/quit during /scenario --judge llm: {took:.2f} s; with nothing running: {baseline:.2f} s")
    assert took <= baseline + 2.0, f"took {took:.2f} s, with nothing running {baseline:.2f} s:\n{screen}"
    assert term.rc.read_text().split() == ["EXITED", "0"]

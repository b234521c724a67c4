"""Workers report failures to one place (nexus/failures.py), in words, and the app's
state is assigned on the UI thread only."""

from __future__ import annotations

import inspect
import json
import threading
from pathlib import Path

import pytest
from test_nexus_app import chat_reply, log_text, make_config, notices, ready, type_and_send, wait_for

from nexus import failures
from nexus.app import NexusApp
from nexus.widgets import MemoryTree, Notice


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


class FailingEmbedder:
    """The real MiniLM, made to fail on demand (an embedder that dies mid-session)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.fail = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, text):
        return self.embed(text)

    def embed(self, text):
        return self.embed_batch([text])[0]

    def embed_batch(self, texts):
        if self.fail:
            raise RuntimeError("the embedder crashed")
        return self.inner.embed_batch(texts)


def test_no_worker_bypasses_the_failure_handler():
    """Every worker in Nexus is a ``background`` worker (exit_on_error False, reported by
    Failures); a plain ``@work`` would exit the app on an error."""
    modules = {inspect.getmodule(c) for c in NexusApp.__mro__ if c.__module__.startswith("nexus.")}
    assert failures in modules and len(modules) > 8
    package = Path(inspect.getfile(NexusApp)).parent
    plain = [p.name for p in package.glob("*.py") if "@work(" in p.read_text(encoding="utf-8")]
    assert plain == []
    assert "@background(" in (package / "treepane.py").read_text(encoding="utf-8")  # the scan reads them
    assert failures.FAILURES["search_worker"].words == "/search failed"


async def test_a_failing_worker_is_reported_in_words_and_the_app_keeps_running(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    emb = FailingEmbedder(minilm)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=emb)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        emb.fail = True
        await type_and_send(pilot, app, "/search lighthouses")
        await wait_for(pilot, lambda: "/search failed: the embedder crashed" in notices(app))
        said = [n for n in app.query(Notice) if "/search failed" in n.plain][-1]
        assert "error" in said.classes
        assert "/search failed: the embedder crashed" in log_text(app)
        assert app.is_running and app.return_code is None
        # a long task: its progress line ends with the failure, the staged file is gone
        bad = tmp_path / "not-a-tree.json"
        bad.write_text(json.dumps({"hello": "world"}))
        await type_and_send(pilot, app, f"/load {bad}")
        await wait_for(pilot, lambda: "Cannot load" in notices(app))
        said = [n.plain for n in app.query(Notice) if "Cannot load" in n.plain][-1]
        assert said.count(str(bad)) == 1, said  # the file is named once
        await pilot.pause(0.2)
        assert "reading…" not in notices(app)  # the progress line was taken away
        assert not list(data_dir.rglob("*.importing*"))
        assert app.is_running and app.return_code is None

        # a pane's own worker: its failure reaches the same place (the log pane: not the chat's business)
        def snapshot_fails():
            raise MemoryError("no room for the snapshot")

        app.query_one(MemoryTree).run_worker(snapshot_fails, name="_snapshot_worker", thread=True,
                                             exit_on_error=False)
        await wait_for(pilot, lambda: "the tree pane was not updated: no room for the snapshot" in log_text(app))
        assert "no room" not in notices(app)
        assert app.is_running and app.return_code is None


async def test_app_state_is_assigned_on_the_ui_thread_only(server, tmp_path, minilm, data_dir):
    """A session opens, a reply streams and is stored, the model list is fetched (Tab and
    /model), the session is renamed and switched (/rename, /new): no attribute of the app is set
    from another thread."""
    off_thread: list[str] = []

    class Watched(NexusApp):
        CSS_PATH = Path(inspect.getfile(NexusApp)).parent / NexusApp.CSS_PATH  # beside nexus/app.py, not here

        def __setattr__(self, name, value):
            ui = self.__dict__.get("_ui_thread")
            if ui is not None and threading.get_ident() != ui:
                off_thread.append(name)
            super().__setattr__(name, value)

    server.state.models = ["alpha-model", "beta-model"]
    server.respond(chat_reply("Porto is in Portugal."))
    app = Watched(make_config(server.base_url, tmp_path), data_dir / "sessions" / "first.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Where is Porto?")
        await wait_for(pilot, lambda: app.session.tree is not None and len(app.session.tree.exchanges) == 1
                       and app.turn is None)
        await pilot.press(*"/model be")
        await wait_for(pilot, lambda: app.models_cache == ["alpha-model", "beta-model"])
        app.query_one("#prompt").value = ""
        await type_and_send(pilot, app, "/model")
        await wait_for(pilot, lambda: "Available: alpha-model, beta-model" in notices(app))
        await type_and_send(pilot, app, "/model beta-model")
        await wait_for(pilot, lambda: "Chat model is now beta-model." in notices(app))
        await type_and_send(pilot, app, "/model no-such-model")
        await wait_for(pilot, lambda: "Chat model no-such-model: the server" in notices(app))
        assert "Chat model is now no-such-model." in notices(app)  # said at once, then checked
        assert "chat model: no-such-model (/model)" in log_text(app)
        assert "does not list it (it lists alpha-model, beta-model)" in notices(app)
        await type_and_send(pilot, app, "/model alpha-model")
        await wait_for(pilot, lambda: "Chat model is now alpha-model." in notices(app))
        await type_and_send(pilot, app, "/rename harbour")
        await wait_for(pilot, lambda: "Renamed first to harbour" in notices(app) and app.session is not None
                       and app.session_path.stem == "harbour" and app.embedder_state == "ready")
        first = app.session
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session is not first
                       and app.embedder_state == "ready")
        on_purpose = threading.Thread(target=setattr, args=(app, "model_found", "x"))
        on_purpose.start()
        on_purpose.join()
    assert off_thread == ["model_found"]  # only the assignment made from a thread on purpose, to show the check sees one


async def test_a_quit_does_not_wait_for_a_stalled_model_list(server, tmp_path, minilm, data_dir):
    """/model NAME then Ctrl+Q against a server that stalls on its list: 15 s of a blank
    terminal (a trial)."""
    app = NexusApp(make_config(server.base_url, tmp_path), data_dir / "sessions" / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        server.state.models_delay = 30.0
        await type_and_send(pilot, app, "/model other-model")
        await wait_for(pilot, lambda: "Chat model is now other-model." in notices(app))
        await wait_for(pilot, lambda: any(r.path.rstrip("/") == "/v1/models" for r in server.state.requests[-2:]))
        # the process waits for its worker threads at exit, not for daemon ones: the stalled
        # call runs in one the worker gives up on when Nexus quits
        assert any(t.name == "list models" and t.daemon for t in threading.enumerate())
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not [w for w in app.workers if w.group == "models" and w.is_running],
                       timeout=5)


async def test_a_quit_does_not_wait_for_the_model_list_tab_asked_for(server, tmp_path, minilm, data_dir):
    """Tab after "/model " fetches the server's list: against a stalled server a later
    Ctrl+Q took 15 s (a re-trial)."""
    server.state.models_delay = 30.0  # from the start: the list was never fetched
    app = NexusApp(make_config(server.base_url, tmp_path), data_dir / "sessions" / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        asked = len([r for r in server.state.requests if r.path.rstrip("/") == "/v1/models"])
        await pilot.press(*"/model q")
        await pilot.press("tab")
        await wait_for(pilot, lambda: len([r for r in server.state.requests if r.path.rstrip("/") == "/v1/models"])
                       > asked)
        # the process waits for its worker threads at exit, not for daemon ones: the stalled
        # call runs in one the worker gives up on when Nexus quits
        assert any(t.name == "list models" and t.daemon for t in threading.enumerate())
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not [w for w in app.workers if w.group == "models" and w.is_running],
                       timeout=5)


async def test_escape_stops_waiting_for_a_model_list_that_never_comes(server, tmp_path, minilm, data_dir):
    """/model against a server that takes the connection and never answers: nothing was
    said for 120 s and Esc did nothing (a trial). It says it is asking; Esc stops it."""
    app = NexusApp(make_config(server.base_url, tmp_path), data_dir / "sessions" / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        server.state.models_delay = 30.0
        await type_and_send(pilot, app, "/model")
        await wait_for(pilot, lambda: f"Asking the server at {server.base_url} for its models… (Esc stops waiting)"
                       in notices(app))
        await wait_for(pilot, lambda: any(t.name == "list models" for t in threading.enumerate()))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not [w for w in app.workers if w.name == "model_worker" and w.is_running],
                       timeout=2)
        said = notices(app)
        assert "Stopped waiting for the model list (Esc)." in said and "Asking the server" not in said
        server.state.models_delay = 0.0
        await type_and_send(pilot, app, "/model")
        await wait_for(pilot, lambda: "Available: test-model" in notices(app))
        assert "Asking the server" not in notices(app)


async def test_escape_as_the_model_list_arrives_says_one_thing(server, tmp_path, minilm, data_dir, monkeypatch):
    """Esc landing just as /model's list came (the server had answered, the list was not
    shown yet): "Stopped waiting for the model list (Esc)." and the list under it, both.
    Esc then comes too late to stop anything: the list alone is shown."""
    app = NexusApp(make_config(server.base_url, tmp_path), data_dir / "sessions" / "s.db", embed_fn=minilm)
    listed = app.models_listed

    def esc_as_it_comes(models):  # the list's first step on the UI thread: Esc is handled there
        app.action_cancel()
        listed(models)

    monkeypatch.setattr(app, "models_listed", esc_as_it_comes)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "/model")
        await wait_for(pilot, lambda: "Available: test-model" in notices(app) or "Stopped waiting" in notices(app))
        await wait_for(pilot, lambda: not [w for w in app.workers if w.name == "model_worker" and not w.is_finished])
        await pilot.pause(0.3)
        said = notices(app)
        assert "Available: test-model" in said and "Stopped waiting" not in said and "Asking the server" not in said


async def test_a_model_list_that_never_comes_is_given_up_in_words(server, tmp_path, minilm, data_dir):
    """The model list is waited for a bounded time (not the 120 s reply timeout), then
    said in words."""
    cfg = make_config(server.base_url, tmp_path, {("server", "timeout"): 1.5})
    app = NexusApp(cfg, data_dir / "sessions" / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        server.state.models_delay = 30.0
        await type_and_send(pilot, app, "/model")
        await wait_for(pilot, lambda: f"Cannot list models: the server at {server.base_url} did not answer the "
                       "model list in 1.5 s" in notices(app), timeout=6)
        assert "Asking the server" not in notices(app)


async def test_a_refusal_is_logged_as_what_it_says_not_as_a_failed_worker(server, tmp_path, minilm, data_dir, caplog):
    """'/undo-reorganize' with nothing to undo wrote "worker undo_worker failed: Nothing
    undone…" to the log: an ordinary answer called a failure (a trial)."""
    import logging

    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        with caplog.at_level(logging.DEBUG, logger="nexus"):
            await type_and_send(pilot, app, "/undo-reorganize")
            await wait_for(pilot, lambda: "Nothing undone" in notices(app))
    said = [r for r in caplog.records if "Nothing undone" in r.getMessage()]
    assert said and all(r.levelno == logging.WARNING for r in said), said
    assert not [r for r in caplog.records if "failed" in r.getMessage() and r.levelno >= logging.WARNING]

"""The start-up probe of the model server (``GET /models``): what it says in words, and
that it never imports httpx in a worker (openai 3 reads ``sys.modules["httpx"]`` without
the import lock: a half-done import there made the session fail to open)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from scripted_server import ScriptedServer

from nexus.lifecycle import server_models


def serve(status: int, body: bytes, seen: list | None = None):
    """A server answering every GET so (``seen``: the Authorization headers it was sent)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if seen is not None:
                seen.append(self.headers.get("Authorization"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_port}/v1"


def test_the_probe_lists_the_models_or_says_why_not():
    with ScriptedServer() as srv:
        assert server_models(srv.base_url, "k") == (None, ["test-model"])
    dead = ScriptedServer()
    dead.httpd.server_close()
    problem, ids = server_models(f"http://127.0.0.1:{dead.port}/v1", "k")
    assert problem == "nothing is listening there (connection refused)" and ids == []
    for status, body, words in [(500, b"oops", "HTTP 500"), (200, b"<html>hi</html>", "did not answer GET /models with JSON"),
                                (200, json.dumps({"data": []}).encode(), "lists no models")]:
        httpd, url = serve(status, body)
        try:
            problem, ids = server_models(url, "k")
        finally:
            httpd.shutdown()
        assert words in problem and ids == [], problem


def test_the_probe_does_not_import_httpx():
    with ScriptedServer() as srv:
        code = ("import sys; from nexus.lifecycle import server_models; "
                f"print(server_models({srv.base_url!r}, 'k')[1], 'httpx' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["['test-model']", "False"], out.stdout + out.stderr


def test_a_base_url_without_its_v1_is_said_so_at_start_and_at_send():
    """``--base-url http://127.0.0.1:PORT`` for a server whose API is at /v1: the probe's
    404 and a send's 404 both name the URL to use (it was "HTTP 404 to GET /models" and
    "does not know that model or path")."""
    import openai

    from trace_core.llm import describe_error

    with ScriptedServer() as srv:
        problem, ids = server_models(srv.root_url, "k")
        assert problem == (f"it answered HTTP 404 to GET /models — the API is at {srv.base_url}: "
                           f"start with --base-url {srv.base_url}") and ids == []
        client = openai.OpenAI(base_url=srv.root_url, api_key="k", max_retries=0, timeout=5)
        try:
            client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])
        except openai.NotFoundError as exc:
            said = describe_error(exc, srv.root_url)
        assert said == (f"the model server at {srv.root_url} answered HTTP 404 — the API is at {srv.base_url}: "
                        f"use the base URL {srv.base_url}"), said
    # a server that answers 404 at /v1/models too gets the plain words (one extra request, no hint)
    httpd, url = serve(404, b"no")
    try:
        problem, _ = server_models(url.removesuffix("/v1"), "k")
    finally:
        httpd.shutdown()
    assert problem == "it answered HTTP 404 to GET /models", problem


async def test_a_password_in_the_base_url_is_used_and_never_shown(tmp_path, monkeypatch, minilm):
    """``--base-url http://user:pw@host/v1``: the title bar showed the password, and the
    probe failed with "Name or service not known" (urllib read "user" as the host)."""
    seen = []
    httpd, _ = serve(200, json.dumps({"data": [{"id": "m"}]}).encode(), seen)
    url = f"http://me:pw-SECRET9@127.0.0.1:{httpd.server_port}/v1"
    try:
        assert server_models(url, "k") == (None, ["m"])
        import base64

        assert seen == ["Basic " + base64.b64encode(b"me:pw-SECRET9").decode()]
        from test_nexus_app import log_text, make_config, notices, ready, wait_for

        from nexus.app import NexusApp

        monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
        app = NexusApp(make_config(url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
        async with app.run_test(size=(160, 40)) as pilot:
            await ready(app, pilot)
            await wait_for(pilot, lambda: app.server_answered and len(seen) >= 2)
            assert f"127.0.0.1:{httpd.server_port}/v1" in app.sub_title
            for said in (app.sub_title, notices(app), log_text(app)):
                assert "SECRET9" not in said and "gaierror" not in said
    finally:
        httpd.shutdown()
    import openai

    from trace_core.llm import describe_error

    exc = openai.APIConnectionError(request=__import__("httpx").Request("GET", url))
    assert "SECRET9" not in describe_error(exc, url)


async def test_the_probes_warning_at_start_is_in_the_log_file(tmp_path, monkeypatch, minilm):
    """Nothing listening: said in the log pane at once, but not in nexus.log, which was
    opened with the session, after the probe had answered (a trial)."""
    import socket

    from test_nexus_app import log_text, make_config, ready, wait_for

    from nexus.app import NexusApp
    from nexus.logs import log_path

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    app = NexusApp(make_config(f"http://127.0.0.1:{port}/v1", tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(160, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: "nothing is listening there" in log_text(app))
    assert "nothing is listening there" in log_path().read_text()


async def test_a_server_still_loading_its_model_is_said_not_ready_with_its_words(tmp_path, monkeypatch, minilm):
    """llama.cpp answers HTTP 503 {"error": {"message": "Loading model"}} while it loads: the
    start said "No model server answers at …: it answered HTTP 503" (both at once, and not
    its words), and a message failed as "answered HTTP 503." with no word of why (a trial)."""
    loading = json.dumps({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}).encode()

    class Handler(BaseHTTPRequestHandler):
        def answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(loading)))
            self.end_headers()
            self.wfile.write(loading)

        do_GET = do_POST = answer

        def log_message(self, *a):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_port}/v1"
    try:
        assert server_models(url, "k") == ("it answered HTTP 503 to GET /models (Loading model)", [])
        from test_nexus_app import make_config, notices, ready, type_and_send, wait_for

        from nexus.app import NexusApp

        monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
        cfg = make_config(url, tmp_path, {("models", "chat"): ""})
        cfg.set("keys", "resend", "f8")  # said as bound: "Ctrl+R sends it" did nothing (a review)
        app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
        async with app.run_test(size=(160, 40)) as pilot:
            await ready(app, pilot)
            await wait_for(pilot, lambda: "is not ready" in notices(app))
            said = notices(app)
            assert f"The model server at {url} answers but is not ready: it answered HTTP 503 to GET /models " \
                   "(Loading model)" in said and "No model server answers" not in said, said
            assert "F8 sends it once the server is ready" in said and "Ctrl+R" not in said, said
            assert "model server not ready" in app.sub_title
            await type_and_send(pilot, app, "Hello?")
            await wait_for(pilot, lambda: "No reply" in notices(app) and app.turn is None)
            assert f"the model server at {url} answered HTTP 503: Loading model" in notices(app), notices(app)
    finally:
        httpd.shutdown()

"""nexus mcp end to end: the official SDK's client starts `python -m nexus mcp` as a
subprocess (stdio), with the data dir in tmp; the real MiniLM and a real session file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import anyio
import pytest

from nexus.memory_service import session_path
from trace_core import CTree

mcp = pytest.importorskip("mcp", reason="nexus mcp needs the 'mcp' package (a dependency)")

EXCHANGES = [
    ("My sister Ana lives in Lisbon and teaches piano.", "Lisbon and piano, noted."),
    ("I'm allergic to peanuts.", "No peanuts in any recipe then."),
    ("Our team ships the Orion release on March 3rd.", "Orion ships March 3rd."),
    ("My bike is a green Brompton bought in 2019.", "A green Brompton, 2019."),
    ("The cabin's wifi password is on the fridge.", "On the fridge."),
]


def server_env(data_dir) -> dict[str, str]:
    return {"NEXUS_DATA_DIR": str(data_dir), "NEXUS_JUDGE": "embedding", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.pathsep.join(sys.path)}


def test_stdio_server_end_to_end(tmp_path, minilm):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    data = tmp_path / "data"
    params = StdioServerParameters(command=sys.executable, args=["-m", "nexus", "mcp", "--session", "e2e"],
                                   env=server_env(data), cwd=str(tmp_path))

    async def session() -> dict:
        out: dict = {}
        async with Client(params, read_timeout_seconds=120) as c:
            tools = await c.list_tools()
            out["tools"] = {t.name: t for t in tools.tools}
            out["remembered"] = []
            for u, a in EXCHANGES:
                r = await c.call_tool("remember", {"user": u, "assistant": a})
                assert not r.is_error, r.content
                out["remembered"].append(r.structured_content)
            out["recall"] = await c.call_tool("recall", {"query": "What does Ana teach?", "budget_tokens": 300})
            out["bad"] = await c.call_tool("recall", {"query": "x", "budget_tokens": -5})
            out["empty"] = await c.call_tool("remember", {"user": "hi", "assistant": " "})
            out["label"] = await c.call_tool("remember", {"user": "what is up", "assistant": "User:"})
            out["search"] = await c.call_tool("search", {"query": "Brompton bike", "k": 3})
            # bad input a trial found taken silently or slowly: said in words, nothing stored
            out["blank"] = await c.call_tool("recall", {"query": "   "})
            out["blank_search"] = await c.call_tool("search", {"query": ""})
            out["huge_query"] = await c.call_tool("recall", {"query": "piano " * 5000})
            out["huge"] = await c.call_tool("remember", {"user": "x" * 4_000_001, "assistant": "ok"})
            out["tree"] = await c.call_tool("tree", {})
            out["stats"] = await c.call_tool("stats", {})
            resources = await c.list_resources()
            out["resources"] = [str(r.uri) for r in resources.resources]
            templates = await c.list_resource_templates()
            out["templates"] = [t.uri_template for t in templates.resource_templates]
            out["exchange"] = await c.read_resource("trace://exchange/3")
            out["tree_res"] = await c.read_resource("trace://tree")
            try:
                await c.read_resource("trace://exchange/99")
                out["missing"] = None
            except Exception as exc:  # MCPError: resource not found, in words
                out["missing"] = str(exc)
        return out

    out = anyio.run(session)
    assert set(out["tools"]) == {"recall", "remember", "search", "tree", "stats"}
    assert set(out["tools"]["recall"].input_schema["properties"]) == {"query", "budget_tokens"}
    assert [r["exchange"] for r in out["remembered"]] == [0, 1, 2, 3, 4]
    rec = out["recall"].structured_content
    assert not out["recall"].is_error
    assert "piano" in rec["block"] and rec["tokens"] <= 300
    assert rec["exchanges"][0]["index"] == 0 and rec["exchanges"][0]["branch"]
    assert rec["branches"] and rec["branches"][0]["path"]
    assert out["bad"].is_error and "budget_tokens" in out["bad"].content[0].text
    assert out["empty"].is_error and "empty content" in out["empty"].content[0].text
    assert out["label"].is_error and "says nothing" in out["label"].content[0].text  # as Nexus: not stored
    assert out["blank"].is_error and "the query is empty: say what to recall" in out["blank"].content[0].text
    assert out["blank_search"].is_error and "say what to search for" in out["blank_search"].content[0].text
    assert out["huge_query"].is_error and "at most 20,000" in out["huge_query"].content[0].text
    assert out["huge"].is_error and "nothing was stored" in out["huge"].content[0].text
    hits = out["search"].structured_content["hits"]
    assert hits[0]["exchange"] == 3 and hits[0]["session"] == "e2e"
    assert "ROOT" in out["tree"].content[0].text and "(5 exchanges)" in out["tree"].content[0].text  # as Nexus counts (it said "10 msgs")
    assert out["stats"].structured_content["exchanges"] == 5
    assert "trace://tree" in out["resources"] and "trace://exchange/{index}" in out["templates"]
    ex = json.loads(out["exchange"].contents[0].text)
    assert ex["exchange"] == 3 and ex["messages"][0]["content"] == EXCHANGES[3][0]
    assert "#4" in out["tree_res"].contents[0].text
    assert out["missing"] and "no exchange #99" in out["missing"]

    # the server has exited: the session file holds the five exchanges
    os.environ["NEXUS_DATA_DIR"] = str(data)
    try:
        path = session_path("e2e")
    finally:
        del os.environ["NEXUS_DATA_DIR"]
    tree = CTree.open(str(path), embed_fn=minilm, judge="embedding")
    assert [(x.user, x.assistant) for x in tree.exchanges] == EXCHANGES
    tree.vdb.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_server_requires_the_token(tmp_path):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    token = "mcp-test-token-123"
    env = dict(os.environ, **server_env(tmp_path / "data"), NEXUS_TOKEN=token)
    proc = subprocess.Popen([sys.executable, "-m", "nexus", "mcp", "--session", "web", "--http", str(port)],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                r = httpx2.post(url, json={})
                break
            except httpx2.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.3)
        assert r.status_code == 401
        assert httpx2.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        big = httpx2.post(url, content=b"x" * (5 * 1024 * 1024), headers={"Authorization": f"Bearer {token}"})
        assert big.status_code == 413
        assert big.json()["error"]["message"] == "the request body is over 4 MB, this server's limit"

        async def listed() -> set[str]:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
            async with http, Client(streamable_http_client(url, http_client=http)) as c:
                r = await c.call_tool("remember", {"user": "over http", "assistant": "stored"})
                assert not r.is_error
                return {t.name for t in (await c.list_tools()).tools}

        assert "remember" in anyio.run(listed)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert token not in err


def test_a_session_open_for_writing_elsewhere_is_refused(tmp_path, minilm, monkeypatch):
    from nexus.memory_service import MemoryService

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    held = MemoryService.open(session_path("busy"), embed_fn=minilm, judge="embedding")
    try:
        r = subprocess.run([sys.executable, "-m", "nexus", "mcp", "--session", "busy"], input="",
                           env=dict(os.environ, **server_env(tmp_path / "data")), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2
        assert "session 'busy' is open for writing in another process" in r.stderr
        assert "read-only" not in r.stderr  # nexus mcp has no read-only mode to offer (trial)
        assert r.stdout == ""  # stdout is the protocol: nothing else is written there
    finally:
        held.close()


def test_an_unknown_flag_is_said_with_the_subcommands_usage(capsys):
    """``nexus mcp --bogus`` printed the top level's ``usage: nexus {mcp,proxy}``."""
    from nexus.serve_cli import parse

    for mode in ("mcp", "proxy"):
        with pytest.raises(SystemExit) as exc:
            parse([*f"{mode} --upstream http://127.0.0.1:1/v1".split()[: 1 if mode == "mcp" else 3], "--bogus"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"usage: nexus {mode} [-h]" in err and "unrecognized arguments: --bogus" in err


def test_http_on_a_port_in_use_is_refused_before_any_session_file(tmp_path):
    """It announced the address, then uvicorn's "address already in use", and left an
    empty session file behind (trial)."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        r = subprocess.run([sys.executable, "-m", "nexus", "mcp", "--session", "portless", "--http", str(port)],
                           env=dict(os.environ, **server_env(tmp_path / "data")), capture_output=True, text=True,
                           timeout=120)
    finally:
        taken.close()
    assert r.returncode == 2, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "streamable HTTP on" not in r.stderr
    assert not list((tmp_path / "data").rglob("portless*"))

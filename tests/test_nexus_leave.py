"""Leaving while a reply streams, in a real terminal (tmux): /quit, Ctrl+Q, the terminal
closed (SIGHUP) and SIGTERM. Each time the session file, reopened, holds the user's
message and the partial reply marked cancelled. The model is the scripted server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_server import Reply

ROOT = Path(__file__).parent.parent
SOCKET = f"nexus-leave-{os.getpid()}"  # a tmux server of its own: no one else's sessions


def tmux(*args: str) -> str:
    done = subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=False)
    assert args[0] != "new-session" or done.returncode == 0, f"tmux could not open a terminal: {done.stderr}"
    return done.stdout


def wait_screen(name: str, text: str, seconds: float) -> str:
    end = time.time() + seconds
    shown = ""
    while time.time() < end:
        shown = tmux("capture-pane", "-p", "-t", name)
        if text in shown:
            return shown
        time.sleep(0.3)
    raise AssertionError(f"{text!r} did not appear; the screen:\n{shown}")


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.fixture(scope="module")
def tmux_server():
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    yield
    tmux("kill-server")


@pytest.mark.parametrize("how", ["/quit", "ctrl+q", "sighup", "sigterm"])
def test_leaving_mid_reply_stores_the_message_and_the_partial_reply(how, tmux_server, server, tmp_path, minilm):
    from trace_core import CTree

    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("", chunks=[f"piece{i} " for i in range(600)], chunk_delay=0.05)

    server.respond(respond)
    name = "leave-" + how.strip("/").replace("+", "-")
    home = tmp_path / "home"
    home.mkdir()
    session = tmp_path / "s.db"
    exit_file = tmp_path / "exit.txt"
    from platformdirs import user_cache_dir

    # a throwaway HOME, but the machine's model cache (MiniLM's ONNX export), or each start re-exports it
    cache = Path(user_cache_dir("trace-core")).parent
    env = (f"HOME={home} XDG_CACHE_HOME={cache} NEXUS_DATA_DIR={tmp_path / 'data'} TERM=xterm-256color "
           "HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false")
    cmd = (f"cd {ROOT} && {env} {sys.executable} -m nexus --base-url {server.base_url} --model test-model "
           f"--no-web --session {session}; echo EXIT=$? > {exit_file}")
    tmux("new-session", "-d", "-s", name, "-x", "140", "-y", "45", cmd)
    shell = int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())
    try:
        wait_screen(name, "embedder ready", 240)
        pid = int(subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()[0])
        tmux("send-keys", "-t", name, "-l", "Please count for me slowly.")
        tmux("send-keys", "-t", name, "Enter")
        wait_screen(name, "piece5", 30)
        if how != "/quit":  # typed, not sent, as the reply streams: it must be in the input next time
            tmux("send-keys", "-t", name, "-l", "an unfinished thought")
            wait_screen(name, "an unfinished thought", 10)
        if how == "/quit":
            tmux("send-keys", "-t", name, "-l", "/quit")
            tmux("send-keys", "-t", name, "Enter")
        elif how == "ctrl+q":
            tmux("send-keys", "-t", name, "C-q")
        elif how == "sighup":
            tmux("kill-session", "-t", name)  # the terminal closes: SIGHUP
        else:
            os.kill(pid, signal.SIGTERM)
        end = time.time() + 30
        while time.time() < end and alive(pid):
            time.sleep(0.2)
        assert not alive(pid), "nexus did not exit"
        if how != "sighup":
            end = time.time() + 10
            while time.time() < end and not exit_file.exists():
                time.sleep(0.2)
            expected = 128 + signal.SIGTERM if how == "sigterm" else 0
            assert exit_file.read_text().strip() == f"EXIT={expected}"
        draft = tmp_path / "data" / "draft.txt"
        if how == "/quit":
            assert not draft.exists()
        else:
            assert draft.read_text(encoding="utf-8") == "an unfinished thought"
        if how == "sighup":  # reopened: the text is in the input at the first screen
            tmux("new-session", "-d", "-s", name, "-x", "140", "-y", "45", cmd)
            wait_screen(name, "an unfinished thought", 60)
            shell = int(tmux("display-message", "-p", "-t", name, "#{pane_pid}").strip())
            pid = int(subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()[0])
            tmux("kill-session", "-t", name)
            end = time.time() + 30
            while time.time() < end and alive(pid):  # it closes the session file before the test reads it
                time.sleep(0.2)
            assert not alive(pid), "nexus, closed at its first screen, did not exit"
    finally:
        tmux("kill-session", "-t", name)
    tree = CTree.open(str(session), embed_fn=minilm, judge="embedding")
    try:
        assert [x.user for x in tree.exchanges] == ["Please count for me slowly."]
        reply = tree.exchanges[0].assistant
        assert "piece0" in reply and "piece5" in reply and "[reply cancelled]" in reply
        assert "piece599" not in reply
    finally:
        tree.vdb.close()


def test_a_crash_exits_with_a_non_zero_status(server, tmp_path):
    """An unhandled exception (here: the start-up probe cannot write its file) ends the
    process with status 1, never 0."""
    from platformdirs import user_cache_dir

    env = {**os.environ, "HOME": str(tmp_path / "home"), "NEXUS_DATA_DIR": str(tmp_path / "data"),
           "XDG_CACHE_HOME": str(Path(user_cache_dir("trace-core")).parent),
           "NEXUS_STARTUP_PROBE": str(tmp_path / "no-such-dir" / "probe.jsonl"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "nexus", "--base-url", server.base_url, "--model", "test-model",
                          "--no-web", "--session", str(tmp_path / "s.db")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert "FileNotFoundError" in out.stdout + out.stderr


async def test_events_arriving_while_leaving_are_logged_by_name_not_as_objects(server, tmp_path, minilm, monkeypatch,
                                                                             caplog):
    """The log read "INFO nexus ExchangeAdded(... seconds=0.0489…)": Python objects, whose
    fields can hold what was said."""
    import logging

    from test_nexus_app import make_config, ready

    from nexus import events as ev
    from nexus.app import NexusApp
    from trace_core import events as tev

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        caplog.set_level(logging.DEBUG, logger="nexus")
        app._leaving = True
        app.post_event(tev.ExchangeAdded(0, "x0", "ROOT → my secret words", 0.0489))
        app.post_event(ev.Notice("session error: the disk is full", "error"))
        await pilot.pause()
        app._leaving = False
    logged = caplog.text
    assert "my secret words" not in logged and "ExchangeAdded(" not in logged
    assert "while leaving: ExchangeAdded" in logged and "session error: the disk is full" in logged

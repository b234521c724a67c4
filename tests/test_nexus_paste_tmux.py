"""A real terminal (tmux): a bracketed paste of three lines reaches memory with its
newlines; ↑ recalls it. Nexus runs as a user starts it, against the scripted server."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_server import Reply, ScriptedServer
from test_nexus_tmux import screen, tmux, wait_screen

ROOT = Path(__file__).parent.parent


def nexus_command(tmp_path: Path, base_url: str, session: Path) -> str:
    """The shell command that starts Nexus as a user does, against a scripted server, with
    its data, config and session under ``tmp_path``."""
    return (f"NEXUS_DATA_DIR={tmp_path / 'data'} NEXUS_JUDGE=embedding HF_HUB_OFFLINE=1 "
            f"XDG_CONFIG_HOME={tmp_path / 'cfg'} TERM=xterm-256color "
            f"{sys.executable} -m nexus --base-url {base_url} --model test-model --no-web --session {session}")


@contextlib.contextmanager
def nexus_in_tmux(tmp_path: Path, srv: ScriptedServer, name: str, session: Path):
    """Nexus started as a user does, in a tmux session ``name`` (120 × 40), until the
    embedder is ready; yields the file its exit status is written to; kills the session."""
    exit_file = tmp_path / "exit.txt"
    cmd = f"cd {ROOT} && {nexus_command(tmp_path, srv.base_url, session)}; echo EXIT=$? > {exit_file}"
    tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", cmd)
    try:
        wait_screen(name, "embedder ready", 120)
        yield exit_file
    finally:
        tmux("kill-session", "-t", name)


def quit_and_wait(name: str, exit_file: Path) -> None:
    """/quit typed, and Nexus gone within 30 s with status 0."""
    tmux("send-keys", "-t", name, "-l", "/quit")
    tmux("send-keys", "-t", name, "Enter")
    end = time.time() + 30
    while time.time() < end and not exit_file.exists():
        time.sleep(0.3)
    assert exit_file.exists(), "/quit did not quit; the screen:\n" + screen(name)
    assert exit_file.read_text().strip() == "EXIT=0"


def input_box(name: str) -> str:
    """The input editor's part of the screen: from its top border down."""
    shown = screen(name)
    return shown[shown.rfind("▔"):]


def test_a_pasted_stack_trace_keeps_its_lines(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    pasted = "Traceback (most recent call last):\n  File \"x.py\", line 1\nZeroDivisionError: division by zero"
    with ScriptedServer() as srv:
        srv.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                    else Reply("Divide by something else."))
        name = f"nexus-paste-{os.getpid()}"
        session = tmp_path / "s.db"
        with nexus_in_tmux(tmp_path, srv, name, session) as exit_file:
            subprocess.run(["tmux", "set-buffer", "-b", name, pasted], check=True)
            subprocess.run(["tmux", "paste-buffer", "-p", "-b", name, "-t", name], check=True)
            shown = wait_screen(name, "ZeroDivisionError: division by zero", 20)
            assert "remembered exchange" not in shown  # pasted, not sent
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "remembered exchange #0", 60)
            tmux("send-keys", "-t", name, "Up")
            end = time.time() + 20
            while "ZeroDivisionError" not in input_box(name):
                assert time.time() < end, "↑ did not recall the pasted prompt:\n" + screen(name)
                time.sleep(0.3)
            tmux("send-keys", "-t", name, "Down")  # back to the (empty) draft
            while "Message, or /help" not in input_box(name):  # the placeholder: empty again
                assert time.time() < end, "↓ did not return to the draft:\n" + screen(name)
                time.sleep(0.3)
            # Ctrl+J adds a line in a real terminal too (Shift+Enter arrives as Enter in most)
            tmux("send-keys", "-t", name, "-l", "first line")
            tmux("send-keys", "-t", name, "C-j")
            tmux("send-keys", "-t", name, "-l", "second line")
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "remembered exchange #1", 60)
            quit_and_wait(name, exit_file)
        sent = [r for r in srv.chat_requests() if not r.get("response_format")]
        assert sent[0]["messages"][-1]["content"] == pasted
    con = sqlite3.connect(session)
    stored = [r[0] for r in con.execute("SELECT content FROM messages WHERE role='user'")]
    con.close()
    assert stored == [pasted, "first line\nsecond line"]


def test_keys_typed_as_nexus_starts_are_sent_and_not_left_on_the_shell_screen(tmp_path):
    """Typed at once after the command, before the first screen: the message is sent, and
    after the quit the shell's screen does not show it with the prompt glued on
    ("early bird message^Mbash-5.2#", in a new-user trial)."""
    if shutil.which("tmux") is None or shutil.which("bash") is None:
        pytest.skip("tmux and bash are needed")
    with ScriptedServer() as srv:
        srv.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format") else Reply("Tweet."))
        name = f"nexus-early-{os.getpid()}"
        session = tmp_path / "s.db"
        tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "bash --norc --noprofile")
        try:
            # quoted apart: the line typed here never shows "READY$", only the prompt does (the
            # echo of this line once matched, and the test typed on before the shell was ready)
            tmux("send-keys", "-t", name, "-l", f"PS1='READ''Y$ '; clear; cd {ROOT}")
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "READY$", 20)
            tmux("send-keys", "-t", name, "-l", nexus_command(tmp_path, srv.base_url, session))
            tmux("send-keys", "-t", name, "Enter")
            tmux("send-keys", "-t", name, "-l", "early bird message")
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "remembered exchange #0", 120)
            tmux("send-keys", "-t", name, "-l", "/quit")
            tmux("send-keys", "-t", name, "Enter")
            shown, end = "", time.time() + 30
            while time.time() < end:
                shown = screen(name)
                if shown.rstrip().endswith("READY$") and "-m nexus" in shown:
                    break
                time.sleep(0.3)
            assert shown.rstrip().endswith("READY$"), shown
            assert "early bird" not in shown, shown
            # the terminal is as it was: echo and Enter's newline back for the shell's programs
            tmux("send-keys", "-t", name, "-l", "stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(echo|icrnl)' | tr '\\n' ' '")
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "echo ", 10)
            assert "-echo" not in screen(name) and "-icrnl" not in screen(name) and "icrnl echo" in screen(name)
        finally:
            tmux("kill-session", "-t", name)
        sent = [r for r in srv.chat_requests() if not r.get("response_format")]
        assert sent[0]["messages"][-1]["content"] == "early bird message"

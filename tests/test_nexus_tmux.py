"""A real terminal: ``nexus --local`` under tmux, typed into like a person would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.llama
ROOT = Path(__file__).parent.parent


def tmux(*args: str) -> str:
    done = subprocess.run(["tmux", *args], capture_output=True, text=True, check=False)
    # a terminal that could not open is the one failure to name in tmux's own words
    assert args[0] != "new-session" or done.returncode == 0, f"tmux could not open a terminal: {done.stderr}"
    return done.stdout


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_screen(name: str, text: str, seconds: float) -> str:
    end = time.time() + seconds
    shown = ""
    while time.time() < end:
        shown = screen(name)
        if text in shown:
            return shown
        time.sleep(0.5)
    raise AssertionError(f"{text!r} did not appear; the screen:\n{shown}")


def test_nexus_local_in_a_real_terminal(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    pytest.importorskip("llama_cpp")
    name = f"nexus-test-{os.getpid()}"
    exit_file = tmp_path / "exit.txt"
    started = tmp_path / "started"
    cmd = (f"cd {ROOT} && touch {started} && NEXUS_DATA_DIR={tmp_path / 'data'} TERM=xterm-256color "
           f"{sys.executable} -m nexus --local --no-web --session {tmp_path / 's.db'}; "
           f"echo EXIT=$? > {exit_file}")
    tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", cmd)
    try:
        end = time.time() + 10
        while not started.exists():
            assert time.time() < end, "the shell did not start"
            time.sleep(0.02)
        # typed and sent before Nexus has read the terminal: Enter must stay Enter (not the
        # terminal's newline), and the message waits for the bundled model
        tmux("send-keys", "-t", name, "Hello! My name is Ada and I like sailing.", "Enter")
        wait_screen(name, "starting the bundled llama.cpp server", 60)  # on screen before the model is up
        wait_screen(name, "remembered exchange #0", 240)  # the streamed reply finished and was stored
        tmux("send-keys", "-t", name, "/tree", "Enter")
        wait_screen(name, "ROOT [0:0] (1 exchange)", 30)  # counted as the tree pane counts
        tmux("send-keys", "-t", name, "/quit", "Enter")
        end = time.time() + 60
        while time.time() < end and not exit_file.exists():
            time.sleep(0.5)
        assert exit_file.read_text().strip() == "EXIT=0"
    finally:
        tmux("kill-session", "-t", name)

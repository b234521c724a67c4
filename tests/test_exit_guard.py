"""SIGTERM/SIGHUP end the process even when the main thread (the app's event loop) is
stuck, as Textual's shutdown was on a terminal closed at the first screen: a real
process, real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

SCRIPT = r"""
import sys, threading, time
from nexus.exit_guard import SignalExit

out, hang = sys.argv[1], sys.argv[2]

def note(text):
    with open(out, "a") as fh:
        fh.write(text + "\n")

def store(signum):
    note(f"stored {signum}")
    if hang == "store":
        time.sleep(3600)

def close():
    note("closed")
    if hang == "close":
        time.sleep(3600)

SignalExit(store, lambda code: note(f"asked {code}"), close, grace=0.5, store_wait=1.0,
           close_wait=1.0).install()
print("ready", flush=True)
threading.Event().wait()  # the main thread blocked in a lock wait: nothing here ever asks to exit
"""


def run_and_signal(tmp_path: Path, sig: int, hang: str = "") -> tuple[int, list[str]]:
    out = tmp_path / "out.txt"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), hang], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        code = proc.wait(30)
    finally:
        proc.kill()
    return code, out.read_text().splitlines()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stores_asks_the_app_to_leave_then_ends_a_process_that_did_not(tmp_path, sig):
    code, lines = run_and_signal(tmp_path, sig)
    assert lines == [f"stored {sig}", f"asked {128 + sig}", "closed"]
    assert code == 128 + sig


@pytest.mark.parametrize("hang", ["store", "close"])
def test_a_step_that_never_returns_does_not_keep_the_process(tmp_path, hang):
    """Each step is bounded (1 s here): the process ends within the test's 30 s wait, not
    after the step's hour."""
    code, lines = run_and_signal(tmp_path, signal.SIGTERM, hang)
    assert code == 128 + signal.SIGTERM
    assert lines == [f"stored {signal.SIGTERM}", f"asked {128 + signal.SIGTERM}", "closed"]

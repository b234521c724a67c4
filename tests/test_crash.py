"""Crash safety: a child adding exchanges is killed with SIGKILL at random moments;
reopening never fails and never loses an exchange whose add() had returned."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import HashEmbedder

from trace_core import CTree
from trace_core.invariants import check_invariants

CHILD = Path(__file__).parent / "helpers" / "crash_child.py"
ROOT = Path(__file__).parent.parent


def run_and_kill(path: str, seconds: float) -> list[int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(CHILD), path], stdout=subprocess.PIPE, text=True, env=env)
    acks: list[int] = []
    started = threading.Event()

    def reader():
        for line in proc.stdout:
            if line.startswith("START"):
                started.set()
            elif line.startswith("ACK"):
                acks.append(int(line.split()[1]))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    assert started.wait(60), "child did not start"
    time.sleep(seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    t.join(5)
    return acks


def test_sigkill_never_loses_an_acknowledged_exchange(tmp_path):
    rng = random.Random(1234)
    path = str(tmp_path / "crash.db")
    acknowledged: list[int] = []
    for _round in range(12):
        acks = run_and_kill(path, rng.uniform(0.05, 0.6))
        acknowledged += acks
        tree = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), max_children=3)
        check_invariants(tree)
        stored = [x.index for x in tree.exchanges]
        assert set(acknowledged) <= set(stored)
        # nothing half-written: every stored exchange is complete and in order
        assert stored == list(range(len(stored)))
        for x in tree.exchanges:
            assert x.user.startswith(f"exchange {x.index} ") and x.assistant == f"answer {x.index}"
        tree.vdb.close()
    assert len(acknowledged) >= 12

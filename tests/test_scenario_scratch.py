"""A scenario's scratch folder left by a Nexus that ended mid-run (the terminal closed)
is removed by the next scenario; a running one's is not."""

from __future__ import annotations

import os
import time

from nexus.scenario_runner import SCRATCH_PREFIX, sweep_scratch
from trace_core.locking import WriterLock


def scratch(root, name: str, age: float = 0.0):
    folder = root / (SCRATCH_PREFIX + name)
    folder.mkdir()
    (folder / "theseus.db").write_bytes(b"x" * 100)
    (folder / "theseus.db-wal").write_bytes(b"x" * 100)
    if age:
        then = time.time() - age
        os.utime(folder, (then, then))
    return folder


def test_only_the_scratch_folders_of_ended_runs_are_removed(tmp_path):
    left = scratch(tmp_path, "left")
    (left / "theseus.db.lock").write_text("12345\n")  # its process is gone: nobody holds it
    running = scratch(tmp_path, "running")
    lock = WriterLock(str(running / "theseus.db.lock"))
    lock.acquire()  # a scenario running now (flock: held against this process too)
    being_made = scratch(tmp_path, "new")  # no lock yet: its session is being opened
    abandoned = scratch(tmp_path, "old", age=3600)  # no lock, an hour old
    other = tmp_path / "something-else"
    other.mkdir()
    try:
        gone = sweep_scratch(str(tmp_path))
    finally:
        lock.release()
    assert sorted(gone) == sorted([left, abandoned])
    assert not left.exists() and not abandoned.exists()
    assert running.exists() and being_made.exists() and other.exists()

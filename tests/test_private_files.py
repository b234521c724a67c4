"""Private files (issue 10.6) and where they live (issue 17.5), on the real file system:
session files, their WAL/SHM and lock, exports and logs are 0600 in 0700 folders; the log
is text (escape sequences visible), in the log folder, and size-bounded."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trace_core import CTree, VectorDatabase

ROOT = Path(__file__).parent.parent


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)  # the usual umask: files would be 0644 without our care
    yield
    os.umask(old)


def test_session_file_wal_shm_lock_and_export_are_0600(tmp_path, loose_umask, minilm):
    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "my bank PIN hint is the cat's birthday"},
              {"role": "assistant", "content": "noted"}])
    for p in (path, path + "-wal", path + "-shm", path + ".lock"):
        assert os.path.exists(p), p
        assert mode(p) == 0o600, (p, oct(mode(p)))
    export = tmp_path / "export.json"
    tree.save(str(export), save_conversation=True)
    assert mode(export) == 0o600
    tree.vdb.close()
    ro = VectorDatabase(path, read_only=True)  # a reader's companions copy the file's mode
    for p in (path + "-wal", path + "-shm"):
        if os.path.exists(p):
            assert mode(p) == 0o600, p
    ro.close()


def test_data_folders_are_0700(tmp_path, monkeypatch, loose_umask):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "deep" / "data"))
    from nexus import sessions
    from nexus.paths import log_dir

    d = sessions.sessions_dir()
    assert mode(d) == 0o700 and mode(d.parent) == 0o700 and mode(tmp_path / "deep") == 0o700
    sessions.remember(d / "x.db")
    assert mode(d.parent / "last-session") == 0o600
    assert log_dir() == tmp_path / "deep" / "data" / "logs"


def test_a_folder_nexus_did_not_make_keeps_its_mode(tmp_path, monkeypatch, loose_umask):
    """``nexus --session /tmp/new.db`` made /tmp 0700 (every other user locked out of it),
    and a session in the home folder the home folder: the check of a session's folder
    changed it. Only the folders Nexus makes, and its own, are made private."""
    from nexus import sessions
    from nexus.paths import folder_problem

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o1777)
    assert folder_problem(shared) is None and mode(shared) == 0o1777
    assert folder_problem(shared / "new" / "deeper") is None  # made by Nexus: private
    assert mode(shared / "new") == 0o700 and mode(shared / "new" / "deeper") == 0o700
    # a data folder of the user's, named by NEXUS_DATA_DIR: its sessions folder is private, it is not
    mine = tmp_path / "mine"
    mine.mkdir()
    os.chmod(mine, 0o755)
    monkeypatch.setenv("NEXUS_DATA_DIR", str(mine))
    assert mode(sessions.sessions_dir()) == 0o700 and mode(mine) == 0o755
    sessions.remember(mine / "sessions" / "x.db")
    assert mode(mine) == 0o755 and mode(mine / "last-session") == 0o600


@pytest.fixture
def file_log(tmp_path, monkeypatch):
    """Nexus's log file in ``tmp_path``; the root logger and the loggers it quiets are
    put back after."""
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    from nexus.logs import QUIET, setup_file_log

    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", *QUIET)}
    try:
        yield setup_file_log()
    finally:
        for h in list(root.handlers):
            if getattr(h, "_nexus", False):
                root.removeHandler(h)
                h.close()
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_log_is_text_private_in_the_log_folder_and_rotates(tmp_path, loose_umask, file_log):
    from nexus.logs import BACKUPS

    root = logging.getLogger()
    path = file_log
    assert path == tmp_path / "data" / "logs" / "nexus.log"
    assert mode(path.parent) == 0o700
    topic = "Cats\x1b]0;pwned\x07 \x1b[2J\x1b[31mred\rover\n2026-01-01 ERROR forged record \ud800"
    logging.getLogger("nexus").info("judge embedding: new → %s", topic)
    handler = next(h for h in root.handlers if getattr(h, "_nexus", False))
    handler.flush()
    raw = path.read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw and b"\r" not in raw
    text = raw.decode("utf-8")
    assert "␛]0;pwned␇" in text and "␛[31mred\\rover" in text
    assert "\n    2026-01-01 ERROR forged record" in text  # a continuation, not a record
    assert mode(path) == 0o600
    handler.maxBytes = 2000  # size-bounded: rotate quickly for the test
    for k in range(200):
        logging.getLogger("nexus").info("line %d %s", k, "x" * 80)
    handler.flush()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["nexus.log"] + [f"nexus.log.{k}" for k in range(1, BACKUPS + 1)]
    assert all(mode(path.parent / f) == 0o600 for f in files)
    assert all((path.parent / f).stat().st_size <= 2000 + 200 for f in files)


def test_nexus_paths_and_help_say_where_things_live(tmp_path):
    env = {**os.environ, "NEXUS_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "nexus", "--paths"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(None, 1) for line in out.stdout.strip().splitlines())
    assert lines["sessions:"] == str(tmp_path / "data" / "sessions")
    assert lines["logs:"] == str(tmp_path / "data" / "logs")
    assert lines["config:"].endswith("nexus.toml")
    helptext = subprocess.run([sys.executable, "-m", "nexus", "--help"], capture_output=True, text=True, env=env,
                              timeout=60).stdout
    assert str(tmp_path / "data" / "logs") in helptext and "--paths" in helptext


def test_the_log_file_has_each_engine_event_once_in_words(file_log):
    """nexus.log held 617 lines like "INFO trace_core JudgeDecided(level='info', …)", each
    beside Nexus's own sentence for it."""
    from trace_core import events as ev

    root = logging.getLogger()
    path = file_log
    bus = ev.EventBus()
    bus.emit(ev.JudgeDecided("embedding", "new", "Cat Miso", "the first exchange opens a topic", 0))
    logging.getLogger("nexus").info("%s", ev.TopicsFrozen(("Cat Miso",)))  # as Nexus logs it
    handler = next(h for h in root.handlers if getattr(h, "_nexus", False))
    handler.flush()
    text = path.read_text(encoding="utf-8")
    assert "JudgeDecided(" not in text and "judge embedding: new → Cat Miso" not in text  # Nexus says it
    assert "summarised 1 topic that left the active path: Cat Miso" in text
    assert str(ev.GroupRenamed("A", "B", "g1")) == "group renamed: A → B"

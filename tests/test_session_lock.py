"""One writer per session file (issue 10.1), with real processes on a real file.

A second writer is refused by name (and pid) and writes nothing; a read-only opener
reads a consistent snapshot and cannot add; after the holder closes or dies, the other
process writes; every acknowledged exchange is in the file and the tree is intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from conftest import HashEmbedder

from trace_core import CTree, ReadOnlySessionError, SessionFileError, SessionLockedError, VectorDatabase
from trace_core.invariants import check_invariants

CHILD = Path(__file__).parent / "helpers" / "writer_child.py"
ROOT = Path(__file__).parent.parent


class Child:
    """A writer_child process: ``ask(command)`` returns its answer line."""

    def __init__(self, path: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, str(CHILD), path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.acks: list[tuple[int, str]] = []
        threading.Thread(target=self._read, daemon=True).start()
        assert self.next() == "READY"

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("ACK "):
                _, idx, text = line.split(" ", 2)
                self.acks.append((int(idx), text))
            self.lines.put(line)

    def next(self, timeout: float = 60) -> str:
        return self.lines.get(timeout=timeout)

    def ask(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.next()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


def digest(path: str) -> dict[str, str]:
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest()
            for p in (path, path + "-wal") if os.path.exists(p) and os.path.getsize(p)}


def stored(path: str) -> list[tuple[int, str]]:
    tree = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), read_only=True)
    try:
        check_invariants(tree)
        return [(x.index, x.user) for x in tree.exchanges]
    finally:
        tree.vdb.close()


def test_two_processes_alternate_one_writer_at_a_time(tmp_path):
    path = str(tmp_path / "shared.db")
    a, b = Child(path), Child(path)
    try:
        assert a.ask("open") == "OPEN 0"
        assert a.ask("add alpha one").startswith("ACK 0")
        before = digest(path)
        answer = b.ask("open")
        assert answer.startswith(f"LOCKED {a.proc.pid} ")
        assert path in answer and f"pid {a.proc.pid}" in answer
        assert digest(path) == before  # the refused writer wrote nothing
        # read-only: the other process reads and cannot add
        assert b.ask("open-ro") == "OPEN 1"
        assert b.ask("add beta refused").startswith(f"READONLY {path}: is open read-only")
        assert a.ask("add alpha two").startswith("ACK 1")  # the writer goes on meanwhile
        assert b.ask("close") == "CLOSED"
        assert a.ask("close") == "CLOSED"
        # roles swap after release
        assert b.ask("open") == "OPEN 2"
        assert b.ask("add beta one").startswith("ACK 2")
        assert a.ask("open").startswith(f"LOCKED {b.proc.pid} ")
        assert b.ask("close") == "CLOSED"
        assert a.ask("open") == "OPEN 3"
        assert a.ask("add alpha three").startswith("ACK 3")
        assert a.ask("close") == "CLOSED"
    finally:
        a.stop()
        b.stop()
    acknowledged = sorted(a.acks + b.acks)
    assert [i for i, _ in acknowledged] == [0, 1, 2, 3]
    assert stored(path) == acknowledged
    assert not os.path.exists(path + ".lock")  # released locks leave no file behind


def test_contending_writers_lose_nothing(tmp_path):
    """Both processes add 15 exchanges as fast as they can, each retrying while the other
    holds the lock: 30 acknowledged exchanges, numbered 0..29, none overwritten."""
    path = str(tmp_path / "contended.db")
    a, b = Child(path), Child(path)
    try:
        for c, name in ((a, "alpha"), (b, "beta")):
            c.proc.stdin.write(f"contend 15 {name}\n")
            c.proc.stdin.flush()
        for c in (a, b):
            while (line := c.next(120)) != "DONE":
                assert line.startswith(("ACK", "REFUSED")), line
    finally:
        a.stop()
        b.stop()
    acknowledged = sorted(a.acks + b.acks)
    assert len(acknowledged) == 30
    assert stored(path) == acknowledged
    assert {t for _, t in acknowledged} == {f"{n} {k}" for n in ("alpha", "beta") for k in range(15)}


def test_a_killed_writer_leaves_no_stale_lock(tmp_path):
    path = str(tmp_path / "killed.db")
    a = Child(path)
    assert a.ask("open") == "OPEN 0"
    assert a.ask("add before the crash").startswith("ACK 0")
    with pytest.raises(SessionLockedError, match=f"pid {a.proc.pid}"):
        CTree.open(path, judge="embedding", embed_fn=HashEmbedder())
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(10)
    tree = CTree.open(path, judge="embedding", embed_fn=HashEmbedder())  # the OS released the lock
    try:
        tree.add([{"role": "user", "content": "after the crash"}, {"role": "assistant", "content": "ok"}])
        check_invariants(tree)
    finally:
        tree.vdb.close()
    assert stored(path) == [(0, "before the crash"), (1, "after the crash")]


def test_a_symlink_to_a_session_is_the_same_session_to_the_lock(tmp_path):
    """The lock was "<path as given>.lock": a writer through a symlink got a lock of its
    own, two processes wrote one file, and it no longer opened, nor could be repaired (a
    trial). The lock is the real file's."""
    from nexus import sessions

    real = tmp_path / "real.db"
    link = tmp_path / "link.db"
    a = Child(str(real))
    try:
        assert a.ask("open") == "OPEN 0"
        assert a.ask("add through the real name").startswith("ACK 0")
        link.symlink_to(real)
        with pytest.raises(SessionLockedError, match=f"pid {a.proc.pid}"):
            CTree.open(str(link), judge="embedding", embed_fn=HashEmbedder())
        assert sessions.in_use_by(link) is not None  # /delete and /rename see the writer too
    finally:
        a.stop()
    tree = CTree.open(str(link), judge="embedding", embed_fn=HashEmbedder())
    tree.vdb.close()
    assert stored(str(real)) == [(0, "through the real name")]


def test_same_process_second_writer_refused_until_closed(tmp_path, hash_embed):
    path = str(tmp_path / "one.db")
    first = VectorDatabase(path)
    with pytest.raises(SessionLockedError) as err:
        VectorDatabase(path)
    assert isinstance(err.value, SessionFileError) and "this process" in str(err.value)
    first.close()
    first.close()  # twice is harmless
    VectorDatabase(path).close()
    # an unclosed database nobody can reach any more does not keep the session locked
    CTree.open(path, judge="embedding", embed_fn=hash_embed)
    CTree.open(path, judge="embedding", embed_fn=hash_embed).vdb.close()


def test_read_only_never_writes_and_refuses_changes(tmp_path, hash_embed):
    path = str(tmp_path / "ro.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    for k in range(4):
        tree.add([{"role": "user", "content": f"question {k} about lamps"}, {"role": "assistant", "content": "yes"}])
    tree.vdb.close()
    os.chmod(path, 0o400)  # even a file we may not write opens read-only
    before = digest(path)
    ro = CTree.open(path, judge="embedding", embed_fn=hash_embed, read_only=True)
    assert ro.read_only and len(ro.exchanges) == 4
    assert ro.vdb.search_conversation(hash_embed("question lamps"), top_k=2, min_similarity=0.0)
    for attempt in (lambda: ro.add([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]),
                    lambda: ro.reorganize(), lambda: ro.generate_summaries(), lambda: ro.vdb.set_meta("k", "v")):
        with pytest.raises(ReadOnlySessionError, match="read-only"):
            attempt()
    assert ro.index_pending() == 0
    assert len(ro.exchanges) == 4
    ro.vdb.close()
    assert digest(path) == before
    assert not os.path.exists(path + ".lock")


def test_read_only_sees_one_snapshot_while_the_writer_goes_on(tmp_path, hash_embed):
    path = str(tmp_path / "snap.db")
    w = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    w.add([{"role": "user", "content": "first"}, {"role": "assistant", "content": "one"}])
    ro = CTree.open(path, judge="embedding", embed_fn=hash_embed, read_only=True)
    w.add([{"role": "user", "content": "second"}, {"role": "assistant", "content": "two"}])
    # the reader's store agrees with the tree it loaded: one exchange, not two
    assert len(ro.exchanges) == 1 and len(ro.vdb.load_messages()) == 2
    ro.vdb.close()
    w.vdb.close()


def test_read_only_of_a_missing_file_is_refused_by_name(tmp_path):
    path = str(tmp_path / "nothing.db")
    with pytest.raises(SessionFileError, match="does not exist"):
        VectorDatabase(path, read_only=True)
    assert not os.path.exists(path)


def test_a_forked_child_neither_holds_nor_removes_the_parents_lock(tmp_path):
    path = str(tmp_path / "forked.db")
    db = VectorDatabase(path)
    pid = os.fork()
    if pid == 0:  # the child: cleaning up its copy must not unlock or remove the parent's lock
        try:
            db._release_writer_lock()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.exists(path + ".lock")
    other = Child(path)
    try:
        assert other.ask("open").startswith(f"LOCKED {os.getpid()} ")
        db.close()
        assert other.ask("open") == "OPEN 0"  # no copy in a child kept it locked
        assert other.ask("close") == "CLOSED"
    finally:
        other.stop()


NOT_WRITABLE_CHILD = """
import json, sys
from trace_core import CTree, SessionNotWritableError
sys.path.insert(0, sys.argv[2])
from writer_child import HashEmbedder
out = {}
try:
    CTree.open(sys.argv[1], judge="embedding", embed_fn=HashEmbedder())
except SessionNotWritableError as exc:
    out["writer"] = str(exc)
tree = CTree.open(sys.argv[1], judge="embedding", embed_fn=HashEmbedder(), read_only=True)
out["exchanges"] = [x.user for x in tree.exchanges]
tree.vdb.close()
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run a child as nobody")
def test_a_file_we_may_not_write_is_refused_by_name_and_opens_read_only(hash_embed):
    """A real permission problem (root writes anything, so the child runs as nobody): the
    writer is refused in words, before anything is written; read-only opening works, even
    in a folder where SQLite cannot create its -shm file."""
    folder = Path(tempfile.mkdtemp(prefix="engine-ro-"))
    try:
        folder.chmod(0o755)
        path = str(folder / "theirs.db")
        tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
        tree.add([{"role": "user", "content": "a private note"}, {"role": "assistant", "content": "kept"}])
        tree.vdb.close()
        os.chmod(path, 0o644)
        before = digest(path)
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                              NOT_WRITABLE_CHILD, path, str(CHILD.parent)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["writer"] == f"{path}: cannot be written (the file is read-only); open it read-only to read it"
        assert result["exchanges"] == ["a private note"]
        assert digest(path) == before and sorted(os.listdir(folder)) == ["theirs.db"]
    finally:
        shutil.rmtree(folder)


def test_a_json_export_never_replaces_a_session_file_or_a_folder(tmp_path, hash_embed):
    """tree.save("s.db"), a slip for "s.json", replaced the tree's own open session: the
    exchange added after it returned normally and was gone at the next open (a trial).
    Saved over a folder, the error named a temporary file."""
    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "My sister lives in Lisbon."}, {"role": "assistant", "content": "Noted."}])
    other = CTree.open(str(tmp_path / "other.db"), judge="embedding", embed_fn=hash_embed)
    for target in (path, str(tmp_path / "other.db")):
        with pytest.raises(SessionFileError, match="is a SQLite database"):
            tree.save(target)
    with pytest.raises(SessionFileError, match="is a folder"):
        tree.save(str(tmp_path))
    tree.add([{"role": "user", "content": "I like trains."}, {"role": "assistant", "content": "Noted."}])
    tree.save(str(tmp_path / "s.json"))  # a JSON file is fine, and may be written again
    tree.save(str(tmp_path / "s.json"))
    tree.vdb.close()
    other.vdb.close()
    assert [text for _, text in stored(path)] == ["My sister lives in Lisbon.", "I like trains."]
    assert len(CTree.load(str(tmp_path / "s.json"), embed_fn=hash_embed).exchanges) == 2


def test_a_lock_whose_pid_cannot_be_written_is_still_held_and_released(tmp_path, monkeypatch):
    """A full disk: writing the holder's pid raised after the lock was taken, and the lock
    stayed held by nothing the process could release — every reopen then said "open in
    another process", its own (a trial)."""
    import errno

    from trace_core import locking

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    path = str(tmp_path / "s.db.lock")
    lock = locking.WriterLock(path)
    with monkeypatch.context() as m:
        m.setattr(locking.os, "write", full)
        lock.acquire()
    with pytest.raises(locking.LockBusy):
        locking.WriterLock(path).acquire()
    lock.release()
    again = locking.WriterLock(path)
    again.acquire()
    again.release()


def ex(user: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": "ok"}]


def test_a_lock_file_removed_while_held_lets_no_second_writer_write_beside_the_first(tmp_path):
    """The lock file deleted while a writer held it (a clean-up of *.lock): a second
    process opened the session to write too, both stored an exchange #1, the file kept
    one of them, and the session no longer opened ("the exchanges are not numbered
    0..n-1"; a trial with two Nexus windows). The first writer now sees its lock gone
    before its next write: taken again when nobody has it, else it writes no more."""
    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), max_children=3)
    tree.add(ex("a first"))
    os.unlink(path + ".lock")
    tree.add(ex("a second"))  # nobody took it: taken again, and written
    assert os.path.exists(path + ".lock")
    os.unlink(path + ".lock")
    b = Child(path)
    try:
        assert b.ask("open") == "OPEN 2"  # the lock file was gone: it could take the lock
        assert b.ask("add b third").startswith("ACK 2")
        with pytest.raises(SessionLockedError, match=f"pid {b.proc.pid}"):
            tree.add(ex("a third"))
        assert [x.user for x in tree.exchanges] == ["a first", "a second", "b third"]  # as the file holds
        assert b.ask("close") == "CLOSED"
        with pytest.raises(SessionLockedError):  # and no later write either: its tree may lack the other's
            tree.add(ex("a fourth"))
    finally:
        b.stop()
    tree.close()
    again = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), max_children=3)
    assert [x.user for x in again.exchanges] == ["a first", "a second", "b third"]
    check_invariants(again)
    again.close()


async def test_nexus_says_its_lock_file_was_deleted_and_another_writes_the_session_now(server, tmp_path, monkeypatch):
    from test_nexus_app import chat_reply, make_config, notices, ready, type_and_send, wait_for

    from nexus.app import NexusApp

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    server.respond(chat_reply("Noted."))
    path = tmp_path / "s.db"
    CTree.open(str(path), judge="embedding", embed_fn=HashEmbedder()).close()  # the child's embedder
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=HashEmbedder())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        os.unlink(f"{path}.lock")
        b = Child(str(path))
        try:
            assert b.ask("open") == "OPEN 0"
            await type_and_send(pilot, app, "My boat is called Wave.")
            await wait_for(pilot, lambda: "This exchange could not be stored: the session's lock file (s.db.lock) was "
                           f"deleted while this window held it, and another process (pid {b.proc.pid}) opened the "
                           "session to write since" in notices(app))
            await wait_for(pilot, lambda: app.session is not None and app.session.read_only)
            await type_and_send(pilot, app, "And my car is a Fiat.")
            await wait_for(pilot, lambda: f"Not sent: This session is open in another process (pid {b.proc.pid})"
                           in notices(app) or "Not sent: This session is open in another Nexus" in notices(app))
        finally:
            b.stop()

"""/export's file write: private, and a write that fails leaves the earlier export whole."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from nexus.export import write_private


def test_an_export_replaces_the_file_privately_and_follows_a_link(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("old")
    os.chmod(path, 0o644)
    old = os.umask(0o022)  # the usual umask: a new file would be 0644 without our care
    try:
        write_private(path, "new text")
    finally:
        os.umask(old)
    assert path.read_text() == "new text"
    assert os.stat(path).st_mode & 0o777 == 0o600
    link = tmp_path / "link.md"
    link.symlink_to(path)
    write_private(link, "through the link")
    assert link.is_symlink() and path.read_text() == "through the link"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "notes.md"]  # no temp file left


def test_a_full_disk_leaves_the_earlier_export_whole(tmp_path):
    """A trial: an /export that ran out of room cut the earlier export to what fitted of
    the new one. Here the file size limit (EFBIG) stands for the full disk."""
    path = tmp_path / "notes.md"
    path.write_text("buy milk and call the plumber\n")
    script = textwrap.dedent(f"""
        import resource, signal, sys
        from pathlib import Path
        from nexus.export import write_private
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_private(Path({str(path)!r}), "x" * 100_000)
        except OSError as exc:
            print("failed", exc.errno)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.startswith("failed"), out.stderr
    assert path.read_text() == "buy milk and call the plumber\n"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]


def test_a_tree_export_never_replaces_the_sessions_own_log_index_or_lock(tmp_path):
    """save("s.db-wal") replaced the session's write-ahead log: the exchanges not yet
    copied into the file were lost when the process then ended without closing it (a
    developer's trial: three exchanges, reopened, none)."""
    db = tmp_path / "s.db"
    script = textwrap.dedent(f"""
        import os
        from trace_core import CTree, SessionFileError
        def embed(text):
            return [1.0, float(len(text) % 5), 0.5]
        tree = CTree.open({str(db)!r}, judge="embedding", embed_fn=embed)
        for i in range(3):
            tree.add([{{"role": "user", "content": f"important {{i}}"}}, {{"role": "assistant", "content": "ok"}}])
        for name in ("-wal", "-shm", "-journal", ".lock", ""):
            try:
                tree.save({str(db)!r} + name)
            except SessionFileError as exc:
                print("refused", name, "belongs to the session" in str(exc) or "is a SQLite database" in str(exc))
        os._exit(0)  # ended without closing: the log holds the exchanges
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.split("\n")[:5] == [f"refused {n} True" for n in ("-wal", "-shm", "-journal", ".lock", "")], \
        out.stdout + out.stderr
    from trace_core import CTree

    def embed(text: str) -> list[float]:
        return [1.0, float(len(text) % 5), 0.5]

    tree = CTree.open(str(db), judge="embedding", embed_fn=embed, read_only=True)
    assert [x.user for x in tree.exchanges] == ["important 0", "important 1", "important 2"]
    tree.close()

"""Start-up: the first frame is drawn before torch or sentence-transformers are imported;
the ``nexus`` entry point and ``python -m nexus`` both run."""

from __future__ import annotations

import subprocess
import sys

from bench.startup import one_run


def test_first_paint_comes_before_heavy_imports(tmp_path):
    r = one_run(str(tmp_path), 0)
    assert r["torch_at_first_paint"] is False
    assert r["sentence_transformers_at_first_paint"] is False
    assert 0 < r["first_paint"] <= r["ready"]


def test_help_of_both_entry_points():
    out = subprocess.run([sys.executable, "-m", "nexus", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--base-url", "--model", "--memory-model", "--embed", "--session", "--no-web", "--local"):
        assert flag in out
    import shutil

    exe = shutil.which("nexus")
    if exe:
        assert "--local" in subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout

"""The code passes ruff (style and likely bugs), as configured in pyproject.toml."""

import shutil
import subprocess
from pathlib import Path

import pytest


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (extra 'dev')")
    root = Path(__file__).parent.parent
    out = subprocess.run([ruff, "check", "trace_core", "nexus", "bench", "tests"], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr

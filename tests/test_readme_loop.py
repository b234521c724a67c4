"""The README's integration loop, run as written against the scripted server."""

from __future__ import annotations

import builtins
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trace_core import CTree

README = Path(__file__).parent.parent / "README.md"


def readme_loop() -> str:
    text = README.read_text()
    block = re.search(r"## TRACE in your own chat loop\s+```python\n(.*?)```", text, re.S)
    assert block, "the README lost its integration loop"
    return block.group(1)


def test_readme_loop_runs(tmp_path, monkeypatch, server, minilm):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    Reply = __import__("scripted_server").Reply

    def respond(req):  # an empty answer once: the loop said so and stored nothing (add() raised, in a trial)
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("" if "weather" in req["messages"][-1]["content"] else "Noted!")

    server.respond(respond)
    lines = iter(["My cat is called Miso.", "Nice weather?", "She is three years old.", "What is my cat's name?"])

    def typed(prompt=""):  # then Ctrl+D: it ended the loop with a traceback (trial)
        line = next(lines, None)
        if line is None:
            raise EOFError
        return line

    monkeypatch.setattr(builtins, "input", typed)
    printed: list[str] = []
    monkeypatch.setattr(builtins, "print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    exec(compile(readme_loop(), "README.md", "exec"), {"__name__": "readme"})
    tree = CTree.open(str(tmp_path / "session.db"), judge="embedding")
    assert len(tree.exchanges) == 3
    # the third reply's system prompt carried the memory of the cat's name
    chats = [r for r in server.chat_requests() if not r.get("response_format") and r["messages"][0]["role"] == "system"
             and "Miso" not in r["messages"][-1]["content"]]
    assert any("Miso" in r["messages"][0]["content"] for r in chats)
    assert any("memory tokens instead of" in p for p in printed)
    assert "(no answer; ask again)" in printed


@pytest.mark.slow
def test_readme_loop_type_checks_strictly_and_a_wrong_call_is_caught(tmp_path):
    # py.typed promises types: `from trace_core import PromptSynthesizer` was typed as a
    # bare `type` (every call unchecked), synthesize_prompt's vector and node took anything,
    # and the README's loop failed `mypy --strict` (list[dict], an Optional reply)
    pytest.importorskip("mypy", reason="mypy is in the 'dev' extra")
    (tmp_path / "loop.py").write_text(readme_loop())
    (tmp_path / "wrong.py").write_text(
        "from trace_core import CTree, PromptSynthesizer\n\n"
        "tree = CTree.open('s.db')\n"
        "synth = PromptSynthesizer(ctree=tree)\n"
        "synth.synthesize_prompt('q', 'not a vector', 'not a node', [])\n")
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                            env={**os.environ, "MYPYPATH": str(README.parent)})
    mypy = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "c")]
    out = run([*mypy, "loop.py"])
    assert out.returncode == 0, out.stdout + out.stderr
    out = run([*mypy, "wrong.py"])
    assert 'Argument 2 to "synthesize_prompt"' in out.stdout and 'Argument 3 to "synthesize_prompt"' in out.stdout, out.stdout

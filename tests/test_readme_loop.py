"""The README's integration loop, run as written against the scripted server."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

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

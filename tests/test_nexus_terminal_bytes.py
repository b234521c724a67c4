"""A real terminal (tmux), typed into fast and pasted into with dirty text.

- A message typed straight after a slash command, in one burst, is its own message (it
  used to join the command's text, or vanish when the command cleared the box).
- A bracketed paste of coloured terminal output arrives as its plain text, in order; the
  control bytes in it (BEL = Ctrl+G, 0x11 = Ctrl+Q) are not key presses (such a paste
  quit Nexus).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time

import pytest
from scripted_server import Reply, ScriptedServer
from test_nexus_paste_tmux import input_box, nexus_in_tmux, quit_and_wait
from test_nexus_tmux import screen, tmux, wait_screen

from nexus.paste_guard import PASTE_END, PASTE_START, PasteCleaner


def test_the_cleaner_holds_an_escape_code_split_between_reads():
    whole = ("ab" + PASTE_START + "AAA \x1b[31mBBB\x1b[0m CCC \x1b]0;title\x07 t\x11 x\ty\n" + PASTE_END
             + "\x1b[A\x11")  # after the paste: an arrow key and Ctrl+Q, untouched
    want = "ab" + PASTE_START + "AAA BBB CCC  t x\ty\n" + PASTE_END + "\x1b[A\x11"
    for i in range(len(whole)):
        for j in range(i, len(whole)):
            cleaner = PasteCleaner()
            assert "".join(cleaner(part) for part in (whole[:i], whole[i:j], whole[j:])) == want, (i, j)


def test_fast_typing_after_a_command_and_a_dirty_paste(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    with ScriptedServer() as srv:
        srv.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                    else Reply("Noted."))
        name = f"nexus-bytes-{os.getpid()}"
        session = tmp_path / "s.db"
        with nexus_in_tmux(tmp_path, srv, name, session) as exit_file:
            # one burst: the command, Enter, the message, Enter
            tmux("send-keys", "-t", name, "/set max_tokens 50", "Enter", "What is propolis?", "Enter")
            wait_screen(name, "remembered exchange #0", 60)
            pasted = "log \x1b[31mred\x1b[0m line \x1b]0;PWNED\x07 done\x11 more"
            subprocess.run(["tmux", "set-buffer", "-b", name, pasted], check=True)
            subprocess.run(["tmux", "paste-buffer", "-p", "-b", name, "-t", name], check=True)
            end = time.time() + 20
            while "log red line  done more" not in input_box(name):
                assert not exit_file.exists(), "the paste quit Nexus"
                assert time.time() < end, "the paste did not arrive as its text:\n" + screen(name)
                time.sleep(0.3)
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "remembered exchange #1", 60)
            quit_and_wait(name, exit_file)
        sent = [r for r in srv.chat_requests() if not r.get("response_format")]
        assert sent[0]["messages"][-1]["content"] == "What is propolis?"
        assert sent[0]["max_tokens"] == 50  # the command ran too
    con = sqlite3.connect(session)
    stored = [r[0] for r in con.execute("SELECT content FROM messages WHERE role='user'")]
    con.close()
    assert stored == ["What is propolis?", "log red line  done more"]


def _keys(parser, *reads: str) -> list[str]:
    from textual import events

    out: list[str] = []
    for data in reads:
        out += [e.key if e.key == "escape" or not e.character else e.character
                for e in parser.feed(data) if isinstance(e, events.Key)]
    return out


def test_escape_then_a_burst_of_text_is_the_escape_key_then_the_text():
    """Esc out of the tree and a fast burst of text: the message began "^What's the
    weather…" — the terminal parser took Esc for the start of an escape code and, 32
    characters on, typed it as "^"; with fewer, Esc became Alt+ the first letter and did
    nothing (a new-user trial)."""
    from textual.drivers import linux_driver

    from nexus import paste_guard

    assert paste_guard.install()
    text = "What's the weather in Porto today, and tomorrow?"
    # one read; two reads (Esc, then the text before Esc's delay ran out)
    for reads in (("\x1b" + text,), ("\x1b", text), ("\x1b", "Wh")):
        keys = _keys(linux_driver.XTermParser(), *reads)
        assert keys[0] == "escape" and "".join(keys[1:]) == "".join(reads)[1:], (reads, keys)
    # what the terminal sends for keys stays as it was: an arrow, Alt+W alone, Esc at the end of a read
    assert _keys(linux_driver.XTermParser(), "ab\x1b[Acd") == ["a", "b", "up", "c", "d"]
    parser = linux_driver.XTermParser()
    assert _keys(parser, "\x1bw") == [] and [e.key for e in parser.tick()] == []  # an Alt key: its own read
    assert paste_guard.escape_splits("\x1bw", False) == [] and paste_guard.escape_splits("\x1bw\x1bw", False) == []
    assert paste_guard.escape_splits("x\x1bWhat", False) == [2]
    assert paste_guard.escape_splits("What", True) == [0] and paste_guard.escape_splits("[A", True) == []

"""Keys typed before Nexus ran (read off the terminal by ``__main__.take_the_terminal``):
the lines the user ended with Enter, to submit as if typed now, and the unfinished rest,
for the editor, with its cursor where the user left it. The keys edit the line as the
editor would have: Backspace and Delete erase what the user sees, ←/→, Home/End move,
Ctrl+U and Ctrl+W erase back (arrows typed in the first moments were dropped, and the
letters after them landed in the wrong place: a trial). The quit key (Ctrl+Q) ends them:
Nexus starts with what came before it and quits. Other escape sequences (↑/↓, a
terminal's replies) and control characters edited nothing and are dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .text import cluster_start

# a CSI sequence (its parameters and final byte), SS3 (ESC O x), an OSC string, or ESC + one
_KEY = re.compile(r"\x1b(?:\[([0-?]*)[ -/]*([@-~])|O([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)|.)|([\x00-\x08\x0a-\x1f\x7f])|([^\x00-\x08\x0a-\x1f\x7f\x1b]+)",
                  re.S)
_MOVES = {"D": "left", "C": "right", "H": "home", "F": "end"}
_TILDE = {"1": "home", "7": "home", "4": "end", "8": "end", "3": "delete"}
_CONTROLS = {"\x7f": "backspace", "\x08": "backspace", "\x15": "kill", "\x17": "word", "\x01": "home",
             "\x05": "end", "\n": "enter"}


@dataclass
class TypedAhead:
    lines: list[str] = field(default_factory=list)  # ended with Enter: messages (blank ones dropped)
    rest: str = ""  # the unfinished line
    cursor: int = 0  # where in ``rest`` the cursor was left
    quit: bool = False  # a quit key came after them: the keys after it were not read


def read_typeahead(typed: str, quit_keys: tuple[str, ...] = ("ctrl+q",)) -> TypedAhead:
    """``quit_keys``: Textual's names of the keys that quit ("ctrl+q"): one typed before
    the first screen was dropped with the other control keys, and Nexus stayed (a trial)."""
    out = TypedAhead()
    line, at = "", 0
    for m in _KEY.finditer(typed.replace("\r\n", "\n").replace("\r", "\n")):
        params, final, ss3, control, text = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        if text is not None:
            line, at = line[:at] + text + line[at:], at + len(text)
            continue
        if control and "\x01" <= control <= "\x1a" and f"ctrl+{chr(ord(control) + 96)}" in quit_keys:
            out.quit = True
            break
        key = _CONTROLS.get(control) if control else _MOVES.get(final or ss3 or "")
        if final == "~":
            key = _TILDE.get((params or "").split(";")[0])
        if key == "enter":
            if line.strip():
                out.lines.append(line)
            line, at = "", 0
        elif key == "left":
            at = cluster_start(line, at)
        elif key == "right":
            at = _cluster_end(line, at)
        elif key == "home" or key == "end":
            at = 0 if key == "home" else len(line)
        elif key == "backspace":
            start = cluster_start(line, at)
            line, at = line[:start] + line[at:], start
        elif key == "delete":
            line = line[:at] + line[_cluster_end(line, at):]
        elif key == "kill":
            line, at = line[at:], 0
        elif key == "word":
            start = len(line[:at].rstrip())
            start = len(line[:start]) - len(re.split(r"\s", line[:start])[-1])
            line, at = line[:start] + line[at:], start
    out.rest, out.cursor = line, at
    return out


def typeahead_lines(typed: str) -> tuple[list[str], str]:
    """``(lines ended by Enter, the rest)``; blank lines are no messages."""
    ahead = read_typeahead(typed)
    return ahead.lines, ahead.rest


def _cluster_end(text: str, i: int) -> int:
    """Where the character the user sees, starting at ``i``, ends."""
    end = len(text)
    while end > i:  # walk back from the end, a whole character at a time
        start = cluster_start(text, end)
        if start <= i:
            return end
        end = start
    return len(text)

"""Keys typed before Nexus ran (read off the terminal by ``__main__.take_the_terminal``):
the lines the user ended with Enter, to submit as if typed now, and the unfinished rest,
for the editor. Backspace erases what the user sees before it; escape sequences (arrows,
a terminal's replies) and other control characters are dropped: before the app ran they
edited nothing."""

from __future__ import annotations

import re

from .text import cluster_start

_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|.)", re.S)
_CONTROLS = re.compile(r"[\x00-\x07\x0b-\x1f]")


def typeahead_lines(typed: str) -> tuple[list[str], str]:
    """``(lines ended by Enter, the rest)``; blank lines are no messages."""
    text = _CONTROLS.sub("", _ESCAPES.sub("", typed.replace("\r\n", "\n").replace("\r", "\n")))
    *ended, rest = (_erased(line) for line in text.split("\n"))
    return [line for line in ended if line.strip()], rest


def _erased(line: str) -> str:
    """``line`` with each Backspace applied, a whole emoji or accented letter at a time."""
    parts = re.split("[\x7f\x08]", line)
    kept = parts[0]
    for typed_after in parts[1:]:  # one Backspace before each
        kept = kept[:cluster_start(kept, len(kept))] + typed_after
    return kept

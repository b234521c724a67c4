"""Keys typed before Nexus ran (read off the terminal by ``__main__.take_the_terminal``):
the lines the user ended with Enter, to submit as if typed now, and the unfinished rest,
for the editor. Escape sequences (arrows, a terminal's replies) and other control
characters are dropped: before the app ran they edited nothing."""

from __future__ import annotations

import re

_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|.)", re.S)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def typeahead_lines(typed: str) -> tuple[list[str], str]:
    """``(lines ended by Enter, the rest)``; blank lines are no messages."""
    text = _CONTROLS.sub("", _ESCAPES.sub("", typed.replace("\r\n", "\n").replace("\r", "\n")))
    *ended, rest = text.split("\n")
    return [line for line in ended if line.strip()], rest

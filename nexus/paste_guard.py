"""Pasted text stays text.

Textual 8's terminal parser handles an escape code inside a bracketed paste by replaying
the characters after it as key presses: pasting coloured terminal output scrambled the
text, a BEL in it opened the log-level menu (Ctrl+G) and a 0x11 byte quit Nexus (Ctrl+Q).
``PasteCleaner`` removes escape codes and control characters from the inside of a
bracketed paste before the parser reads it, so a paste arrives as one ``Paste`` event of
plain text; everything outside a paste passes untouched.

Outside a paste, Esc followed at once by text is the Escape key, then the text
(``escape_splits``): the parser read it as an escape code in the making, and 32
characters on gave up and typed the Esc as "^" ("^What's the weather…": Esc out of the
tree, then a fast burst, in a trial); fewer made it Alt+ the first letter, and the Esc
did nothing (a reply was not cancelled).
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger("nexus")

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # colours, cursor moves (and the end marker)
_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")  # window titles, hyperlinks
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # all but tab, newline, CR
_CSI_START = re.compile(r"\x1b(?:\[[0-?]*[ -/]*)?")


def unfinished_escape(text: str) -> int | None:
    """Where an escape code that ``text`` ends inside begins (the rest comes with the
    next read), or None."""
    osc = text.rfind("\x1b]")
    if osc >= 0 and "\x07" not in text[osc:] and "\x1b\\" not in text[osc:]:
        return osc
    esc = text.rfind("\x1b")
    if esc >= 0 and _CSI_START.fullmatch(text, esc):
        return esc
    return None


class PasteCleaner:
    """Fed the terminal's input as it is read; returns it with the pastes cleaned."""

    def __init__(self) -> None:
        self.in_paste = False
        self._held = ""  # inside a paste: an unfinished escape code at the end of a read
        self._tail = ""  # outside: the end of the last read, in case a start marker was split

    def __call__(self, data: str) -> str:
        out: list[str] = []
        while data:
            if not self.in_paste:
                seen = self._tail + data
                at = seen.find(PASTE_START)
                if at < 0:
                    out.append(data)
                    self._tail = seen[-(len(PASTE_START) - 1):]
                    return "".join(out)
                cut = at + len(PASTE_START) - len(self._tail)  # where the marker ends in data
                out.append(data[:cut])
                data, self._tail, self.in_paste = data[cut:], "", True
            else:
                data = self._held + data
                self._held = ""
                end = data.find(PASTE_END)
                if end < 0:
                    held = unfinished_escape(data)
                    if held is not None:
                        self._held, data = data[held:], data[:held]
                    out.append(clean_pasted(data))
                    return "".join(out)
                out.append(clean_pasted(data[:end]) + PASTE_END)
                data, self.in_paste = data[end + len(PASTE_END):], False
        return "".join(out)


def clean_pasted(text: str) -> str:
    """Pasted text without escape codes or control characters (tab, newline and CR stay)."""
    text = _OSC.sub("", text)
    text = _CSI.sub("", text)
    return _CONTROL.sub("", text)


# what may follow Esc in an escape code: CSI, SS3, OSC, DCS, APC, PM, ST, SS2 (and Esc)
_INTRODUCERS = frozenset("[O]P_^\\N\x1b")


def _text_after_escape(data: str, at: int) -> bool:
    """``data[at]`` is text that cannot begin an escape code (a letter, a digit, a space…)."""
    return at < len(data) and data[at].isprintable() and data[at] not in _INTRODUCERS


def escape_splits(data: str, pending: bool) -> list[int]:
    """Where the terminal's input ``data`` (outside pastes) is to be cut so that an Esc
    before the cut is read as the Escape key: after an Esc followed by text and more
    (Alt+W is Esc and one letter, alone in its read), and at 0 when the last read ended
    with a lone Esc (``pending``) and this one starts with text."""
    cuts = [0] if pending and _text_after_escape(data, 0) else []
    at = data.find("\x1b")
    while at >= 0:
        if _text_after_escape(data, at + 1) and at + 2 < len(data) and data[at + 2] != "\x1b":
            cuts.append(at + 1)
        at = data.find("\x1b", at + 1)
    return cuts


def install() -> bool:
    """Clean pastes in the terminal drivers Nexus runs under (Linux, macOS). True when
    installed; Textual's parser is left as it is where its names have moved."""
    try:
        from textual._xterm_parser import XTermParser
        from textual.drivers import linux_driver
    except ImportError:
        return False
    if getattr(linux_driver.XTermParser, "cleans_pastes", False):
        return True
    if not hasattr(linux_driver, "XTermParser") or not hasattr(XTermParser, "feed"):
        return False

    class CleanPasteParser(XTermParser):
        cleans_pastes = True

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._cleaner = PasteCleaner()
            self._esc_pending = False  # the last read ended with a lone Esc

        def feed(self, data: str):
            if not data:  # the end of input
                return super().feed(data)
            cleaned = self._cleaner(data)
            if not cleaned:
                return ()  # an empty feed would mean the end
            pending, self._esc_pending = self._esc_pending, cleaned.endswith("\x1b") and not self._cleaner.in_paste
            cuts = [] if self._cleaner.in_paste else escape_splits(cleaned, pending)
            return self._feed_cut(cleaned, cuts) if cuts else super().feed(cleaned)

        def _feed_cut(self, data: str, cuts: list[int]):
            start = 0
            for cut in cuts:
                if cut > start:
                    yield from super().feed(data[start:cut])
                start = cut
                if getattr(self, "_timeout_time", None) is not None:  # the Esc waits for more: it is the key
                    self._timeout_time = 0.0
                    yield from self.tick()
            if start < len(data):
                yield from super().feed(data[start:])

    linux_driver.XTermParser = CleanPasteParser
    return True

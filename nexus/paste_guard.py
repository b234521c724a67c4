"""Pasted text stays text.

Textual 8's terminal parser handles an escape code inside a bracketed paste by replaying
the characters after it as key presses: pasting coloured terminal output scrambled the
text, a BEL in it opened the log-level menu (Ctrl+G) and a 0x11 byte quit Nexus (Ctrl+Q).
``PasteCleaner`` removes escape codes and control characters from the inside of a
bracketed paste before the parser reads it, so a paste arrives as one ``Paste`` event of
plain text; everything outside a paste passes untouched.
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

        def feed(self, data: str):
            if not data:  # the end of input
                return super().feed(data)
            cleaned = self._cleaner(data)
            return super().feed(cleaned) if cleaned else ()  # an empty feed would mean the end

    linux_driver.XTermParser = CleanPasteParser
    return True

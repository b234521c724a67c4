"""Text from models and users, made safe to show on a terminal or write to a log."""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)|\x1b.")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
SURROGATE = re.compile("[\ud800-\udfff]")  # lone halves: a terminal write of one would raise


def safe(text: str) -> str:
    """Model output is text: terminal escape sequences and control characters are made
    visible, never sent to the terminal. (Rich markup is inert: we never parse it.)"""
    text = SURROGATE.sub("\ufffd", text)
    text = ANSI.sub(lambda m: m.group(0).replace("\x1b", "␛"), text)
    return CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


# a reply of Markdown syntax only ("-", "#", "1.") draws as nothing: it is shown as written
_ONLY_SYNTAX = re.compile(r"[\s\-*+#>_=`~.|0-9)]+")
_SYNTAX_CHAR = re.compile(r"([\-*+#>_=`~.|)])")


def visible_markdown(text: str) -> str:
    """``text`` as Markdown that draws something: a text of Markdown syntax only is
    escaped, so the reply "-" shows "-", not an empty line."""
    if text.strip() and _ONLY_SYNTAX.fullmatch(text):
        return _SYNTAX_CHAR.sub(r"\\\1", text)
    return text


def log_safe(text: str) -> str:
    """One log record as ``cat`` shows it: ``safe``, with carriage returns visible and
    continuation lines indented, so no text can pass for another record."""
    return safe(text).replace("\r", "\\r").replace("\n", "\n    ")


def counted(n: int, noun: str) -> str:
    """"1 topic", "2 topics", "1,204 exchanges", "3 branches"."""
    plural = noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{n:,} {noun if n == 1 else plural}"


def quoted(text: str, limit: int = 0) -> str:
    """What a user typed, quoted in a notice: on one line, in double quotes whatever it
    holds (``repr`` switched to single quotes and back by whether it held an apostrophe),
    cut with "…" past ``limit`` characters when one is given."""
    text = " ".join(text.split())
    if limit and len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return f'"{text}"'

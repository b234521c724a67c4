"""Text from models and users, made safe to show on a terminal or write to a log."""

from __future__ import annotations

import re

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
CONTROL_AND_C1 = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # and the 8-bit forms (CSI 0x9b)
SURROGATE = re.compile("[\ud800-\udfff]")  # lone halves: a terminal write of one would raise


def _picture(m: re.Match) -> str:
    code = ord(m.group(0))
    return "\u2421" if code == 0x7F else chr(0x2400 + code)  # ␇ for BEL, ␛ for ESC, ␡ for DEL


def safe(text: str) -> str:
    """Model output is text: terminal escape sequences and control characters are made
    visible as their control pictures (ESC as ␛, BEL as ␇: BEL was shown as "\\x07"
    beside a ␛, two ways for one kind: a trial), never sent to the terminal. (Rich markup
    is inert: we never parse it.)"""
    return CONTROL.sub(_picture, SURROGATE.sub("\ufffd", text))


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


def _extends(c: str) -> bool:
    """A code point drawn onto the one before it: a combining mark, a variation selector,
    a skin tone, an emoji tag."""
    import unicodedata

    o = ord(c)
    return (unicodedata.category(c) in ("Mn", "Me") or 0xFE00 <= o <= 0xFE0F or 0x1F3FB <= o <= 0x1F3FF
            or 0xE0020 <= o <= 0xE007F)


def _regional(c: str) -> bool:
    return 0x1F1E6 <= ord(c) <= 0x1F1FF


def cluster_start(text: str, end: int) -> int:
    """Where the character a user sees, ending at ``end``, begins: a letter with its
    accents, an emoji with its joined parts (🐈‍⬛ is three code points), a flag (two).
    An approximation of Unicode's grapheme clusters, enough for Backspace."""
    if end <= 0:
        return 0
    k = end - 1
    while k > 0 and _extends(text[k]):
        k -= 1
    while k >= 2 and text[k - 1] == "\u200d":  # X + joiner + Y: one character
        k -= 2
        while k > 0 and _extends(text[k]):
            k -= 1
    if _regional(text[k]):  # flags pair regional indicators from the left
        run = k
        while run > 0 and _regional(text[run - 1]):
            run -= 1
        if (k - run) % 2 == 1:
            k -= 1
    return k


def around_words(text: str, query: str, width: int = 120) -> str:
    """``text`` on one line in ``width`` characters: its start, or, when none of the query's
    words is there but one is further on, the part around the first of them ("…Line 0042:
    the number 42…"). A 60-line paste found for "number 42" showed its first lines (a trial)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    from trace_core.textutil import STOPWORDS, words

    said = list(dict.fromkeys(words(query)))
    wanted = [w for w in said if w not in STOPWORDS] or said
    lower = flat.lower()
    spots = [m.start() for w in wanted for m in [re.search(rf"(?<!\w){re.escape(w)}(?!\w)", lower)] if m]
    if not spots or min(spots) + 20 < width:
        return flat[: width - 1].rstrip() + "…"
    start = max(0, min(spots) - width // 3)
    part = flat[start: start + width - 2].strip()
    return "…" + part + ("…" if start + width - 2 < len(flat) else "")


def exchanges_said(exchanges, unit: bool = True) -> str:
    """How many exchanges, as the tree pane counts them (those in the tree), with the
    archived and the forgotten named apart: /stats called a forgotten one "archived",
    which reads as restorable, and /export and /load counted what the pane did not (a trial).
    ``unit=False``: the number alone, after a label that says it ("exchanges: 13 exchanges")."""
    forgotten = sum(1 for x in exchanges if x.forgotten)
    archived = sum(1 for x in exchanges if x.archived and not x.forgotten)
    n = len(exchanges) - forgotten - archived
    said = counted(n, "exchange") if unit else f"{n:,}"
    apart = [f"{archived} archived"] * bool(archived) + [f"{forgotten} forgotten"] * bool(forgotten)
    return said + (f" ({' and '.join(apart)} beside them)" if apart else "")

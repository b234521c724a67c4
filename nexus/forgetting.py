"""/forget: which exchanges a user means, and how the request is put to them before it
is done (it cannot be undone)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .text import around_words, counted, quoted

_WORD = re.compile(r"\w+")
_INDEX = re.compile(r"#(\d+)")  # a bare number is a word: "/forget 4471" means the code


@dataclass(frozen=True)
class ForgetRequest:
    """The exchanges ``/forget ARGS`` names, and how they were named."""

    indices: tuple[int, ...]
    by_words: str  # the words, "" when named by number
    unknown: tuple[str, ...] = ()  # numbers with no exchange


def forget_request(exchanges, args: list[str]) -> ForgetRequest:
    """``#3 #7``: those exchanges; anything else: the exchanges (archived ones
    too: their text is still in the file) that hold every word given, as words, in any
    case. Exchanges already forgotten are left out."""
    if all(_INDEX.fullmatch(a) for a in args):
        wanted = [int(_INDEX.fullmatch(a).group(1)) for a in args]  # type: ignore[union-attr]
        have = [i for i in dict.fromkeys(wanted) if i < len(exchanges) and not exchanges[i].forgotten]
        unknown = tuple(f"#{i}" for i in dict.fromkeys(wanted) if i >= len(exchanges))
        return ForgetRequest(tuple(have), "", unknown)
    phrase = " ".join(args)
    wanted_words = set(_WORD.findall(phrase.casefold()))
    hits = [x.index for x in exchanges if not x.forgotten and wanted_words
            and wanted_words <= set(_WORD.findall(f"{x.user}\n{x.assistant}\n{x.system}".casefold()))]
    return ForgetRequest(tuple(hits), phrase)


def forget_question(exchanges, req: ForgetRequest, command: str, limit: int = 8) -> str:
    """The list of what would be forgotten, and how to confirm."""
    lines = [f"/forget would erase {counted(len(req.indices), 'exchange')} for good: from memory, the topic "
             "names and summaries, and the session file (an export or copy made before keeps it):"]
    for i in req.indices[:limit]:
        x = exchanges[i]
        text = around_words(x.user, req.by_words, 70)
        lines.append(f"  #{i}" + (" (archived)" if x.archived else "") + f"  {quoted(text)}")
    if len(req.indices) > limit:
        lines.append(f"  … and {len(req.indices) - limit} more")
    lines.append(f"Type {command} again within 30 s to confirm. It cannot be undone.")
    return "\n".join(lines)

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

    def names(self, text: str) -> bool:
        """Whether ``text`` holds every word the request gave (a /search for the same code)."""
        wanted = set(_WORD.findall(self.by_words.casefold()))
        return bool(wanted) and wanted <= set(_WORD.findall(text.casefold()))


def forget_request(exchanges, args: list[str]) -> ForgetRequest:
    """``#3 #7``: those exchanges; anything else: the exchanges (archived ones
    too: their text is still in the file) that hold every word given, as words, in any
    case. Exchanges already forgotten are left out."""
    if all(_INDEX.fullmatch(a) for a in args):
        wanted = [int(_INDEX.fullmatch(a).group(1)) for a in args]  # type: ignore[union-attr]
        have = [i for i in dict.fromkeys(wanted) if i < len(exchanges) and not exchanges[i].forgotten]
        unknown = tuple(f"#{i}" for i in dict.fromkeys(wanted) if i >= len(exchanges))
        return ForgetRequest(tuple(have), "", unknown)
    req = ForgetRequest((), " ".join(args))
    hits = [x.index for x in exchanges if not x.forgotten and req.names(f"{x.user}\n{x.assistant}\n{x.system}")]
    return ForgetRequest(tuple(hits), req.by_words)


_ASKS_TO_FORGET = re.compile(
    r"^\W*(?:(?:please|pls|can you|could you|would you|now)\W+)*(?:forget|erase|delete|do not remember|"
    r"don'?t remember|stop remembering)\s+(?:about\s+)?(?:my|me|that|this|these|those|what|the|everything|all|it|our|"
    r"his|her|their|anything)\b", re.IGNORECASE)  # an object: "Delete key is broken" asks nothing


def asks_to_forget(text: str) -> bool:
    """A message asking the model to forget something ("Please forget my locker code"):
    English only, as the web router's cues are."""
    return bool(_ASKS_TO_FORGET.match(text))


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

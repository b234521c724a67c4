"""/forget: which exchanges a user means, and how the request is put to them before it
is done (it cannot be undone)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from trace_core.textutil import ideographic

from .text import around_words, counted, quoted

_WORD = re.compile(r"\w+")
_INDEX = re.compile(r"#(\d+)")  # a bare number is a word: "/forget 4471" means the code


@dataclass(frozen=True)
class ForgetRequest:
    """The exchanges ``/forget ARGS`` names, and how they were named."""

    indices: tuple[int, ...]
    by_words: str  # the words, "" when named by number
    unknown: tuple[str, ...] = ()  # numbers with no exchange
    # messages with no exchange that hold the words: unanswered (kept for Ctrl+R) or not
    # stored (a full disk); /forget said "no exchange holds" and left them (a trial)
    unanswered: tuple[str, ...] = ()

    def names(self, text: str) -> bool:
        """Whether ``text`` holds every word the request gave (a /search for the same code);
        a Japanese or Chinese word inside a longer unspaced run too ("/forget ポチ" said no
        exchange held it, beside "ポチは毎朝公園を散歩します。": a trial)."""
        wanted = set(_WORD.findall(self.by_words.casefold()))
        folded = text.casefold()
        words = set(_WORD.findall(folded))
        return bool(wanted) and all(w in folded if ideographic(w) else w in words for w in wanted)


def forget_request(exchanges, args: list[str], unanswered: Sequence[str] = ()) -> ForgetRequest:
    """``#3 #7``: those exchanges; anything else: the exchanges (archived ones
    too: their text is still in the file) that hold every word given, as words, in any
    case, and the ``unanswered`` messages that do. Exchanges already forgotten are left out."""
    if all(_INDEX.fullmatch(a) for a in args):
        wanted = [int(_INDEX.fullmatch(a).group(1)) for a in args]  # type: ignore[union-attr]
        have = [i for i in dict.fromkeys(wanted) if i < len(exchanges) and not exchanges[i].forgotten]
        unknown = tuple(f"#{i}" for i in dict.fromkeys(wanted) if i >= len(exchanges))
        return ForgetRequest(tuple(have), "", unknown)
    req = ForgetRequest((), " ".join(args))
    hits = [x.index for x in exchanges if not x.forgotten and req.names(f"{x.user}\n{x.assistant}\n{x.system}")]
    return ForgetRequest(tuple(hits), req.by_words, (), tuple(dict.fromkeys(t for t in unanswered if req.names(t))))


# a request to forget, English only (as the web router's cues are): a verb of forgetting
# with something of the user's as its object ("Forget the milk" asks nothing of memory)
_ASKS_TO_FORGET = re.compile(
    r"^\W*(?:(?:please|pls|can you|could you|would you|now|i want you to|i'd like you to|i would like you to)\W+)*"
    r"(?:forget|erase|delete|remove|do not (?:remember|store|save|keep)|don'?t (?:remember|store|save|keep)|"
    r"stop remembering)\s+(?:about\s+)?(?:my|what i|that i|this|everything i|all (?:that|of what) i|"
    r"our|the \w+ i (?:said|told|gave|mentioned))\b"
    r"|\b(?:remove|delete|erase|take|wipe)\b[^.?!]{0,40}\b(?:from|out of) (?:your )?memory\b", re.IGNORECASE)


def asks_to_forget(text: str) -> bool:
    """A message asking the model to forget something ("Please forget my locker code")."""
    return bool(_ASKS_TO_FORGET.search(text))


def forget_question(exchanges, req: ForgetRequest, command: str, limit: int = 30) -> str:
    """The list of what would be forgotten, and how to confirm: every one of them, a line
    each up to ``limit``, then their numbers (an irreversible erasure listed 8 of 13 and
    "… and 5 more": a trial)."""
    what = [counted(len(req.indices), "exchange")] if req.indices else []
    what += [counted(len(req.unanswered), "message without an answer")] if req.unanswered else []
    share = (f" — {len(req.indices)} of the session's {len(exchanges)}"
             if req.by_words and len(req.indices) > max(3, len(exchanges) // 4) else "")
    lines = [f"/forget would erase {' and '.join(what)} for good{share}: from memory, the topic names and "
             "summaries, and the session file (an export or copy made before keeps it):"]
    for i in req.indices[:limit]:
        x = exchanges[i]
        # the words may be in the reply only: said so, or the message listed read as unrelated (a trial)
        where, text = ("", x.user) if not req.by_words or req.names(x.user) or not req.names(x.assistant) \
            else (" (in the reply)", x.assistant)
        lines.append(f"  #{i}" + (" (archived)" if x.archived else "") + f"{where}  {quoted(around_words(text, req.by_words, 70))}")
    if len(req.indices) > limit:
        lines.append(f"  and {len(req.indices) - limit} more: " + ", ".join(f"#{i}" for i in req.indices[limit:]))
    for text in req.unanswered:
        lines.append(f"  (not answered)  {quoted(around_words(text, req.by_words, 70))}")
    lines.append(f"Type {command} again within 30 s to confirm. It cannot be undone.")
    return "\n".join(lines)

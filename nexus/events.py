"""Typed events from ChatSession to the UI (engine events of trace_core pass through too)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class FailureKind(enum.Enum):
    """What a failed reply says of the model server, decided where the error is caught
    (``nexus.turn.failure_kind``), never read back out of its words: a proxy's "cannot
    reach the model server" in an HTTP 502 was taken for the server gone (a review)."""

    OTHER = "other"
    UNREACHABLE = "unreachable"  # no connection could be made
    LOST_MID_REPLY = "lost mid-reply"  # the connection broke as the reply came
    GONE_MID_REPLY = "gone mid-reply"  # it broke, and nothing answers at the address now
    KEY_REFUSED = "key refused"  # the server answers, and refuses the API key


@dataclass(frozen=True)
class Notice:
    text: str
    level: str = "info"  # debug | info | warning | error
    chat: bool = False  # said in the chat too (not only the log pane): the user must see it


# Reply events carry their turn's id: a late event of one request never touches another's text.


@dataclass(frozen=True)
class ReplyStarted:
    user: str
    turn: int = 0


@dataclass(frozen=True)
class ReplyChunk:
    text: str
    turn: int = 0


@dataclass(frozen=True)
class ReasoningChunk:
    """A piece of the model's reasoning (``reasoning_content``): shown folded, never stored."""

    text: str
    turn: int = 0


@dataclass(frozen=True)
class ReplyFinished:
    text: str
    cancelled: bool = False
    sources: tuple[tuple[str, str], ...] = ()  # (title, url) of web results used
    turn: int = 0
    empty: bool = False  # no answer at all: shown as such, not stored, kept for resend
    note: str = ""  # e.g. the reply was cut at max_tokens


@dataclass(frozen=True)
class ReplyFailed:
    user: str
    partial: str
    problem: str
    turn: int = 0
    kept: bool = True  # the message is kept for resend (False: refused, e.g. too long for the context)
    stays: bool = False  # a /retry: not kept, the exchange it was to replace stays as it was
    kind: FailureKind = FailureKind.OTHER


@dataclass(frozen=True)
class StoreFailed:
    """Storing an exchange raised: it is kept in the app (ChatSession.unstored) for Ctrl+R."""
    user: str
    reply: str
    problem: str
    turn: int = 0
    kept_on_disk: bool = True  # False: nor could it be written beside the session (a full disk)


@dataclass(frozen=True)
class TurnSettled:
    """A turn is over and its exchange stored (or kept): the next queued message may go."""
    turn: int
    outcome: str  # answered | cancelled | failed | empty | refused | unstored
    exchange: int = -1  # the stored exchange's number (-1: none stored)
    timestamp: str = ""  # its timestamp
    replaced: bool = False  # it took the place of the exchange of that number (/retry, /edit)


@dataclass(frozen=True)
class Retrieved:
    report: object  # trace_core.synthesizer.RetrievalReport


@dataclass(frozen=True)
class WebSearching:
    """A web search for the turn has begun (its reply said "the model is working" meanwhile)."""

    query: str
    turn: int = 0


@dataclass(frozen=True)
class WebRouted:
    search: bool
    reason: str
    query: str = ""
    results: int = 0
    seconds: float = 0.0
    problem: str = ""
    turn: int = 0  # the turn it was searched for (0: none)
    cancelled: bool = False  # the turn was cancelled while it searched: no reply will come


@dataclass(frozen=True)
class Remembered:
    exchange_index: int
    thread_path: str
    how: str = "remembered"  # or "replaced" (/retry, /edit), "put back" (/undo-retry)


@dataclass(frozen=True)
class ModelStep:
    step: str
    seconds: float = 0.0
    ok: bool = True
    detail: str = ""


@dataclass(frozen=True)
class Progress:
    task: str
    done: int
    total: int
    extra: dict = field(default_factory=dict)

"""The chat you left: a session's past exchanges, newest page first, earlier pages on demand.

Plain Python (no widgets): the app shows what ``HistoryPager`` hands it. The pager is fed
the tree's public exchange list (``CTree.exchanges``, a copy taken when the session
opened); exchanges made afterwards are already on screen and are not paged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

PAGE_SIZE = 50


@dataclass(frozen=True)
class PastExchange:
    """One stored exchange as the chat pane shows it."""

    index: int
    user: str
    assistant: str
    note: str  # the exchange's system message (e.g. "Image ingested: …"), or ""
    when: str  # local date and time, "2026-11-30 14:05"; "" when not recorded
    archived: bool


def when(timestamp: str) -> str:
    """An ISO timestamp (UTC as the engine writes it) as local date and time."""
    if not timestamp:
        return ""
    try:
        t = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp[:16]
    if t.tzinfo is not None:
        t = t.astimezone()
    return t.strftime("%Y-%m-%d %H:%M")


def past_exchange(node) -> PastExchange:
    """A ``MessageNode`` (its public fields only) as a ``PastExchange``."""
    return PastExchange(node.index, node.user, node.assistant, node.system, when(node.timestamp),
                        bool(node.archived))


class HistoryPager:
    """Pages back through ``exchanges`` (ordered by index): ``earlier()`` returns the
    next ``page_size`` exchanges before the oldest one handed out, oldest first."""

    def __init__(self, exchanges: Sequence, page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self._exchanges = exchanges
        self.page_size = page_size
        self._start = len(exchanges)  # the oldest exchange handed out so far

    @property
    def total(self) -> int:
        return len(self._exchanges)

    @property
    def remaining(self) -> int:
        """Exchanges older than what was handed out."""
        return self._start

    def earlier(self) -> list[PastExchange]:
        stop = self._start
        self._start = max(0, stop - self.page_size)
        return [past_exchange(x) for x in self._exchanges[self._start:stop]]

"""The chat you left: a session's past exchanges, newest page first, earlier pages on demand.

Plain Python (no widgets): the app shows what ``HistoryPager`` hands it. The newest page
is read straight from the session file (``newest_from_file``: read-only, no lock, no tree
built), so it is on screen while the tree loads; earlier pages come from the tree's
public exchange list (``CTree.exchanges``) once it is open. Exchanges made afterwards
are already on screen and are not paged.
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


def newest_from_file(path, page_size: int = PAGE_SIZE) -> tuple[list[PastExchange], int]:
    """The newest ``page_size`` exchanges of a session file and how many it holds, read
    read-only (no writer lock, nothing written) without building the tree: a
    10,000-exchange session shows its last page before ``CTree.open`` has finished.
    Raises what the store raises for a file it refuses (the tree's opening reports it)."""
    from trace_core import VectorDatabase

    db = VectorDatabase(str(path), read_only=True)
    try:
        rows = db.load_messages()
        archived = {n.exchange_index for n in db.load_nodes() if n.kind == "message" and n.archived}
    finally:
        db.close()
    by_exchange: dict[int, dict[str, list[str]]] = {}
    stamps: dict[int, str] = {}
    for _idx, x, role, content, stamp in rows:
        by_exchange.setdefault(x, {}).setdefault(role, []).append(content)
        stamps[x] = stamp or ""
    newest = sorted(by_exchange)[-page_size:]
    page = [PastExchange(x, "\n".join(by_exchange[x].get("user", [])), "\n".join(by_exchange[x].get("assistant", [])),
                         "\n".join(by_exchange[x].get("system", [])), when(stamps[x]), x in archived)
            for x in newest]
    return page, len(by_exchange)


class HistoryPager:
    """Pages back through ``exchanges`` (ordered by index): ``earlier()`` returns the
    next ``page_size`` exchanges before the oldest one handed out, oldest first.
    ``HistoryPager.after(page, total)``: the newest page was already shown (read from the
    file); earlier pages wait for ``attach(tree.exchanges)``."""

    def __init__(self, exchanges: Sequence | None, page_size: int = PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self._exchanges = exchanges
        self.page_size = page_size
        self._start = len(exchanges) if exchanges is not None else 0  # the oldest exchange handed out so far
        self.read_total = self._start

    @classmethod
    def after(cls, page: list[PastExchange], total: int, page_size: int = PAGE_SIZE) -> HistoryPager:
        pager = cls(None, page_size)
        pager._start = page[0].index if page else total
        pager.read_total = total  # exchanges the file held when the page was read
        return pager

    def attach(self, exchanges: Sequence) -> None:
        """The tree is open: earlier pages come from its exchanges."""
        self._exchanges = exchanges

    @property
    def ready(self) -> bool:
        """Earlier pages can be handed out (the exchange list is attached)."""
        return self._exchanges is not None

    @property
    def remaining(self) -> int:
        """Exchanges older than what was handed out."""
        return self._start

    def end(self) -> None:
        """No earlier page from now on (``/clear``: the pane stays as cleared)."""
        self._start = 0

    def earlier(self) -> list[PastExchange]:
        if self._exchanges is None:
            return []
        stop = self._start
        self._start = max(0, stop - self.page_size)
        return [past_exchange(x) for x in self._exchanges[self._start:stop]]

"""Typed events from the engine to whoever listens (the Nexus UI, logs, tests).

Listeners are plain callables; a listener that raises is dropped from that event
only, never breaking the engine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

# its own logger: an app that logs each event in its own words (Nexus) quiets this one
log = logging.getLogger("trace_core.events")


@dataclass(frozen=True)
class EngineEvent:
    level: str = field(default="info", kw_only=True)  # debug | info | warning | error

    def __str__(self) -> str:
        """The event as a line of a log, in words (a repr read as Python objects)."""
        fields = ", ".join(f"{k} {v}" for k, v in vars(self).items() if k != "level")
        return f"{type(self).__name__}: {fields}" if fields else type(self).__name__


@dataclass(frozen=True)
class JudgeDecided(EngineEvent):
    """Which judge placed an exchange, what it decided and why."""

    judge: str  # "llm" | "embedding"
    action: str  # "continue" | "new"
    topic: str
    reason: str
    exchange_index: int

    def __str__(self) -> str:
        return f"judge {self.judge}: {self.action} → {self.topic} ({self.reason})"


@dataclass(frozen=True)
class LLMFailed(EngineEvent):
    """An LLM call failed; the embedding judge stood in."""

    task: str
    problem: str

    def __str__(self) -> str:
        return f"memory model failed at {self.task}: {self.problem}; the embedding judge decided"


@dataclass(frozen=True)
class AutoSaveFailed(EngineEvent):
    """The JSON export written after each change (``auto_save_path``) failed; the
    exchange is stored all the same (raising made a caller's retry store it twice)."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"auto-save to {self.path} failed: {self.problem}; the exchange is stored in the session"


@dataclass(frozen=True)
class ExchangeAdded(EngineEvent):
    exchange_index: int
    node_id: str
    thread_path: str
    seconds: float

    def __str__(self) -> str:
        return f"stored exchange #{self.exchange_index} in {self.thread_path} ({self.seconds * 1000:.0f} ms)"


@dataclass(frozen=True)
class TopicsFrozen(EngineEvent):
    topics: tuple[str, ...]

    def __str__(self) -> str:
        n = len(self.topics)
        return f"summarised {n} topic{'' if n == 1 else 's'} that left the active path: {', '.join(self.topics)}"


@dataclass(frozen=True)
class GroupRenamed(EngineEvent):
    """A grouping topic named again: its largest parts changed."""

    before: str
    after: str
    node_id: str

    def __str__(self) -> str:
        return f"group renamed: {self.before} → {self.after}"


@dataclass(frozen=True)
class ReorganizeProgress(EngineEvent):
    phase: str
    done: int
    total: int


@dataclass(frozen=True)
class ReorganizeFinished(EngineEvent):
    merged: int
    pruned: int
    skipped: int
    duration_secs: float


class EventBus:
    def __init__(self) -> None:
        self._listeners: list[Callable[[EngineEvent], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, fn: Callable[[EngineEvent], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._listeners:
                    self._listeners.remove(fn)

        return unsubscribe

    def emit(self, event: EngineEvent) -> None:
        log.log(logging.getLevelName(event.level.upper()), "%s", event)
        with self._lock:
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(event)
            except Exception:  # a broken listener must not break the engine
                log.exception("event listener failed")

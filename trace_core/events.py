"""Typed events from the engine to whoever listens (the Nexus UI, logs, tests).

Listeners are plain callables; a listener that raises is dropped from that event
only, never breaking the engine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("trace_core")


@dataclass(frozen=True)
class EngineEvent:
    level: str = field(default="info", kw_only=True)  # debug | info | warning | error


@dataclass(frozen=True)
class JudgeDecided(EngineEvent):
    """Which judge placed an exchange, what it decided and why."""

    judge: str  # "llm" | "embedding"
    action: str  # "continue" | "new"
    topic: str
    reason: str
    exchange_index: int


@dataclass(frozen=True)
class LLMFailed(EngineEvent):
    """An LLM call failed; the embedding judge stood in."""

    task: str
    problem: str


@dataclass(frozen=True)
class ExchangeAdded(EngineEvent):
    exchange_index: int
    node_id: str
    thread_path: str
    seconds: float


@dataclass(frozen=True)
class TopicsFrozen(EngineEvent):
    topics: tuple[str, ...]


@dataclass(frozen=True)
class GroupRenamed(EngineEvent):
    """A grouping topic named again: its largest parts changed."""

    before: str
    after: str
    node_id: str


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

"""Typed events from ChatSession to the UI (engine events of trace_core pass through too)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Notice:
    text: str
    level: str = "info"  # debug | info | warning | error


@dataclass(frozen=True)
class ReplyStarted:
    user: str


@dataclass(frozen=True)
class ReplyChunk:
    text: str


@dataclass(frozen=True)
class ReplyFinished:
    text: str
    cancelled: bool = False
    sources: tuple[tuple[str, str], ...] = ()  # (title, url) of web results used


@dataclass(frozen=True)
class ReplyFailed:
    user: str
    partial: str
    problem: str


@dataclass(frozen=True)
class Retrieved:
    report: object  # trace_core.synthesizer.RetrievalReport


@dataclass(frozen=True)
class WebRouted:
    search: bool
    reason: str
    query: str = ""
    results: int = 0
    seconds: float = 0.0
    problem: str = ""


@dataclass(frozen=True)
class Remembered:
    exchange_index: int
    thread_path: str


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

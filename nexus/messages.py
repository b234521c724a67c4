"""One Textual message per engine event kind.

ChatSession and trace_core emit frozen dataclasses (nexus/events.py, trace_core/events.py)
from any thread; ``message_for`` wraps each in the message of its kind, and the app
handles each kind in its own ``on_*`` method (nexus/engine_view.py, nexus/replies.py).
"""

from __future__ import annotations

from textual.message import Message

from trace_core import events as tev

from . import events as ev


class EngineMessage(Message):
    """An engine event posted from any thread (the base of the kinds below)."""

    def __init__(self, event: object) -> None:
        super().__init__()
        self.event = event


# the reply in flight (nexus/replies.py): handled while the app is leaving too


class ReplyStartedMessage(EngineMessage):
    event: ev.ReplyStarted


class ReplyChunkMessage(EngineMessage):
    event: ev.ReplyChunk


class ReasoningChunkMessage(EngineMessage):
    event: ev.ReasoningChunk


class ReplyFinishedMessage(EngineMessage):
    event: ev.ReplyFinished


class ReplyFailedMessage(EngineMessage):
    event: ev.ReplyFailed


class StoreFailedMessage(EngineMessage):
    event: ev.StoreFailed


class TurnSettledMessage(EngineMessage):
    event: ev.TurnSettled


# the log and tree panes (nexus/engine_view.py): only the file log once the app is leaving


class NoticeMessage(EngineMessage):
    event: ev.Notice


class RetrievedMessage(EngineMessage):
    event: ev.Retrieved


class WebSearchingMessage(EngineMessage):
    event: ev.WebSearching


class WebRoutedMessage(EngineMessage):
    event: ev.WebRouted


class RememberedMessage(EngineMessage):
    event: ev.Remembered


class ModelStepMessage(EngineMessage):
    event: ev.ModelStep


class ProgressMessage(EngineMessage):
    event: ev.Progress


class JudgeDecidedMessage(EngineMessage):
    event: tev.JudgeDecided


class LlmFailedMessage(EngineMessage):
    event: tev.LLMFailed


class ReorganizeProgressMessage(EngineMessage):
    event: tev.ReorganizeProgress


class ReorganizeFinishedMessage(EngineMessage):
    event: tev.ReorganizeFinished


class EngineEventMessage(EngineMessage):
    """Any other trace_core event: a line in the log at its level."""

    event: tev.EngineEvent


MESSAGES: dict[type, type[EngineMessage]] = {
    ev.ReplyStarted: ReplyStartedMessage,
    ev.ReplyChunk: ReplyChunkMessage,
    ev.ReasoningChunk: ReasoningChunkMessage,
    ev.ReplyFinished: ReplyFinishedMessage,
    ev.ReplyFailed: ReplyFailedMessage,
    ev.StoreFailed: StoreFailedMessage,
    ev.TurnSettled: TurnSettledMessage,
    ev.Notice: NoticeMessage,
    ev.Retrieved: RetrievedMessage,
    ev.WebSearching: WebSearchingMessage,
    ev.WebRouted: WebRoutedMessage,
    ev.Remembered: RememberedMessage,
    ev.ModelStep: ModelStepMessage,
    ev.Progress: ProgressMessage,
    tev.JudgeDecided: JudgeDecidedMessage,
    tev.LLMFailed: LlmFailedMessage,
    tev.ReorganizeProgress: ReorganizeProgressMessage,
    tev.ReorganizeFinished: ReorganizeFinishedMessage,
    tev.EngineEvent: EngineEventMessage,
}


def message_for(event: object) -> EngineMessage | None:
    """The message of ``event``'s kind (a subclass of a listed event takes its nearest
    listed base), or None for an object that is no event."""
    for kind in type(event).__mro__:
        cls = MESSAGES.get(kind)
        if cls is not None:
            return cls(event)
    return None

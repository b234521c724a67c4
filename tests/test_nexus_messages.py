"""One Textual message per engine event kind, and one app handler per message."""

from __future__ import annotations

import dataclasses
import inspect

from nexus import events as ev
from nexus import messages as M
from nexus.app import NexusApp
from trace_core import events as tev

NO_HANDLER = {M.ReplyStartedMessage}  # nothing to show when a reply starts (its widget is mounted when sent)


def event_kinds() -> list[type]:
    kinds = []
    for module in (ev, tev):
        kinds += [c for _, c in inspect.getmembers(module, inspect.isclass)
                  if dataclasses.is_dataclass(c) and c.__module__ == module.__name__]
    return kinds


def test_every_event_kind_has_its_own_message_class():
    kinds = event_kinds()
    assert ev.ReplyChunk in kinds and tev.JudgeDecided in kinds  # the scan finds real event classes
    classes = {}
    for kind in kinds:
        fields = {f.name: f for f in dataclasses.fields(kind)}
        args = {n: (0 if f.type in ("int", "float") else "x") for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        event = kind(**args)
        message = M.message_for(event)
        assert isinstance(message, M.EngineMessage) and message.event is event
        classes[kind] = type(message)
    listed = [k for k in kinds if k in M.MESSAGES]
    assert len({classes[k] for k in listed}) == len(listed)  # no two listed kinds share a message
    # a trace_core event without a kind of its own is a log line at its level
    assert classes[tev.ExchangeAdded] is M.EngineEventMessage
    assert M.message_for("not an event") is None


def test_the_app_handles_each_message_kind_in_its_own_method():
    for cls in set(M.MESSAGES.values()) - NO_HANDLER:
        assert cls.handler_name != M.EngineMessage.handler_name
        assert callable(getattr(NexusApp, cls.handler_name, None)), f"no {cls.handler_name}"
    assert not hasattr(NexusApp, M.EngineMessage.handler_name)  # no catch-all handler with a type switch

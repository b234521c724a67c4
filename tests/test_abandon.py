"""nexus/abandon.py: a blocking call given up when Nexus closes, without waiting for it."""

from __future__ import annotations

import threading
import time

import pytest

from nexus.abandon import Abandoned, call_abandonable, start_detached


def test_the_result_and_the_exception_come_back_as_they_are():
    assert call_abandonable(lambda a, b: a + b, 2, 3, give_up=lambda: False) == 5
    with pytest.raises(KeyError, match="nope"):
        call_abandonable(lambda: {}["nope"], give_up=lambda: False)


def test_give_up_returns_at_once_and_the_call_runs_on_alone():
    release, finished, closing = threading.Event(), threading.Event(), threading.Event()

    def blocking() -> str:
        release.wait(30)
        finished.set()
        return "late"

    threading.Timer(0.2, closing.set).start()
    started = time.monotonic()
    with pytest.raises(Abandoned):
        call_abandonable(blocking, give_up=closing.is_set, poll=0.02)
    waited = time.monotonic() - started
    assert 0.15 <= waited < 2.0, waited  # not the 30 s the call would take
    assert not finished.is_set()
    release.set()
    assert finished.wait(5)  # it was not killed: it ends on its own, unobserved


def test_already_closing_does_not_start_the_call():
    called = []
    with pytest.raises(Abandoned):
        call_abandonable(lambda: called.append(1), give_up=lambda: True)
    time.sleep(0.05)
    assert called == []


def test_a_detached_failure_is_logged_not_raised(caplog):
    t = start_detached(lambda: 1 / 0, name="swap back")
    t.join(5)
    assert t.daemon and not t.is_alive()
    assert "swap back" in caplog.text and "division by zero" in caplog.text

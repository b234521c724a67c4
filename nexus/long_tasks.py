"""Long commands (/load, /ingest, /reorganize): progress in the chat pane, Esc cancels, one at a time."""

from __future__ import annotations

import time

from textual.worker import get_current_worker

from .widgets import Notice

LONG_COMMANDS = {"reorganize_worker": "/reorganize", "undo_worker": "/undo-reorganize",
                 "undo_retry_worker": "/undo-retry"}  # by worker name: what the user typed


class Cancelled(Exception):
    """A long command was cancelled (Esc, or the app exiting)."""


class LongTasks:
    """NexusApp's long commands: one progress line each, Esc cancels, sessions wait for them."""

    def stop_check(self):
        """(worker thread) A test for "stop now": Esc (``cancel_long``) or the app leaving
        (Textual cancels every worker on exit, later: a /reorganize whose LLM veto was
        given up at /quit went on by embeddings and merged meanwhile, in CI)."""
        worker = get_current_worker()
        return lambda: worker.is_cancelled or self.cancel_long.is_set() or self._leaving

    def quit_check(self):
        """(worker thread) A test for "Nexus is closing" (/quit, Ctrl+Q, a signal, the app
        exiting): a blocking call in flight is then given up, not waited for (nexus/abandon.py)."""
        worker = get_current_worker()
        return lambda: worker.is_cancelled or self._leaving

    def ui(self, fn, *args) -> None:
        """(worker thread) ``call_from_thread`` unless the app is shutting down."""
        if not self.is_running:
            return
        try:
            self.call_from_thread(fn, *args)
        except RuntimeError:  # the app stopped meanwhile
            pass

    def show_progress(self, task: str, text: str) -> None:
        """One line per long task in the chat pane, updated in place."""
        line = self._progress.get(task)
        if line is not None and line.is_attached:
            line.say(text)
            return
        line = self._progress[task] = Notice(text)
        self.query_one("#chat").mount(line)

    def end_progress(self, task: str, text: str, level: str = "info", in_chat: bool = True,
                     in_log: bool = True) -> None:
        line = self._progress.pop(task, None)
        if line is not None and line.is_attached:
            line.remove()
        if in_chat:
            self.chat_notice(text, level)
        if in_log:
            self.log_line(text, level)

    def busy_with_long_command(self) -> str | None:
        """The long command running (/load, /ingest, /reorganize), if any: sessions do not
        switch under it."""
        for w in list(self.workers):
            if w.group in ("load", "ingest", "memory") and not w.is_finished:
                return LONG_COMMANDS.get(w.name) or {"load": "/load", "ingest": "/ingest",
                                                     "memory": "a memory task"}[w.group]
        return None

    def refused_while_busy(self) -> bool:
        """Say so and return True when a long command runs (it must finish or be cancelled first)."""
        busy = self.busy_with_long_command()
        if busy:
            self.chat_notice(f"{busy} is running: wait for it or press {self.key_name('cancel')} to cancel it, then try again.", "warning")
        return busy is not None

    def idle_consolidate(self) -> None:
        s = self.session
        idle = self.config.section("memory").idle_reorganize_seconds
        if s is None or idle <= 0 or not s.tree or not s.tree.exchanges or s.read_only:
            return
        if time.monotonic() - s.last_activity < idle or self._last_idle_run >= s.last_activity:
            return
        if any(w.group in ("reply", "memory", "ingest", "scenario", "load") and w.is_running for w in self.workers):
            return
        self.cancel_long.clear()  # an Esc from an earlier command does not stop this one
        self._last_idle_run = time.monotonic()
        self.log_line("idle: reorganising memory in the background")
        self.reorganize_worker(None, None)

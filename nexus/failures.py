"""Failed workers, reported in one place.

Workers do not catch their own errors: they are ``background`` thread workers
(``exit_on_error=False``) and a failure ends in ``Failures.on_worker_state_changed``, which
writes the traceback to the file log and tells the user, in words, what failed and why.
A worker that knows better words, or must hand the failure to its flow (a reply's turn),
raises ``TaskFailed`` from the cause.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from textual import work
from textual.worker import Worker, WorkerState

log = logging.getLogger("nexus")


def background(*, group: str, exclusive: bool = False, description: str | None = None):
    """A thread worker whose failure the app reports (never exits the app)."""
    return work(thread=True, group=group, exclusive=exclusive, description=description, exit_on_error=False)


class Foreseen(Exception):
    """A failure that its message says in full (a model server that does not answer): the
    log gets that line, its traceback only at debug (four chained tracebacks for "no server
    answers" read as a crash: a trial)."""


class TaskFailed(Exception):
    """A worker's failure in the user's words (``raise TaskFailed(...) from cause``);
    ``subject``: what the worker was working on, for a hook that needs it."""

    def __init__(self, words: str = "", level: str = "", subject: object = None) -> None:
        super().__init__(words)
        self.words = words
        self.level = level
        self.subject = subject


@dataclass(frozen=True)
class Failure:
    """How a worker's failure reads: "<words>: <why><end>" at ``level``; ``task``: the long
    task whose progress line it ends; ``in_chat``: False keeps it to the log pane."""

    words: str
    level: str = "error"
    end: str = ""
    task: str = ""
    in_chat: bool = True
    refresh_tree: bool = False


FAILURES: dict[str, Failure] = {  # by worker name (the worker method's name)
    "open_session": Failure("Cannot open the session"),
    "rename_worker": Failure("Not renamed"),
    "repair_worker": Failure("Not repaired", "warning"),
    "model_check_worker": Failure("Cannot check the model", "warning"),
    "restart_local_model": Failure("The bundled model could not start again"),
    "search_worker": Failure("/search failed"),
    "reorganize_worker": Failure("Reorganisation failed", task="reorganize"),
    "undo_worker": Failure("Nothing undone", "warning", end="."),
    "undo_retry_worker": Failure("Nothing put back", "warning", end="."),
    "ingest_worker": Failure("/ingest failed", task="ingest", refresh_tree=True),
    "load_worker": Failure("Cannot load the file", task="load"),
    "check_worker": Failure("/check failed"),
    "model_worker": Failure("Cannot list models", task="models", end="."),
    "models_cache_worker": Failure("model list for completion", "debug", in_chat=False),
    "store_again_worker": Failure("Not stored", end=". Kept — press {resend} to try again."),
    "probe_server": Failure("model server probe failed", "warning", in_chat=False),
    "server_wait_worker": Failure("Waiting for the model server failed: {resend} sends the waiting messages", "warning"),
    # the panes' workers (ReportsFailures forwards them here)
    "_snapshot_worker": Failure("the tree pane was not updated", in_chat=False),
    "_load": Failure("the inspector could not read that node", in_chat=False),
    "_warm_worker": Failure("the inspector's topic vectors were not prepared", "warning", in_chat=False),
}
ANY = Failure("A background task failed")


def reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:  # "[Errno 36] …: '<300 characters>'" in words
        from .paths import os_problem

        return os_problem(exc)
    return str(exc) or type(exc).__name__


class ReportsFailures:
    """For a widget with workers of its own: their failures go to the app's one place
    (a worker's state messages go to the node that started it, not further)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self.app.worker_failed(event.worker.name, event.worker.error)


class Failures:
    """NexusApp's one place for failed workers."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR:
            self.worker_failed(event.worker.name, event.worker.error)

    def worker_failed(self, name: str, exc: BaseException | None) -> None:
        how = FAILURES.get(name, ANY)
        words, level, cause = how.words, how.level, exc
        from trace_core.errors import ReadOnlySessionError

        if isinstance(exc, ReadOnlySessionError):  # a read-only window, not a failure (said as an error, a trial)
            level = "warning"
        if isinstance(exc, TaskFailed):
            words, level, cause = exc.words or words, exc.level or level, exc.__cause__
        end = how.end.replace("{resend}", self.resend_key())  # the key [keys] gave it
        words = words.replace("{resend}", self.resend_key())
        text = f"{words}: {reason(cause)}{end}" if cause is not None else f"{words}{end}"
        if isinstance(exc, (TaskFailed, Foreseen)):  # foreseen, and said in words: the traceback only at debug
            if level == "warning":  # a refusal ("Nothing undone: …"), which the log called a failure (a trial)
                log.warning("%s (%s)", text, name)
            else:
                log.error("worker %s failed: %s", name, text)
            log.debug("worker %s failed", name, exc_info=cause or exc)
        else:
            log.error("worker %s failed", name, exc_info=cause or exc)
        hook = getattr(self, f"{name}_failed", None)  # a flow of its own (the reply's turn)
        if hook is not None:
            hook(text, exc)
        elif how.task:
            self.end_progress(how.task, text, level)
        elif how.in_chat:
            self.chat_notice(text, level)
            self.log_line(text, level)
        else:
            self.log_line(text, level)
        if how.refresh_tree:
            self.refresh_tree()

"""The five TRACE stress scenarios, run inside Nexus (/scenario).

A scenario runs in a scratch session — a session file in a temporary folder, never
the user's — in a worker thread. The tree pane shows the scratch tree growing (a
snapshot at most every ``refresh_seconds``), the log shows each judge decision, and
the verdict with what the scenario checked goes to the chat. Esc cancels between two
exchanges. The user's session stays open and untouched throughout; the pane shows it
again when the scenario ends.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

from textual.css.query import NoMatches

from trace_core import CTree
from trace_core import events as tev
from trace_core import scenarios as S

from .text import counted
from .treeinfo import reorganize_lines
from .treesnap import TreeSnapshot, take_snapshot

JUDGES = ("embedding", "auto", "llm")

# what each scenario checks, in the user's words
WHAT = {
    "needle": "200 exchanges; a shellfish allergy stated in #9 (the 10th); asked for a seafood main course, "
              "the allergy must reach the prompt.",
    "overwrite": "Sarah's peanut allergy, 12 unrelated exchanges, then 'the test came back negative'; asked "
                 "about a peanut cookie, the newer fact must be marked [current] and the older [superseded].",
    "drift": "'python' the snake and Python the language in separate branches; a reorganisation at threshold "
             "0.55 must keep them apart (by the cosine, or by the judge's veto of a pair that reaches it).",
    "theseus": "Eleanor the 1967 Mustang, one exchange in every five among filler; after a reorganisation "
               f"(threshold {S.THESEUS_THRESHOLD}) her branches must share one parent that is about her.",
    "multihop": "allergy, party and cake recipe in separate topics; 'peanut butter cake for Sarah's party?' "
                "must recall all three and none of Tokyo or the bike.",
}


class ScenarioCancelled(Exception):
    """Esc: the scenario stops before its next exchange."""


class CancellableTree(CTree):
    """A scratch tree that stops at the next ``add()`` once cancelled, or between two
    merge checks of its reorganisation (each may ask the memory model for seconds), and
    keeps the result of its reorganisation for the log."""

    should_stop: Callable[[], bool] = staticmethod(lambda: False)
    last_reorganize: dict | None = None

    def add(self, messages, timestamp=None):
        if self.should_stop():
            raise ScenarioCancelled()
        return super().add(messages, timestamp)

    def reorganize(self, *args, **kwargs) -> dict:
        if self.should_stop():
            raise ScenarioCancelled()
        kwargs.setdefault("should_stop", self.should_stop)
        self.last_reorganize = super().reorganize(*args, **kwargs)
        if self.last_reorganize.get("cancelled"):  # half a reorganisation proves nothing
            raise ScenarioCancelled()
        return self.last_reorganize


@dataclass(frozen=True)
class ScenarioOutcome:
    name: str
    judge: str
    passed: bool | None  # None: cancelled or failed to run
    detail: str
    exchanges: int
    seconds: float
    cancelled: bool = False
    error: str = ""
    when: str = ""
    kept: str = ""  # the session file the scratch tree was kept as (``--keep``)

    def summary(self) -> str:
        if self.cancelled:
            text = f"{self.name}: cancelled after {counted(self.exchanges, 'exchange')} ({self.seconds:.1f} s)."
        elif self.error:
            return f"{self.name}: could not run: {self.error}"
        else:
            text = (f"{'PASS' if self.passed else 'FAIL'}  {self.name} ({self.judge} judge, {self.exchanges} "
                    f"exchanges, {self.seconds:.1f} s): {self.detail}\nChecked: {WHAT[self.name]}")
        if self.kept:
            text += f"\nIts tree is kept as the session {Path(self.kept).stem}: /open {Path(self.kept).stem} to inspect it."
        return text


def keep_session(scratch: CTree, dest: Path) -> None:
    """Copy a scratch session into ``dest`` with SQLite's online backup (a consistent copy
    whatever its journal holds), written under a temporary name and renamed, 0600."""
    part = dest.with_name(dest.name + ".part")
    src = sqlite3.connect(f"file:{scratch.vdb.path}?mode=ro", uri=True)
    try:
        out = sqlite3.connect(part)
        try:
            src.backup(out)
        finally:
            out.close()
        os.chmod(part, 0o600)
        part.replace(dest)
    finally:
        src.close()
        part.unlink(missing_ok=True)  # a failed copy leaves no half file behind


SCRATCH_PREFIX = "nexus-scenario-"


def sweep_scratch(root: str | None = None, grace: float = 60.0) -> list[Path]:
    """Remove the scratch folders of scenarios that no process runs any more (a terminal
    closed mid-run ends Nexus before its clean-up): ours, with no session lock held in
    them, and older than ``grace`` seconds when they hold no lock file at all. Returns
    the folders removed."""
    import shutil

    from trace_core.locking import LockBusy, WriterLock

    gone = []
    for folder in Path(root or tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"):
        try:
            st = folder.stat()
            if not folder.is_dir() or st.st_uid != os.getuid():
                continue
            locks = list(folder.glob("*.lock"))
            if not locks and time.time() - st.st_mtime < grace:
                continue  # being made: its session is not open yet
            held = []
            try:
                for lock_path in locks:
                    lock = WriterLock(str(lock_path))
                    lock.acquire()  # LockBusy: a live scenario
                    held.append(lock)
            except LockBusy:
                continue
            finally:
                for lock in held:
                    lock.release()
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
        except OSError:
            continue
    return gone


def ended() -> str:
    """When a run ended, as the listing shows it (it showed when the run started)."""
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def run_scenario(name: str, judge: str = "embedding", *, embed_fn=None, base_url: str | None = None,
                 api_key: str | None = None, model: str | None = None, cancel: threading.Event | None = None,
                 on_start: Callable[[CTree], None] | None = None,
                 on_event: Callable[[str, str], None] | None = None,
                 on_snapshot: Callable[[CTree, TreeSnapshot], None] | None = None,
                 refresh_seconds: float = 0.3, keep_as: Path | None = None,
                 should_stop: Callable[[], bool] | None = None) -> ScenarioOutcome:
    """Run one scenario in a scratch session file in a temporary folder (deleted after;
    with ``keep_as``, a copy of it is kept there once the run ends, to open and inspect).
    Callbacks run in this thread: ``on_event(text, level)`` for the log, ``on_snapshot``
    at most every ``refresh_seconds`` and once at the end. ``cancel`` (Esc) or
    ``should_stop()`` (the app closing) stop it at its next step."""
    if name not in S.SCENARIOS:
        raise ValueError(f"no scenario {name!r}; the five are {', '.join(S.SCENARIOS)}")
    sweep_scratch()
    cancel = cancel or threading.Event()
    emit = on_event or (lambda text, level: None)
    total = S.exchange_count(name)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as tmp:
        kwargs = dict(judge=judge, base_url=base_url, api_key=api_key, embed_fn=embed_fn, llm_timeout=60)
        if model:
            kwargs["model"] = model
        tree = CancellableTree.open(str(Path(tmp) / f"{name}.db"), **kwargs)
        tree.should_stop = lambda: cancel.is_set() or (should_stop is not None and should_stop())
        last = [0.0]

        def snapshot(force: bool = False) -> None:
            now = time.perf_counter()
            if on_snapshot is not None and (force or now - last[0] >= refresh_seconds):
                last[0] = now
                on_snapshot(tree, take_snapshot(tree))

        def judged(e: tev.JudgeDecided) -> None:
            # "#13" as the kept session and the tree number it; "14/18" how far the run is
            emit(f"scenario {name} #{e.exchange_index} ({e.exchange_index + 1}/{total}): judge {e.judge}: "
                 f"{e.action} → {e.topic} "
                 f"({e.reason})", "info")
            snapshot()

        def llm_failed(e: tev.LLMFailed) -> None:
            emit(f"scenario {name}: memory model failed at {e.task}: {e.problem}; the embedding judge decided",
                 "warning")

        def reorganized(e: tev.ReorganizeFinished) -> None:
            emit(f"scenario {name}: reorganised: {e.merged} merged, {e.skipped} skipped", "info")

        handlers = {tev.JudgeDecided: judged, tev.LLMFailed: llm_failed, tev.ReorganizeFinished: reorganized}
        tree.on_event(lambda e: handlers[type(e)](e) if type(e) in handlers else None)  # one handler per kind
        try:
            if on_start is not None:
                on_start(tree)
            try:
                verdict = S.SCENARIOS[name](tree)
            except ScenarioCancelled:
                snapshot(force=True)
                outcome = ScenarioOutcome(name, judge, None, "", len(tree.exchange_view()),
                                          time.perf_counter() - started, cancelled=True, when=ended())
            except Exception as exc:  # a scenario that cannot run is reported, never raised into the UI
                return ScenarioOutcome(name, judge, None, "", len(tree.exchange_view()), time.perf_counter() - started,
                                       error=f"{type(exc).__name__}: {exc}", when=ended())
            else:
                if tree.last_reorganize:
                    for text, level in reorganize_lines(tree.last_reorganize):
                        emit(f"scenario {name}: {text}", level)
                snapshot(force=True)
                outcome = ScenarioOutcome(name, judge, bool(verdict.passed), verdict.detail, len(tree.exchange_view()),
                                          time.perf_counter() - started, when=ended())
            if keep_as is not None:
                if outcome.cancelled:  # a part of a run: its name says so in /sessions and /open (trial)
                    keep_as = keep_as.with_name(f"{keep_as.stem}-cancelled{keep_as.suffix}")
                try:
                    keep_session(tree, keep_as)
                except (OSError, sqlite3.Error) as exc:  # the verdict stands; say why there is no copy
                    emit(f"scenario {name}: could not keep its session as {keep_as}: {exc}", "error")
                else:
                    outcome = replace(outcome, kept=str(keep_as))
            return outcome
        finally:
            if tree.vdb is not None:
                tree.vdb.close()


# --- last verdicts --------------------------------------------------------------------------


def verdicts_path() -> Path:
    from .config import data_dir

    return data_dir() / "scenario-verdicts.json"


def load_verdicts(path: Path | None = None) -> dict[str, dict]:
    try:
        data = json.loads((path or verdicts_path()).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_verdict(outcome: ScenarioOutcome, path: Path | None = None) -> None:
    """Remember a run for the listing. A cancelled or failed run is listed until there is
    a verdict; it never takes a verdict's place."""
    path = path or verdicts_path()
    data = load_verdicts(path)
    if outcome.passed is None and (data.get(outcome.name) or {}).get("passed") is not None:
        return
    data[outcome.name] = asdict(outcome)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the data dir's files are private
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data, indent=1))
    tmp.replace(path)


def listing_title(cancel: str = "Esc") -> str:
    return ("Scenarios (/scenario NAME [--judge embedding|auto|llm] [--keep]; --keep keeps its tree as a "
            f"session to /open; {cancel} cancels a run):")


LISTING_TITLE = listing_title()


def listing_rows(verdicts: dict[str, dict]) -> list[tuple[str, str]]:
    """Two rows a scenario: (name, its last run) and ("", what it checks)."""
    rows = []
    for name in S.SCENARIOS:
        v = verdicts.get(name)
        if v is None:
            last = "not run yet"
        elif v.get("passed") is None:  # only cancelled or failed runs so far
            last = (f"no verdict yet: cancelled after {counted(v['exchanges'], 'exchange')} "
                    f"({v['judge']} judge, {v['when']})"
                    if v.get("cancelled")
                    else f"no verdict yet: could not run ({v['when']}): {v.get('error', '')}")
        else:
            last = f"{'PASS' if v['passed'] else 'FAIL'} ({v['judge']} judge, {v['when']}): {v['detail']}"
        rows += [(name, last), ("", f"checks: {WHAT[name]}")]
    return rows


def listing(verdicts: dict[str, dict], cancel: str = "Esc") -> str:
    return "\n".join([listing_title(cancel)] + [f"  {left:<10} {right}" for left, right in listing_rows(verdicts)])


# --- the app side ---------------------------------------------------------------------------


class ScenarioController:
    """/scenario in the app: parses the command, runs the scenario in a worker, routes
    its events to the log and its snapshots to the tree pane, cancels on Esc."""

    def __init__(self, app) -> None:
        self.app = app
        self.cancel_event: threading.Event | None = None
        self.name: str | None = None
        self.judge = "embedding"
        self.outcome: ScenarioOutcome | None = None  # the last run's

    @property
    def running(self) -> bool:
        return self.name is not None

    def command(self, args: list[str]) -> None:
        from .commands import BY_NAME, NotNow, UsageError, flag_value

        usage = BY_NAME["scenario"].usage
        args = list(args)
        judge = flag_value(args, "--judge", str, usage) or "embedding"
        keep = "--keep" in args
        args = [a for a in args if a != "--keep"]
        if not args:
            from .widgets import two_columns

            verdicts = load_verdicts()  # drawn in two columns: a long line wraps under its own text
            esc = self.app.key_name("cancel")
            self.app.chat_notice(listing(verdicts, esc), body=two_columns([(listing_title(esc), listing_rows(verdicts))]))
            return
        if judge not in JUDGES:
            raise UsageError(f"{usage} — {judge!r} is no judge: {', '.join(JUDGES)}")
        if len(args) != 1:
            raise UsageError(usage)
        name = args[0].lower()
        if name not in S.SCENARIOS:
            raise UsageError(f"{usage} — the scenarios are {', '.join(S.SCENARIOS)}")
        if self.running:
            if self.cancel_event is not None and self.cancel_event.is_set():
                raise NotNow(f"The {self.name} scenario is stopping after its current step: run this when it has.")
            raise NotNow(f"The {self.name} scenario is still running ({self.app.key_name('cancel')} cancels it): run this when it has ended.")
        self.start(name, judge, keep)

    def start(self, name: str, judge: str, keep: bool = False) -> None:
        from functools import partial

        from .sessions import new_session_path

        app = self.app
        cfg = app.config
        session = app.session
        embed_fn = session.tree.embed_fn if session is not None and session.tree is not None else app.embed_fn
        self.name = name
        self.judge = judge
        self.cancel_event = threading.Event()
        app.chat_notice(f"Running the {name} scenario ({judge} judge) in a scratch session; the tree pane shows "
                        f"it growing, the log its judge decisions. {app.key_name('cancel')} cancels it.")
        job = partial(run_scenario, name, judge, embed_fn=embed_fn, base_url=cfg.base_url, api_key=cfg.api_key,
                      model=cfg.memory_model or cfg.chat_model or None, cancel=self.cancel_event,
                      on_start=self._on_start, on_event=self._on_event, on_snapshot=self._on_snapshot,
                      keep_as=new_session_path(f"scenario-{name}") if keep else None)
        app.run_worker(partial(self._work, job), thread=True, group="scenario", name=f"scenario {name}",
                       description=f"scenario {name}")

    # these run in the worker thread
    def _work(self, job) -> None:
        from textual.worker import get_current_worker

        from .abandon import Abandoned, call_abandonable

        worker = get_current_worker()
        try:
            # quitting gives it up at once: the app's exit waits for this thread, and a step
            # waiting for the LLM judge held a blank terminal until the 15 s exit guard (trial);
            # the scratch tree is swept at the next run
            outcome = call_abandonable(lambda: job(should_stop=lambda: worker.is_cancelled or self.app.leaving),
                                       give_up=lambda: self.app.leaving, name=f"scenario {self.name}")
        except Abandoned:
            return
        except Exception as exc:
            outcome = ScenarioOutcome(self.name or "?", "?", None, "", 0, 0.0, error=str(exc))
        self._call(self._finish, outcome)

    def _call(self, fn, *args) -> None:
        try:
            self.app.call_from_thread(fn, *args)
        except (RuntimeError, NoMatches):  # the app is closing (its panes are gone)
            pass

    def _on_start(self, tree) -> None:
        self._call(self._show_start, tree, self.name or "")

    def _on_event(self, text: str, level: str) -> None:
        self._call(self.app.log_line, text, level)

    def _on_snapshot(self, tree, snap) -> None:
        self._call(self._show_snapshot, tree, snap)

    # these run on the UI thread (the pane is looked up there, never from the worker)
    def _show_start(self, tree, name: str) -> None:
        self._pane().show_scenario(tree, name)

    def _show_snapshot(self, tree, snap) -> None:
        self._pane().apply_if_current(tree, snap)

    def _pane(self):
        from .treepane import MemoryTree

        return self.app.query_one(MemoryTree)

    def _finish(self, outcome: ScenarioOutcome) -> None:
        self.name = None
        self.cancel_event = None
        self.outcome = outcome
        self._pane().end_scenario()
        level = "info" if outcome.passed else ("warning" if outcome.cancelled else "error")
        save_verdict(outcome)
        self.app.chat_notice(outcome.summary() + "\nYour session is back in the tree pane.", level)
        self.app.log_line("scenario " + outcome.summary().splitlines()[0], level)  # the summary names it

    def cancel(self) -> bool:
        """Esc: True when a running scenario was asked to stop."""
        if self.cancel_event is None or self.cancel_event.is_set():
            return False
        self.cancel_event.set()
        self.app.log_line(f"scenario {self.name}: cancelling after the current step", "warning")
        wait = " (a step waits for its model call: up to a minute with the LLM judge)" if self.judge != "embedding" else ""
        self.app.chat_notice(f"Cancelling the {self.name} scenario after its current step (an exchange, or one "
                             f"merge check of its reorganisation){wait}…")
        return True

"""The input's unsent text, kept across restarts: what is typed but not sent when Nexus
closes (Ctrl+Q, a closed terminal, a crash after a pause) is in the input again when it
starts. One file (0600) in the user data dir, like the prompt history: the input belongs
to the app, not to a session, and the file is readable before any session has opened.

Two windows open at once do not share it: the first holds ``draft.txt`` (the writer lock
of ``trace_core.locking`` on ``draft.txt.lock``, as sessions have, for its lifetime); a later one keeps its own ``draft-PID.txt`` and
starts with an empty input. Whichever window next takes ``draft.txt`` adopts the drafts of
windows that have closed, so neither window's unsent text overwrites the other's."""

from __future__ import annotations

import os
from pathlib import Path

from trace_core.locking import LockBusy, WriterLock

from .config import data_dir

DRAFT_FILE = "draft.txt"
SAVE_DELAY = 1.0  # seconds after the last keystroke: a crash loses at most this much typing


def draft_path() -> Path:
    return data_dir() / DRAFT_FILE


class DraftStore:
    """``load``/``save`` the draft; an empty draft removes the file. Writes go through a
    temporary file and a rename, so a crash mid-write leaves the previous draft whole."""

    def __init__(self, path: Path | None = None) -> None:
        self.home = Path(path) if path is not None else draft_path()
        self.path = self.home  # this window's draft: ``home``, or draft-PID.txt beside another window
        self._saved: str | None = None  # what the file holds, once known: unchanged text is not written again
        self._lock: WriterLock | None = None  # held while this window lives; the OS drops it at any exit

    def load(self) -> str:
        """This window's draft at start: ``draft.txt`` and the drafts of closed windows
        (joined by a blank line) for the first window, an empty input for a later one."""
        if self._lock is None and not self._claim(self.home):
            self.path = self.home.with_name(f"{self.home.stem}-{os.getpid()}{self.home.suffix}")
            self._claim(self.path)
            self._saved = ""
            return ""
        text = _read(self.path)
        self._saved = text
        orphans = self._orphans()  # their locks are held until their files are gone
        try:
            if orphans:
                merged = "\n\n".join(t for t in [text.strip("\n"), *(_read(d) for d, _ in orphans)] if t.strip())
                if self.save(merged):  # kept here first, then the closed windows' files go
                    for draft, _ in orphans:
                        draft.unlink(missing_ok=True)
                    text = merged
        finally:
            for _, lock in orphans:
                lock.release()
        return text if text.strip() else ""

    def _claim(self, path: Path) -> bool:
        """Hold ``path``'s writer lock for this window; False when another window holds it."""
        lock = _free_lock(path)
        self._lock = lock or None
        return lock is not False

    def _orphans(self) -> list[tuple[Path, WriterLock]]:
        """The drafts other windows left when they closed (nobody holds them), oldest first."""
        drafts = []
        for draft in self.home.parent.glob(f"{self.home.stem}-*{self.home.suffix}"):
            try:
                drafts.append((draft.stat().st_mtime, draft))
            except OSError:
                continue
        found = []
        for _, draft in sorted(drafts):
            lock = _free_lock(draft)
            if lock:  # False: that window is still open; None: the dir cannot be written
                found.append((draft, lock))
        return found

    def close(self) -> None:
        """Let the draft go (the OS does the same when the process ends, however it ends)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def save(self, text: str) -> bool:
        """Keep ``text`` (empty: forget the draft). False when the data dir cannot be written."""
        if not text.strip():
            text = ""
        if text == self._saved:
            return True
        try:
            if not text:
                self.path.unlink(missing_ok=True)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_name(self.path.name + ".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, self.path)
        except OSError:
            return False
        self._saved = text
        return True


def _free_lock(path: Path) -> WriterLock | bool | None:
    """``path``'s writer lock, acquired; False when another window holds it; None when the
    data dir cannot be written (then saving says so later)."""
    lock = WriterLock(str(path.with_name(path.name + ".lock")))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except LockBusy:
        return False
    except OSError:
        return None
    return lock


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # none yet, or unreadable: start with an empty input
        return ""


class Drafts:
    """NexusApp's draft: restored at start, saved a moment after each change and on every
    way out (``leave``, the signal handler, unmount)."""

    def restore_draft(self) -> None:
        """(on mount, after the type-ahead) The draft goes back in the input; when the user
        has already typed something else there, it waits one ↑ away instead."""
        if self._leaving:  # a quit before it ran: save_draft kept the saved draft with the new text
            return
        self._draft_restored = True
        text = self.drafts.load()
        if not text:
            return
        prompt = self.query_one("#prompt")
        if not prompt.text.strip():
            prompt.value = text
            # said: typed into at once, unseen, it began the next message (a trial)
            self.chat_notice("The text you had not sent when Nexus last closed is back in the input.")
        elif prompt.text != text:
            prompt.prompts.add(text)
            self.chat_notice("The text you had not sent when Nexus last closed is one ↑ away.")

    def on_text_area_changed(self, event) -> None:
        if getattr(event.text_area, "id", None) != "prompt":
            return
        if self._draft_timer is not None:
            self._draft_timer.stop()
            self._draft_timer = None
        if not event.text_area.text.strip():  # sent (or cleared): forget it now, not a moment later
            self.save_draft()
        else:
            self._draft_timer = self.set_timer(SAVE_DELAY, self.save_draft)

    def save_draft(self) -> None:
        from textual.css.query import NoMatches

        try:
            text = self.query_one("#prompt").draft
        except NoMatches:  # the widgets are gone (unmounting): the last save stands
            return
        if not self._draft_restored:  # a way out before the saved draft was put back: it stays,
            # with what was typed before it (the empty input was saved over it: a trial)
            if self._draft_before is None:  # read once: later saves join it to the input again, not to themselves
                self._draft_before = self.drafts.load()
            old = self._draft_before
            if old.strip() and old.strip() != text.strip():
                text = f"{old.rstrip()}\n\n{text}" if text.strip() else old
        if not self.drafts.save(text) and not self._draft_warned:
            self._draft_warned = True
            self.log_line(f"the unsent text could not be kept in {self.drafts.path}", "warning")

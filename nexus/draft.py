"""The input's unsent text, kept across restarts: what is typed but not sent when Nexus
closes (Ctrl+Q, a closed terminal, a crash after a pause) is in the input again when it
starts. One file (0600) in the user data dir, like the prompt history: the input belongs
to the app, not to a session, and the file is readable before any session has opened."""

from __future__ import annotations

import os
from pathlib import Path

from .config import data_dir

DRAFT_FILE = "draft.txt"
SAVE_DELAY = 1.0  # seconds after the last keystroke: a crash loses at most this much typing


def draft_path() -> Path:
    return data_dir() / DRAFT_FILE


class DraftStore:
    """``load``/``save`` the draft; an empty draft removes the file. Writes go through a
    temporary file and a rename, so a crash mid-write leaves the previous draft whole."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else draft_path()
        self._saved: str | None = None  # what the file holds, once known: unchanged text is not written again

    def load(self) -> str:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # none yet, or unreadable: start with an empty input
            text = ""
        self._saved = text
        return text if text.strip() else ""

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


class Drafts:
    """NexusApp's draft: restored at start, saved a moment after each change and on every
    way out (``leave``, the signal handler, unmount)."""

    def restore_draft(self) -> None:
        """(on mount, after the type-ahead) The draft goes back in the input; when the user
        has already typed something else there, it waits one ↑ away instead."""
        text = self.drafts.load()
        if not text:
            return
        prompt = self.query_one("#prompt")
        if not prompt.text.strip():
            prompt.value = text
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
        if not self.drafts.save(text) and not self._draft_warned:
            self._draft_warned = True
            self.log_line(f"the unsent text could not be kept in {self.drafts.path}", "warning")

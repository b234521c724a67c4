"""Earlier prompts, recalled with ↑/↓ and kept across restarts (one JSON line each,
0600, in the user data dir)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from .config import data_dir

LIMIT = 1000
# a longer prompt (a pasted document) is recalled in this run but not written: the file
# would grow by its size each time, and it is in the session if it was sent
MAX_STORED_CHARS = 20_000


def history_path() -> Path:
    return data_dir() / "prompt-history.jsonl"


class PromptHistory:
    """The prompts, oldest first; ``previous``/``following`` walk them from a draft."""

    def __init__(self, path: Path | None = None, limit: int = LIMIT) -> None:
        self.path = Path(path) if path is not None else history_path()
        self.limit = limit
        self.items: list[str] = self._read()
        self._pos: int | None = None  # index into items while walking; None: at the draft
        self._draft = ""

    def _read(self) -> list[str]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            try:
                text = json.loads(line)
            except ValueError:
                continue  # a torn last line after a crash: skip it, keep the rest
            if isinstance(text, str) and text:
                out.append(text)
        return out[-self.limit:]

    def add(self, text: str) -> None:
        self._pos = None
        if not text.strip() or (self.items and self.items[-1] == text):
            return
        if text.lstrip().startswith("/forget"):  # it names what is to go: typed again, it came back (a trial)
            return
        self.items.append(text)
        if len(text) > MAX_STORED_CHARS:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if len(self.items) > self.limit * 2:  # rewrite now and then, append otherwise
                self.items = self.items[-self.limit:]
                body = "".join(json.dumps(t) + "\n" for t in self.items if len(t) <= MAX_STORED_CHARS)
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            else:
                body = json.dumps(text) + "\n"
                if self._torn():  # a crash cut the last line: start a fresh one
                    body = "\n" + body
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(body)
        except OSError:
            pass  # history is a convenience: a read-only data dir must not stop a message

    def forget(self, gone: Callable[[str], bool]) -> None:
        """The prompts ``gone`` says, recalled no more and gone from the file (read again
        first: another Nexus may have added to it; written beside it and renamed over it)."""

        def kept(t: str) -> bool:
            return not gone(t)

        self.items = [t for t in self.items if kept(t)]
        self._pos = None
        try:
            left = [t for t in self._read() if kept(t)]
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join(json.dumps(t) + "\n" for t in left))
            os.replace(tmp, self.path)
        except OSError:
            pass  # no file (or a read-only data dir): nothing recalled after a restart either way

    def _torn(self) -> bool:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                if fh.tell() == 0:
                    return False
                fh.seek(-1, os.SEEK_END)
                return fh.read(1) != b"\n"
        except OSError:
            return False

    def _edited(self, shown: str) -> None:
        """A recalled prompt the user has changed is their draft now: the walk starts
        again from it (↓ had thrown the new text away, for the draft before ↑: a trial)."""
        if self._pos is not None and self._pos < len(self.items) and self.items[self._pos] != shown:
            if self._draft.strip() and self._draft not in self.items:  # the draft before ↑: ↑ finds it
                self.items.append(self._draft)  # (in this run: it was never sent)
            self._pos = None
            self._draft = shown

    def previous(self, draft: str) -> str | None:
        """The prompt before the current one (None at the oldest); ``draft`` is the input's text."""
        if not self.items:
            return None
        self._edited(draft)
        if self._pos is None:
            self._draft = draft
            self._pos = len(self.items)
        if self._pos == 0:
            return None
        self._pos -= 1
        return self.items[self._pos]

    def following(self, shown: str) -> str | None:
        """The next newer prompt, then the draft; None when not walking (``shown``: the
        input's text; changed, it is the draft, and nothing is newer)."""
        self._edited(shown)
        if self._pos is None:
            return None
        self._pos += 1
        if self._pos >= len(self.items):
            self._pos = None
            return self._draft
        return self.items[self._pos]

    def reset(self) -> None:
        self._pos = None

    def unsent(self, shown: str) -> str:
        """What the user has typed and not sent, ``shown`` being the input's text: while ↑
        shows an earlier prompt unchanged, the draft that walk started from."""
        if self._pos is not None and self._pos < len(self.items) and self.items[self._pos] == shown:
            return self._draft
        return shown

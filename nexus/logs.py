"""Nexus's log file: plain text, private, in the log folder, size-bounded.

Model-written text (topic names, replies) reaches the log: escape sequences are made
visible as on screen (``text.log_safe``), so ``cat``-ing the log runs nothing.
"""

from __future__ import annotations

import logging
import os
from logging.handlers import RotatingFileHandler
from pathlib import Path

from .paths import log_dir, private_dir
from .text import log_safe

LOG_NAME = "nexus.log"
MAX_BYTES = 2_000_000  # per file; with BACKUPS rotated files the log stays under 8 MB
BACKUPS = 3
# (trace_core.events: Nexus logs each engine event itself; the file had every one twice)
QUIET = ("httpx", "httpx2", "openai", "httpcore", "trace_core.events")


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return log_safe(super().format(record))


class PrivateRotatingFileHandler(RotatingFileHandler):
    """Each log file (the rotated ones too) is created 0600."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


def log_path() -> Path:
    return log_dir() / LOG_NAME


def setup_file_log(level: int = logging.INFO) -> Path:
    """Send the root logger to the log file (once per process and folder). Returns its path."""
    path = log_path()
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_nexus", False):
            if getattr(h, "baseFilename", None) == os.path.abspath(path):
                return path
            root.removeHandler(h)
            h.close()
    private_dir(path.parent)
    if path.exists() and path.stat().st_mode & 0o077:
        path.chmod(0o600)  # a log written by an older Nexus
    handler = PrivateRotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8",
                                         errors="backslashreplace")
    handler._nexus = True  # type: ignore[attr-defined]
    handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in QUIET:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # the app writes each engine event in its own words: the engine's line of a warning
    # was the same failure a second time (a trial)
    logging.getLogger("trace_core.events").setLevel(logging.ERROR)
    return path

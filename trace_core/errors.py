"""The errors of session files, named where every module can import them."""

from __future__ import annotations

import os
import sqlite3


class SessionFileError(RuntimeError):
    """A session file cannot be used. The message names the file and the problem."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class SessionDamagedError(SessionFileError):
    """The file is a session whose pages or rows are damaged (``repair.salvage`` may
    rebuild what it holds): said so by its type, not by "damaged" in its message, which
    holds the path too (a session named "damaged-notes" was offered a repair it did not need)."""


class SessionLockedError(SessionFileError):
    """Another process (or another open ``VectorDatabase`` in this one) has the session
    open for writing. Nothing was written; open it with ``read_only=True`` to read it."""

    def __init__(self, path: str, pid: int | None = None):
        holder = "another process" if pid is None else (
            "this process" if pid == os.getpid() else f"another process (pid {pid})")
        super().__init__(path, f"is open for writing in {holder}; open it read-only, or use another session")
        self.pid = pid
        self.holder = holder  # for a server's own words: it has no read-only mode to suggest


class SessionNotWritableError(SessionFileError):
    """The file system will not let us write the session (the file or its folder is
    read-only). Nothing was written; open it with ``read_only=True`` to read it."""

    def __init__(self, path: str, why: str):
        super().__init__(path, f"cannot be written ({why}); open it read-only to read it")
        self.why = why


def unwritable_reason(path: str, folder: str) -> str:
    """Why SQLite could not write ``path`` (it also writes -wal, -shm and our lock beside it)."""
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is read-only"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "its folder is read-only"
    return ""


def read_only_uri(path: str) -> str:
    """A read-only SQLite URI. In a folder we cannot write, with no -wal beside the file,
    no writer can be at work (it would need both), so the file is read as immutable:
    SQLite then needs no -shm file it could not create."""
    folder = os.path.dirname(os.path.abspath(path))
    immutable = not os.access(folder, os.W_OK) and not os.path.exists(path + "-wal")
    return f"file:{path}?mode=ro" + ("&immutable=1" if immutable else "")


# SQLite's primary result codes of a file that would not take a write: busy, locked,
# read-only, an I/O error, full, and one it could no longer open (its folder gone or made
# read-only, a journal it could not create). Any other OperationalError ("no such column",
# a syntax error) is a bug in the SQL, to be raised as one, not said as a file that "could
# not be written" (a review).
WRITE_REFUSALS = {
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
}


def refused_write(exc: BaseException) -> bool:
    """``exc`` is SQLite's refusal of a write by the file (not by the SQL): its primary
    result code (``sqlite_errorcode`` holds the extended one) is one of ``WRITE_REFUSALS``."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and isinstance(code, int) and (code & 0xFF) in WRITE_REFUSALS


class SessionWriteError(SessionFileError, sqlite3.OperationalError):
    """The file refused a write (the disk is full, another connection held it past the
    busy timeout): nothing of that change was stored. An ``sqlite3.OperationalError``
    too, for code that caught SQLite's own."""

    def __init__(self, path: str, exc: BaseException):
        super().__init__(path, f"could not be written ({exc}); nothing of this change was stored")
        self.cause = str(exc)  # SQLite's words ("disk I/O error"), for an app's own


class SessionMovedError(SessionWriteError):
    """The session file was renamed, moved or deleted (or another file put in its place)
    by another program while it was open: nothing more is written to it. SQLite keeps its
    write-ahead log beside the name the file was opened under, so writes after a move
    would stay behind, in a log no later open of the moved file reads."""

    def __init__(self, path: str):
        SessionFileError.__init__(self, path, "was renamed, moved or deleted while open (by another program): "
                                  "nothing more is written to it, and nothing of this change was stored")


class ReadOnlySessionError(SessionFileError):
    """A session opened read-only was asked to change."""

    def __init__(self, path: str, action: str = "add an exchange"):
        super().__init__(path, f"is open read-only: cannot {action} (nothing was written)")


class EmbedderMismatchError(RuntimeError):
    pass


class EmbedderError(RuntimeError):
    """The embedding model failed (a server embedder that cannot embed, an unreachable
    one): said with the embedder's name, not as the chat model's failure."""

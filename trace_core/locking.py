"""One writer per session file: an OS lock on a sidecar ``<file>.lock``.

The lock is ``flock`` (``msvcrt.locking`` on Windows) on an open file descriptor, so
the operating system releases it when the holder closes it or dies: there are no
stale locks to clean up. The holder writes its pid into the file so a refused opener
can say who has the session. The lock file is removed when the lock is released.
"""

from __future__ import annotations

import os
import weakref

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt


class LockBusy(Exception):
    """Another open file description holds the lock; ``pid`` is the holder's, if known."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(pid)
        self.pid = pid


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        return False
    return True


def _read_pid(fd: int) -> int | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 32).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


_HELD: weakref.WeakSet[WriterLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    """A forked child must not hold (or, on exit, remove) its parent's lock: close its copies."""
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class WriterLock:
    """``WriterLock(path).acquire()`` or ``LockBusy``; ``release()`` when done."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            if not _try_lock(fd):
                pid = _read_pid(fd)
                os.close(fd)
                raise LockBusy(pid)
            # the previous holder may have removed the file between our open and our
            # lock: then we hold a lock nobody else can see; start again on the new file
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        _HELD.add(self)
        try:  # who holds it, for the message another opener reads; the lock is held either way
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        except OSError:  # a full disk: raised here, the lock stayed held by nobody's object (a trial)
            pass

    def keep(self) -> None:
        """Still hold the lock before a write: a lock file removed (or replaced) while held
        (a clean-up of ``*.lock``) locks nothing another process can see, and a second
        writer opened the session beside us (two exchanges #1, and the file no longer
        opened: a trial). Taken again on a new file when nobody has it; ``LockBusy`` when
        another process does (then this object holds nothing)."""
        fd = self._fd
        if fd is None:
            return
        try:
            if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                return
        except FileNotFoundError:
            pass
        self._fd = None
        _HELD.discard(self)
        try:
            self.acquire()
        finally:
            os.close(fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _HELD.discard(self)
        if fcntl is not None:  # remove while still holding it (see acquire); Windows cannot
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(fd)

    def __del__(self) -> None:  # an unclosed database's lock goes with it
        try:
            self.release()
        except Exception:  # interpreter shutdown: the OS releases the lock anyway
            pass

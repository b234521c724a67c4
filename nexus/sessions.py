"""Where sessions live: one SQLite file each in the user data dir; the last one resumes."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .config import data_dir
from .parked import opening_files, side_files
from .paths import write_problem

if TYPE_CHECKING:
    from trace_core import SessionFileError


def own_data_dir() -> Path:
    """The data folder, 0700 (conversations are private, issue 10.6) — but a folder that
    NEXUS_DATA_DIR names and that was there already is the user's: left as it is (its
    ``sessions`` folder is private)."""
    from .paths import private_dir

    return private_dir(data_dir(), tighten=not os.environ.get("NEXUS_DATA_DIR"))


def sessions_dir() -> Path:
    from .paths import private_dir

    return private_dir(own_data_dir() / "sessions")


def resolve(name_or_path: str | None) -> Path:
    """``--session PATH|NAME``: a path (contains a separator or ends in .db) or a name in
    the sessions folder. None: the last session, or a new one."""
    if name_or_path:
        if os.sep in name_or_path or name_or_path.endswith(".db"):
            return Path(name_or_path).expanduser().resolve()
        own = sessions_dir() / f"{name_or_path}.db"  # a file named outside Nexus ("Reise 2027.db"), as listed
        if own.is_file():
            return own
        safe = re.sub(r"[^\w.-]+", "-", name_or_path).strip("-") or "session"  # as /rename writes it
        return sessions_dir() / f"{safe}.db"
    last = last_session()
    return last if last is not None else new_session_path()


def taken(path: Path) -> bool:
    """A session name in use: its database, or a write-ahead log left at that name (by a
    file moved or deleted while open), which SQLite would read into a new file there."""
    if path.exists():
        return True
    try:
        return Path(f"{path}-wal").stat().st_size > 0
    except OSError:
        return False


def new_session_path(prefix: str = "session") -> Path:
    """A new file in the sessions folder, named ``PREFIX-date-time``."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = sessions_dir() / f"{prefix}-{stamp}.db"
    n = 1
    while taken(path):
        path = sessions_dir() / f"{prefix}-{stamp}-{n}.db"
        n += 1
    return path


def imported_session_path(source: Path) -> Path:
    """A new session for ``/load source``: named after the file ("bread.json" → "bread"),
    with a number after it when that name is taken."""
    safe = re.sub(r"[^\w.-]+", "-", source.stem).strip("-.") or "imported"
    path, n = sessions_dir() / f"{safe}.db", 2
    while taken(path) or any(f.exists() for f in side_files(path)) or Path(f"{path}.importing").exists():
        path, n = sessions_dir() / f"{safe}-{n}.db", n + 1
    return path


def no_session_path() -> Path:
    """Where messages typed while no session could open are parked (``nexus.parked``):
    the next session that opens takes them. Never a session file itself."""
    return data_dir() / "no-session"


def _pointer() -> Path:
    return data_dir() / "last-session"


def remember(path: Path) -> None:
    own_data_dir()
    fd = os.open(_pointer(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a session's name is private too
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(str(path))


def last_session() -> Path | None:
    """The session to resume: the last one opened, or one whose file was not made yet
    because Nexus closed while it opened, with messages waiting for it (``nexus.parked``)."""
    try:
        p = Path(_pointer().read_text().strip())
    except OSError:
        return None
    return p if p.exists() or any(f.exists() for f in side_files(p)) else None


def vanished_last_session() -> Path | None:
    """The session the pointer names when nothing of it is left (renamed or deleted
    outside this Nexus, or a rename cut short): a new one starts, and says why."""
    try:
        text = _pointer().read_text().strip()
    except OSError:
        return None
    p = Path(text)
    if not text or p.exists() or any(f.exists() for f in side_files(p)):
        return None
    return p


def files_of(session: Path) -> list[Path]:
    """The database and SQLite's write-ahead log and shared-memory files beside it."""
    return [session, Path(f"{session}-wal"), Path(f"{session}-shm")]


WAL_MAGIC = (0x377F0682, 0x377F0683)


def database_bytes(session: Path) -> int:
    """The size of ``session``'s database once its -wal is written back into it: the size
    the file has whenever no Nexus has it open, read from the database header and the last
    commit in the -wal (no SQLite connection: nothing is created or locked beside it).

    While a session is open SQLite keeps its recent writes in the -wal (up to ~4 MiB,
    reused, never shrunk) and a 32 KiB -shm index; closing writes them back and removes
    both. Counted as files, the same session measured 156.0 KiB open and 124.0 KiB closed."""
    try:
        with open(session, "rb") as fh:
            head = fh.read(100)
        file_size = session.stat().st_size
    except OSError:
        return 0
    if len(head) < 100 or head[:16] != SQLITE_MAGIC:
        return file_size
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if not page_size:
        return file_size
    pages = int.from_bytes(head[28:32], "big")
    if not pages or head[24:28] != head[92:96]:  # the header's page count is stale: the file's own size
        pages = file_size // page_size
    size = pages * page_size
    if size > file_size and not os.path.exists(f"{session}-wal"):
        return file_size  # cut short (a damaged file): what is there, not what the header promised
    try:
        with open(f"{session}-wal", "rb") as fh:
            wal = fh.read(32)
            if len(wal) < 32 or int.from_bytes(wal[:4], "big") not in WAL_MAGIC:
                return size
            wal_page, salts, offset = int.from_bytes(wal[8:12], "big"), wal[16:24], 32
            while True:  # the frames of the -wal's current generation (its salts); commits say the size
                fh.seek(offset)
                frame = fh.read(24)
                if len(frame) < 24 or frame[8:16] != salts:
                    return size
                if committed := int.from_bytes(frame[4:8], "big"):
                    size = committed * wal_page
                offset += 24 + wal_page
    except OSError:
        return size


def footprint(session: Path) -> tuple[float, int]:
    """``(last write, bytes)`` of a session: its last write over the database and its -wal
    (where a session's recent writes sit between checkpoints); its size over all its files,
    the database counted as it is once closed (``database_bytes``), so that a session
    measures the same open or closed (/sessions and /delete agree). Not the -shm, nor an
    empty -wal: a reader makes those (/search reads every session; all of them then read
    as written a moment ago, in a trial)."""
    mtime = 0.0
    for f in (session, Path(f"{session}-wal")):
        try:
            st = f.stat()
        except OSError:
            continue
        if st.st_size or f == session:
            mtime = max(mtime, st.st_mtime)
    size = database_bytes(session)
    for f in (log_path(session), *side_files(session)):
        try:
            size += f.stat().st_size
        except OSError:
            continue
    return mtime, size


def list_sessions() -> list[tuple[Path, float, int]]:
    """``(path, last write, size)``, newest first (``footprint``: times include the -wal)."""
    out = [(p, *footprint(p)) for p in sessions_dir().glob("*.db")]
    return sorted(out, key=lambda x: -x[1])


def names() -> list[str]:
    """Session names (file stems in the sessions folder), newest first."""
    return [p.stem for p, _, _ in list_sessions()]


def find(name_or_path: str) -> Path | None:
    """An existing session by name (or path), or None."""
    path = resolve(name_or_path)
    return path if path.is_file() else None


def log_path(session: Path) -> Path:
    return session.with_suffix(".log")


SQLITE_MAGIC = b"SQLite format 3\x00"


# the names of a session's files (its database, SQLite's files beside it, its log, lock and
# kept messages): an export never writes one, of any session (``/export`` onto the open
# session's database destroyed it beyond /repair, in a trial)
SESSION_FILE_ENDINGS = (".db", ".db-wal", ".db-shm", ".db-journal", ".log", ".db.lock", ".lock",
                        ".unsent.json", ".unstored.json", ".importing")


def export_refusal(target: Path, session: Path) -> str | None:
    """Why ``/save`` or ``/export`` must not write ``target`` (an export replaces the file
    whole), or None: the open session's files, a session's files in the sessions folder,
    a folder, any SQLite database or write-ahead log."""
    try:
        resolved = target.resolve()
    except OSError as exc:
        return f"{target} cannot be used ({exc})"
    own = [*files_of(session), log_path(session), Path(f"{session}.lock")]
    if resolved in {f.resolve() for f in own} or file_id(resolved) in {file_id(f) for f in own} - {None}:
        return f"{target} is a file of the open session; writing onto it would destroy the session"
    try:
        folder = sessions_dir().resolve()
    except OSError:
        folder = None
    if folder is not None and resolved.parent == folder and resolved.name.endswith(SESSION_FILE_ENDINGS):
        if not resolved.exists():
            return f"{target} has the name of a session's file in Nexus's sessions folder; an export is never written there"
        return f"{target} is a session's file in Nexus's sessions folder; writing onto it would destroy that session"
    if folder is not None and file_id(resolved) in _inodes_of_sessions(folder):
        # a hard link: another name for a session's file (its -shm holds no magic to see)
        return f"{target} is another name (a hard link) for a session's file; writing onto it would destroy that session"
    try:
        if resolved.is_dir():
            return f"{target} is a folder"
        with open(resolved, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return write_problem(target, exc)
    if head == SQLITE_MAGIC:
        return f"{target} is a SQLite database (a session?); an export never overwrites one"
    if len(head) >= 4 and int.from_bytes(head[:4], "big") in WAL_MAGIC:
        return f"{target} is a SQLite write-ahead log (a session's); an export never overwrites one"
    return None


def file_id(path: Path) -> tuple[int, int] | None:
    """The (device, inode) pair naming the file itself, whatever name reaches it (a rename
    keeps it, a new file of the same name has another)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def where_now(session: Path, ident: tuple[int, int] | None) -> Path | None:
    """Where the session file opened as ``ident`` is now: at ``session`` still, under
    another name in its folder (renamed by another Nexus), or None (deleted, or replaced
    by another file of the same name)."""
    if ident is None or file_id(session) == ident:
        return session
    try:
        names = [p for p in session.parent.iterdir() if p.suffix == ".db"]
    except OSError:
        return None
    return next((p for p in names if file_id(p) == ident), None)


def _inodes_of_sessions(folder: Path) -> set[tuple[int, int]]:
    try:
        names = [p for p in folder.iterdir() if p.name.endswith(SESSION_FILE_ENDINGS)]
    except OSError:
        return set()
    return {i for i in map(file_id, names) if i is not None}


def replaced_file(target: Path) -> int | None:
    """The size of the file ``target`` would replace, or None: no file there, or an empty one."""
    try:
        size = target.stat().st_size if target.is_file() else None
    except OSError:
        return None
    return size or None


SAVED_FROM_KEY = "nexus.saved_from"  # a /save's JSON names its session (another's is not replaced unasked)


def export_of(path: Path) -> str | None:
    """The session an earlier ``/export`` at ``path`` was made of ("# Nexus — NAME"), or
    None when the file is no export."""
    from .export import EXPORT_TITLE

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline(1000).rstrip("\n")
    except OSError:
        return None
    head = f"# {EXPORT_TITLE}"
    return first[len(head):] if first.startswith(head) else None


def save_of(path: Path) -> str | None:
    """The session an earlier ``/save`` at ``path`` was made of ("" when it does not say:
    an older one), or None when the file is no saved tree."""
    import json

    if not starts_with(path, b'{\n "format": "trace-ctree"'):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            meta = json.load(fh).get("meta")
    except (OSError, ValueError, AttributeError):
        return ""
    name = meta.get(SAVED_FROM_KEY) if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def starts_with(path: Path, head: bytes) -> bool:
    """``path`` is a readable file whose first bytes are ``head``."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(head)) == head
    except OSError:
        return False


class SessionInUse(RuntimeError):
    """Another process has the session open for writing."""


def _unused(session: Path):
    """Hold the session's writer lock (trace_core.locking) while a file operation runs, so
    a session open in another Nexus is never deleted or renamed under it."""
    try:
        from trace_core.locking import LockBusy, WriterLock
    except ImportError:  # an engine without the writer lock
        return None
    lock = WriterLock(f"{os.path.realpath(session)}.lock")  # the one a writer holds (trace_core.store)
    try:
        lock.acquire()
    except LockBusy as busy:
        who = f" (process {busy.pid})" if busy.pid else ""
        raise SessionInUse(f"{session.stem} is open in another Nexus{who}") from None
    return lock


def in_use_by(session: Path) -> str | None:
    """Why ``session`` cannot be deleted or renamed now (another Nexus writes it), or None."""
    try:
        lock = _unused(session)
    except SessionInUse as exc:
        return str(exc)
    except OSError:
        return None  # said by the operation itself
    if lock is not None:
        lock.release()
    return None


def writer_free(session: Path) -> bool:
    """No process writes ``session`` now (its writer lock is free): a window that opened it
    read-only may open it again to write."""
    try:
        lock = _unused(session)
    except (SessionInUse, OSError):
        return False
    if lock is not None:
        lock.release()
    return True


def open_problem(path: Path, embedder: str | None = None) -> SessionFileError | None:
    """Why ``path`` cannot be opened as a session (not a SQLite file, another program's,
    damaged, a newer schema, built with another ``embedder`` than the one named): the
    ``SessionFileError`` (its words: ``str``); None when it can. The store's own check,
    read-only: no lock taken, nothing written, the tree not read."""
    from trace_core import SessionFileError
    from trace_core.schema import inspect_session_file

    try:
        inspect_session_file(str(path), embedder)
    except SessionFileError as exc:
        return exc
    return None


_DEFAULT_NAME = re.compile(r"session-\d{8}-\d{6}(?:-\d+)?")


def unused_and_empty(session: Path, exchanges: int, kept: int, own_settings: str) -> bool:
    """A session left behind with nothing in it: no exchange, no message kept, none of its
    own settings, nothing beside it, and the name ``/new`` gave it (a name you chose stays)."""
    return (exchanges == 0 and kept == 0 and not own_settings and session.parent == sessions_dir()
            and _DEFAULT_NAME.fullmatch(session.stem) is not None
            and not any(f.exists() for f in side_files(session)))


def delete(session: Path) -> None:
    """Remove a session: its database, -wal, -shm and log files."""
    lock = _unused(session)
    try:
        for f in [*files_of(session), log_path(session), *side_files(session), *opening_files(session)]:
            f.unlink(missing_ok=True)
    finally:
        if lock is not None:
            lock.release()


MAX_NAME_BYTES = 200  # a session's name: "<name>.db.unstored.json.tmp" must fit a file name's 255 bytes


def rename_target(session: Path, new_name: str) -> Path:
    """Where ``rename`` would move ``session``; ``ValueError`` saying why it cannot (checked
    before the open session is closed for it)."""
    safe = re.sub(r"[^\w.-]+", "-", new_name.removesuffix(".db")).strip("-.")
    if not safe:
        raise ValueError(f"{new_name!r} is not usable as a session name")
    size = len(safe.encode())
    if size > MAX_NAME_BYTES:  # its side files add up to 20 bytes to a file name of at most 255
        raise ValueError(f"the name is too long ({size} bytes in UTF-8; at most {MAX_NAME_BYTES})")
    target = session.with_name(f"{safe}.db")
    if target == session:
        raise ValueError(f"it is called {safe} already")
    if target.exists():
        raise ValueError(f"a session named {safe} already exists")
    if taken(target):
        raise ValueError(f"the write-ahead log of an earlier session named {safe} is still there ({safe}.db-wal)")
    return target


def rename(session: Path, new_name: str) -> Path:
    """Rename a closed session (all its files) within its folder; returns the new path.
    Refuses a name that is taken."""
    target = rename_target(session, new_name)
    lock = _unused(session)
    try:
        move(session, target)
    finally:
        if lock is not None:
            lock.release()
    return target


def move(src: Path, dst: Path) -> None:
    """Move a closed session's files (database, -wal, -shm, log, side files) to another name."""
    for a, b in zip([*files_of(src), log_path(src), *side_files(src)], [*files_of(dst), log_path(dst), *side_files(dst)]):
        if a.exists():
            os.replace(a, b)


def discard(path: Path) -> None:
    """Remove what an abandoned import left (database, -wal, -shm, lock)."""
    for f in [*files_of(path), Path(f"{path}.lock")]:
        f.unlink(missing_ok=True)


def sweep_unfinished_imports() -> list[str]:
    """Remove what a /load that never finished left in the sessions folder (a Nexus killed
    during it: 5 MB stayed for good, unlisted, and took the name: a trial); an import that
    another Nexus runs now holds its lock and stays. The names of those removed."""
    removed = []
    for staging in sorted(sessions_dir().glob("*.db.importing")):
        try:
            lock = _unused(staging)
        except (SessionInUse, OSError):
            continue
        try:
            discard(staging)
        except OSError:
            continue
        finally:
            if lock is not None:
                lock.release()
        removed.append(staging.name.removesuffix(".db.importing"))
    return removed

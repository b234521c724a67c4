"""Where Nexus keeps things: config, sessions and logs, each private to the user.

``NEXUS_DATA_DIR`` moves sessions and logs together (tests use it to stay isolated).
Directories are 0700 and files 0600: conversations are private.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .config import APP_NAME, data_dir, user_config_path


def missing_folders(path: Path) -> tuple[list[Path], Path]:
    """The folders of ``path`` that do not exist, outermost first, and the nearest one that does."""
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return missing[::-1], p


def private_dir(path: Path, tighten: bool = True) -> Path:
    """``path`` as a directory only its owner can enter; missing parents are made 0700 too.
    ``tighten``: a folder that was there is made 0700 as well — only for Nexus's own
    folders: ``--session /tmp/new.db`` made /tmp itself 0700, and one in the home folder
    the home folder (a trial)."""
    path = Path(path)
    made = missing_folders(path)[0]
    for d in made:
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if not tighten and path not in made:
        return path
    try:
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except (AttributeError, OSError):  # no getuid (Windows), or not ours to change
        pass
    return path


def log_dir() -> Path:
    """The platform's log folder (``platformdirs.user_log_dir``), or ``$NEXUS_DATA_DIR/logs``."""
    if os.environ.get("NEXUS_DATA_DIR"):
        return data_dir() / "logs"
    from platformdirs import user_log_dir

    return Path(user_log_dir(APP_NAME))


def where() -> list[tuple[str, Path]]:
    """What ``nexus --paths`` prints."""
    return [("config", user_config_path()), ("sessions", data_dir() / "sessions"), ("logs", log_dir())]


def make_folders(folder: Path) -> list[Path]:
    """Make ``folder`` and its missing parents; the folders made, outermost first (none
    when it was there). Raises ``OSError`` (``NotADirectoryError`` when a file is in the way)."""
    missing, there = missing_folders(Path(folder))
    if not there.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(there))
    made = []
    for d in missing:
        try:
            d.mkdir()
        except FileExistsError:  # made meanwhile
            continue
        made.append(d)
    return made


def ends_a_sentence(text: str, path: Path) -> str:
    """``text`` with a full stop, unless it ends with ``path``: copied, "….md." names no file."""
    return text if text.endswith(str(path)) else text + "."


def folders_made(made: list[Path]) -> str:
    """`` (made the folder X)`` for a success message, or ``""`` when none was made."""
    if not made:
        return ""
    if len(made) == 1:
        return f" (made the folder {made[0]})"
    if len(made) <= 3:
        return f" (made the folders {', '.join(map(str, made[:-1]))} and {made[-1]})"
    return f" (made {len(made)} folders, {made[0]} down to {made[-1]})"


def write_problem(path: Path, exc: OSError) -> str:
    """Why ``path`` could not be written, in words, naming ``path`` (never the temporary
    file an atomic write used): ``/x/y.md could not be written (permission denied)``."""
    path = Path(path)
    if exc.errno == errno.ENOENT:
        there = path.parent
        while not there.is_dir() and there != there.parent:
            there = there.parent
        why = f"the folder {there} does not take new files"
    else:
        why = os_reason(exc)
    return f"{shown_path(path)} could not be written ({why})"


def shown_path(path: Path | str, limit: int = 120) -> str:
    """A path for a notice: one too long for any file system is cut in its middle."""
    text = str(path)
    return text if len(text) <= limit else text[: limit // 2 - 1] + "…" + text[-(limit // 2 - 1):]


def os_problem(exc: OSError) -> str:
    """An ``OSError`` of a file in words: ``/x/y cannot be used (the name is too long)``
    (a raw "[Errno 36] File name too long: '<300 characters>'" reached the chat)."""
    if exc.filename is None:
        return os_reason(exc)
    return f"{shown_path(exc.filename)} cannot be used ({os_reason(exc)})"


def os_reason(exc: OSError) -> str:
    code = exc.errno
    if code == errno.ENOENT:
        why = "there is no such file or folder"
    elif code in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    elif code == errno.EROFS:
        why = "read-only file system"
    elif code == errno.ENOSPC:
        why = "the disk is full"
    elif code == getattr(errno, "EDQUOT", None):
        why = "the disk quota is used up"
    elif code == errno.ENOTDIR:
        blocker = Path(exc.filename) if exc.filename else None
        why = (f"{blocker} is a file, not a folder" if blocker is not None and blocker.is_file()
               else "part of the path is a file, not a folder")
    elif code == errno.EISDIR:
        why = "it is a folder"
    elif code == errno.ENAMETOOLONG:
        why = "the name is too long"
    elif code == errno.ELOOP:
        why = "a loop of links"
    else:
        why = (exc.strerror or type(exc).__name__).lower()
    return why


def folder_problem(folder: Path) -> str | None:
    """Why Nexus cannot keep files in ``folder`` (made if missing), or None. A file is
    made and removed there: permissions alone do not tell (root, read-only mounts)."""
    import tempfile

    try:
        private_dir(folder, tighten=False)  # the user's folder: checked, never made private
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return write_problem(folder, exc)
    return None


def data_folder_problem(folders) -> str | None:
    """The first of ``folders`` Nexus cannot keep files in, said for the start's one line,
    or None (nexus, nexus proxy and nexus mcp say it alike)."""
    problem = next(filter(None, map(folder_problem, folders)), None)
    return f"the data folder cannot be used: {problem} (NEXUS_DATA_DIR chooses another)" if problem else None

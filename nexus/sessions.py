"""Where sessions live: one SQLite file each in the user data dir; the last one resumes."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from .config import data_dir


def sessions_dir() -> Path:
    d = data_dir() / "sessions"
    d.mkdir(parents=True, exist_ok=True)
    return d


def resolve(name_or_path: str | None) -> Path:
    """``--session PATH|NAME``: a path (contains a separator or ends in .db) or a name in
    the sessions folder. None: the last session, or a new one."""
    if name_or_path:
        if os.sep in name_or_path or name_or_path.endswith(".db"):
            return Path(name_or_path).expanduser().resolve()
        safe = re.sub(r"[^\w.-]+", "-", name_or_path).strip("-") or "session"
        return sessions_dir() / f"{safe}.db"
    last = last_session()
    return last if last is not None else new_session_path()


def new_session_path() -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = sessions_dir() / f"session-{stamp}.db"
    n = 1
    while path.exists():
        path = sessions_dir() / f"session-{stamp}-{n}.db"
        n += 1
    return path


def _pointer() -> Path:
    return data_dir() / "last-session"


def remember(path: Path) -> None:
    _pointer().parent.mkdir(parents=True, exist_ok=True)
    _pointer().write_text(str(path))


def last_session() -> Path | None:
    try:
        p = Path(_pointer().read_text().strip())
    except OSError:
        return None
    return p if p.exists() else None


def list_sessions() -> list[tuple[Path, float, int]]:
    """``(path, modified, size)``, newest first."""
    out = []
    for p in sessions_dir().glob("*.db"):
        st = p.stat()
        out.append((p, st.st_mtime, st.st_size))
    return sorted(out, key=lambda x: -x[1])


def log_path(session: Path) -> Path:
    return session.with_suffix(".log")

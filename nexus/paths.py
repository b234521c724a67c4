"""Where Nexus keeps things: config, sessions and logs, each private to the user.

``NEXUS_DATA_DIR`` moves sessions and logs together (tests use it to stay isolated).
Directories are 0700 and files 0600: conversations are private.
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import APP_NAME, data_dir, user_config_path


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter; missing parents are made 0700 too."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass
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

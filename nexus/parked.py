"""Messages sent while their session was still opening, when Nexus closed before it
opened: kept in a small file beside the session, which takes them as its unsent
messages (Ctrl+R) when it opens next. The session file itself cannot take them then:
the worker that opens it holds it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("nexus")


def parked_path(session: Path) -> Path:
    return session.with_name(session.name + ".unsent.json")


def read(session: Path) -> list[str]:
    """The messages parked for ``session`` (none when there is no such file). An
    unreadable file is left where it is, for the user, and said in the log."""
    path = parked_path(session)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("messages kept in %s cannot be read (%s): left there", path, exc)
        return []
    if not isinstance(raw, list):
        log.warning("messages kept in %s are not a list: left there", path)
        return []
    return [t for t in raw if isinstance(t, str) and t.strip()]


def park(session: Path, texts: list[str]) -> bool:
    """Add ``texts`` to what is parked for ``session`` (written whole, then renamed into
    place: a crash leaves the old file or the new one). False when it cannot be written."""
    texts = [t for t in texts if t.strip()]
    if not texts:
        return True
    path = parked_path(session)
    old = read(session)
    merged = old + [t for t in texts if t not in old]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(merged, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.error("could not keep %d unsent message(s) beside %s: %s", len(texts), session, exc)
        return False
    return True


def clear(session: Path) -> None:
    """The session has taken them (into its own file)."""
    parked_path(session).unlink(missing_ok=True)

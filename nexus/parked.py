"""What a session could not hold in its own file, kept in small files beside it:

- messages sent while the session was still opening, when Nexus closed before it
  opened (``.unsent.json``): the session takes them as its unsent messages (Ctrl+R)
  when it opens next — the worker that opens it holds the file until then;
- messages queued behind a reply (``.queued.json``), written as they are queued: a
  Nexus killed meanwhile (kill -9, a power cut) finds them there when the session opens
  next, unanswered, for Ctrl+R (they were lost: a trial);
- messages typed while the session was still opening (``.opening-PID.json``, by the
  process that typed them), written as they are typed: a Nexus killed then (kill -9
  while ``--local`` starts its model, 10–20 s) leaves them to the next open, which takes
  the files of processes no longer running;
- exchanges whose storing failed (``.unstored.json``): answered, shown, but the
  session file refused them (disk full, a damaged page); stored when it opens next,
  or with Ctrl+R.

Each is written whole and renamed into place (a crash leaves the old file or the new
one), mode 0600, like the session."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

log = logging.getLogger("nexus")


def parked_path(session: Path) -> Path:
    return session.with_name(session.name + ".unsent.json")


def unstored_path(session: Path) -> Path:
    return session.with_name(session.name + ".unstored.json")


def queued_path(session: Path) -> Path:
    return session.with_name(session.name + ".queued.json")


def opening_path(session: Path, pid: int | None = None) -> Path:
    return session.with_name(f"{session.name}.opening-{os.getpid() if pid is None else pid}.json")


def opening_files(session: Path) -> list[Path]:
    """Every process's file of messages typed while ``session`` opened."""
    try:
        return sorted(session.parent.glob(f"{glob_escape(session.name)}.opening-*.json"))
    except OSError:
        return []


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def side_files(session: Path) -> list[Path]:
    """The files that belong to ``session`` beside it (sized, renamed and deleted with it)."""
    return [parked_path(session), unstored_path(session), queued_path(session)]


def move_side_files(session: Path, to: Path) -> None:
    """The side files of ``session`` beside ``to`` instead (its file was renamed outside
    Nexus); one there already is left as it is."""
    for a, b in zip(side_files(session), side_files(to)):
        try:
            if a.exists() and not b.exists():
                os.replace(a, b)
        except OSError:
            pass


def journal_opening(session: Path, texts: list[str]) -> bool:
    """Exactly ``texts`` were typed in this process while ``session`` opens (none: the
    file goes)."""
    return _journal(opening_path(session), texts)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True


def left_while_opening(session: Path) -> list[tuple[Path, list[str]]]:
    """The files of messages typed while ``session`` opened by processes no longer
    running (killed before it opened), with their messages, oldest file first."""
    out = []
    for path in opening_files(session):
        pid_text = path.name[len(session.name) + len(".opening-"):-len(".json")]
        if not pid_text.isdigit() or _running(int(pid_text)):
            continue
        texts = [t for t in _read_list(path) if isinstance(t, str) and t.strip()]
        out.append((path, texts))
    out.sort(key=lambda x: x[0].stat().st_mtime if x[0].exists() else 0)
    return out


def _read_list(path: Path) -> list:
    """The JSON list in ``path`` (none when there is no such file). An unreadable file is
    left where it is, for the user, and said in the log."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("what is kept in %s cannot be read (%s): left there", path, exc)
        return []
    if not isinstance(raw, list):
        log.warning("what is kept in %s is not a list: left there", path)
        return []
    return raw


def _write_list(path: Path, items: list) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(items, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.error("could not keep %d item(s) in %s: %s", len(items), path, exc)
        with contextlib.suppress(OSError):
            os.unlink(path.with_name(path.name + ".tmp"))  # a full disk left it, empty
        return False
    return True


def read(session: Path) -> list[str]:
    """The messages parked for ``session``."""
    return [t for t in _read_list(parked_path(session)) if isinstance(t, str) and t.strip()]


def park(session: Path, texts: list[str]) -> bool:
    """Add ``texts`` to what is parked for ``session``. False when it cannot be written."""
    texts = [t for t in texts if t.strip()]
    if not texts:
        return True
    old = read(session)
    return _write_list(parked_path(session), old + [t for t in texts if t not in old])


def clear(session: Path) -> None:
    """The session has taken them (into its own file)."""
    parked_path(session).unlink(missing_ok=True)


def read_queued(session: Path) -> list[str]:
    """The messages a Nexus had queued for ``session`` when it stopped."""
    return [t for t in _read_list(queued_path(session)) if isinstance(t, str) and t.strip()]


def journal_queued(session: Path, texts: list[str]) -> bool:
    """Exactly ``texts`` are queued for ``session`` now (none: the file goes). False when
    they cannot be written."""
    return _journal(queued_path(session), texts)


def _journal(path: Path, texts: list[str]) -> bool:
    """``path`` holds exactly ``texts`` (none: it goes). False when it cannot be written."""
    if not texts:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.error("could not remove %s: %s", path, exc)
            return False
        return True
    return _write_list(path, texts)


def read_unstored(session: Path) -> list[tuple[str, str]]:
    """The exchanges (user, reply) the session file refused, oldest first."""
    return [(x[0], x[1]) for x in _read_list(unstored_path(session))
            if isinstance(x, list) and len(x) == 2 and all(isinstance(t, str) for t in x)]


def keep_unstored(session: Path, exchanges: list[tuple[str, str]]) -> bool:
    """Exactly ``exchanges`` are what the session file still has to take (none: the file
    goes). False when they cannot be written."""
    path = unstored_path(session)
    if not exchanges:
        path.unlink(missing_ok=True)
        return True
    return _write_list(path, [list(x) for x in exchanges])

"""/export: the conversation as Markdown, with dates (and the topic outline with --tree)."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from datetime import datetime
from pathlib import Path

from .config import data_dir
from .history import when
from .text import counted, exchanges_said, safe

EXPORT_TITLE = "Nexus — "  # an export's first line: "# Nexus — <session>" (another /export replaces it)


def default_path(session: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return data_dir() / "exports" / f"{session.stem}-{stamp}.md"


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def as_block(text: str) -> str:
    """A message as Markdown that cannot spill into what follows it: a code fence it
    leaves open is closed at its end (one turned the rest of an export, headings and
    labels, into code in a trial), and HTML tags outside code are written as text."""
    out, fence = [], ""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if m and not fence:
            fence = m.group(1)
        elif m and fence and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line[m.end():].strip():
            fence = ""
        elif not fence:
            line = _tags_as_text(line)
        out.append(line)
    if fence:
        out.append(fence)
    return "\n".join(out)


def _tags_as_text(line: str) -> str:
    """``<script>`` as ``&lt;script>``, except inside `code` spans (shown as written there)."""
    parts, at = [], 0
    for m in _CODE_SPAN.finditer(line):
        parts += [_TAG_START.sub("&lt;", line[at:m.start()]), m.group(0)]
        at = m.end()
    return "".join(parts + [_TAG_START.sub("&lt;", line[at:])])


def conversation_markdown(tree, title: str, with_tree: bool = False, system: str = "",
                          unanswered: list[str] | None = None, unstored: list | None = None) -> str:
    """Every exchange in order (archived ones marked), each under its date; then the
    answered exchanges the session file could not take yet (a full disk: ``unstored``, as
    (message, reply)), and the messages that got no answer (kept for Ctrl+R: no exchange,
    but the user's words); the topic outline at the end with ``with_tree``."""
    waiting = f" · {counted(len(unanswered), 'message')} with no answer" if unanswered else ""
    if unstored:
        waiting = f" · {counted(len(unstored), 'answered exchange')} not stored yet" + waiting
    lines = [f"# {title}", "", f"Exported {datetime.now().strftime('%Y-%m-%d %H:%M')} · "
             f"{exchanges_said(tree.exchanges)}{waiting}", ""]
    if system:
        lines += ["> System prompt: " + as_block(system).replace("\n", "\n> "), ""]
    day = ""
    for x in tree.exchanges:
        stamp = when(x.timestamp)
        if stamp[:10] != day:
            day = stamp[:10]
            lines += [f"## {day or 'undated'}", ""]
        if x.forgotten:  # /forget: only that it was there is left
            lines += [f"### #{x.index} · {stamp[11:] or '—'} · forgotten", ""]
            continue
        lines += [f"### #{x.index} · {stamp[11:] or '—'}" + (" · archived" if x.archived else ""), ""]
        if x.system:
            lines += [f"*{x.system}*", ""]
        lines += ["**You:**", "", as_block(x.user), "", "**Assistant:**", "", as_block(x.assistant), ""]
    if unstored:
        lines += ["## Answered, not stored yet", ""]
        for user, reply in unstored:
            lines += ["**You:**", "", as_block(user), "", "**Assistant:**", "", as_block(reply), ""]
    if unanswered:
        lines += ["## Not answered", ""]
        for text in unanswered:
            lines += ["**You:**", "", as_block(text), "", "*(no answer yet)*", ""]
    if with_tree:
        lines += ["## Topic outline", "", "```", tree.render_tree(count_exchanges=True).rstrip(), "```", ""]
    # a file to cat: escape sequences and control characters in the text are shown, not obeyed
    return safe("\n".join(lines)).replace("\r\n", "\n").replace("\r", "\\r")


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (0600); its folder must exist. Written
    beside it and renamed over it: a full disk or a crash leaves the earlier file whole (it
    was cut to what fitted of the new one: a trial)."""
    target = Path(os.path.realpath(path))  # a link is followed, as a plain open does, not replaced
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=target.suffix, dir=target.parent)  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

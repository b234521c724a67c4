"""/export: the conversation as Markdown, with dates (and the topic outline with --tree)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from .config import data_dir
from .history import when
from .text import counted, safe

EXPORT_TITLE = "Nexus — "  # an export's first line: "# Nexus — <session>" (another /export replaces it)


def default_path(session: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return data_dir() / "exports" / f"{session.stem}-{stamp}.md"


def conversation_markdown(tree, title: str, with_tree: bool = False, system: str = "",
                          unanswered: list[str] | None = None) -> str:
    """Every exchange in order (archived ones marked), each under its date; then the
    messages that got no answer (kept for Ctrl+R: no exchange, but the user's words); the
    topic outline at the end with ``with_tree``."""
    waiting = f" · {counted(len(unanswered), 'message')} with no answer" if unanswered else ""
    lines = [f"# {title}", "", f"Exported {datetime.now().strftime('%Y-%m-%d %H:%M')} · "
             f"{counted(len(tree.exchanges), 'exchange')}{waiting}", ""]
    if system:
        lines += ["> System prompt: " + system.replace("\n", "\n> "), ""]
    day = ""
    for x in tree.exchanges:
        stamp = when(x.timestamp)
        if stamp[:10] != day:
            day = stamp[:10]
            lines += [f"## {day or 'undated'}", ""]
        lines += [f"### #{x.index} · {stamp[11:] or '—'}" + (" · archived" if x.archived else ""), ""]
        if x.system:
            lines += [f"*{x.system}*", ""]
        lines += ["**You:**", "", x.user, "", "**Assistant:**", "", x.assistant, ""]
    if unanswered:
        lines += ["## Not answered", ""]
        for text in unanswered:
            lines += ["**You:**", "", text, "", "*(no answer yet)*", ""]
    if with_tree:
        lines += ["## Topic outline", "", "```", tree.render_tree(count_exchanges=True).rstrip(), "```", ""]
    # a file to cat: escape sequences and control characters in the text are shown, not obeyed
    return safe("\n".join(lines)).replace("\r\n", "\n").replace("\r", "\\r")


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (0600); its folder must exist."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT

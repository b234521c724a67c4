"""Tab completion of the input line: slash commands and their arguments."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable

from . import commands as C

FLAGS = {
    "tree": ["--messages"],
    "search": ["--all"],
    "scenario": ["needle", "overwrite", "drift", "theseus", "multihop", "--judge", "--keep"],
    "system": ["--clear"],
    "reorganize": ["--threshold", "--prune"],
    "export": ["--tree"],
    "web": ["on", "off"],
    "set": ["temperature", "top_p", "max_tokens"],
}
PATH_ARGS = {"ingest", "export", "save", "load"}
SESSION_ARGS = {"open", "delete"}


class Completer:
    """``complete(text)`` → the full lines the text could become, best first.

    Session names and model names come from callables handed in (the model list is
    cached by the app: completion never waits for the server)."""

    def __init__(self, session_names: Callable[[], list[str]] = list, model_names: Callable[[], list[str]] = list):
        self.session_names = session_names
        self.model_names = model_names

    def complete(self, text: str) -> list[str]:
        if not text.startswith("/") or "\n" in text:
            return []
        name, sep, rest = text[1:].partition(" ")
        if not sep:
            return [f"/{c.name} " for c in C.COMMANDS if c.name.startswith(name.lower())]
        if name.lower() in PATH_ARGS and " " in rest and not rest.startswith("-"):
            whole = paths(rest)  # a path with spaces, typed unquoted as these commands take it
            if whole:
                return [f"/{name} {p}" for p in whole]
        head, _, word = rest.rpartition(" ")
        prefix = f"/{name} " + (head + " " if head else "")
        return [prefix + c for c in self.arguments(name.lower(), word, head)]

    def arguments(self, name: str, word: str, head: str) -> list[str]:
        if name == "set" and head:
            return []
        options: list[str] = list(FLAGS.get(name, []))
        if name in SESSION_ARGS and not head:
            options += self.session_names()
        if name == "model" and not head:
            options += self.model_names()
        # a word taken is followed by a space, as a command's name is: "--all" then the query
        # made "--allsailing"
        out = [o + " " for o in options if o.startswith(word)]
        if name in PATH_ARGS and not word.startswith("-"):
            out += paths(word)
        return out


def paths(word: str) -> list[str]:
    """Files and folders starting with ``word`` (folders end with a separator)."""
    expanded = os.path.expanduser(word)
    found = sorted(glob.glob(glob.escape(expanded) + "*"))[:50]
    out = []
    for p in found:
        shown = word + p[len(expanded):] if p.startswith(expanded) else p
        out.append(shown + (os.sep if os.path.isdir(p) else ""))
    return out


def common_prefix(items: list[str]) -> str:
    return os.path.commonprefix(items) if items else ""

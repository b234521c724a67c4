"""Slash commands: one registry for the input line, tab completion and the palette."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    handler: str  # the app method that runs it: f"cmd_{handler}"


COMMANDS = [
    Command("tree", "/tree [--messages]", "print the context tree (with exchanges: --messages)", "tree"),
    Command("search", "/search [--all] <query>", "search memory (--all: every session): messages with paths and scores", "search"),
    Command("forget", "/forget <#N …|words>", "erase exchanges for good: from memory and the session file (asks to confirm)", "forget"),
    Command("reorganize", "/reorganize [--threshold X] [--prune]", "merge similar frozen topics now", "reorganize"),
    Command("undo-reorganize", "/undo-reorganize", "restore the tree from before the last reorganisation", "undo"),
    Command("check", "/check", "check the tree's invariants; its depth, levels, fan-out and archive", "check"),
    Command("find", "/find <words>", "highlight and expand the topics whose name or summary match", "find"),
    Command("scenario", "/scenario [name] [--judge embedding|auto|llm] [--keep]", "list or run a stress scenario (scratch session; --keep keeps its tree to /open)", "scenario"),
    Command("ingest", "/ingest <path|folder|glob>", "describe images with the vision model into memory", "ingest"),
    Command("web", "/web [on|off|<query>]", "whether web routing is on; switch it; or answer with a search for <query>", "web"),
    Command("model", "/model [name]", "list the server's models, or switch the chat model", "model"),
    Command("save", "/save [path]", "export the tree as JSON", "save"),
    Command("load", "/load <path>", "import a JSON export as a new session", "load"),
    Command("new", "/new", "start a new session", "new"),
    Command("open", "/open <name>", "switch to another session (Tab completes names)", "open"),
    Command("rename", "/rename <new name>", "rename the open session", "rename"),
    Command("delete", "/delete <name>", "delete a session (asks to confirm; never the open one)", "delete"),
    Command("repair", "/repair <name>", "rebuild a damaged session from what it holds (the damaged file is kept)", "repair"),
    Command("sessions", "/sessions", "list sessions with sizes and last writes", "sessions"),
    Command("stats", "/stats", "session statistics", "stats"),
    Command("memory", "/memory", "the system text and memory block the newest message was sent with", "memory"),
    Command("system", "/system [text|--clear]", "show or set this session's system prompt (sent before memory)", "system"),
    Command("set", "/set temperature|top_p|max_tokens <value|default>", "this session's sampling (stored with it)", "set"),
    Command("retry", "/retry", "regenerate the last reply (it replaces that exchange in memory; /undo-retry puts it back)", "retry"),
    Command("undo-retry", "/undo-retry", "put back the exchange the last /retry or /edit replaced (again: the one before it)", "undo_retry"),
    Command("edit", "/edit", "put the last message back in the input; sending replaces that exchange (one that got no answer is sent as new)", "edit"),
    Command("drop", "/drop", "forget the message Ctrl+R would send next (it has no answer; nothing of it is in memory)", "drop"),
    Command("export", "/export [path] [--tree]", "write the conversation as Markdown (--tree: with the topic outline)", "export"),
    Command("clear", "/clear", "clear the chat pane (memory is kept)", "clear"),
    Command("help", "/help", "this list", "help"),
    Command("quit", "/quit", "leave Nexus", "quit"),
]
BY_NAME = {c.name: c for c in COMMANDS}


def help_said(c: Command, resend_key: str) -> str:
    """The command's help with the resend key as bound ("/drop … the message Ctrl+R would
    send next" after resend = "f8": a trial)."""
    return c.help.replace("Ctrl+R", resend_key)


class NotNow(Exception):
    """A command that cannot run at the moment (a scenario is running): said as a
    warning, the line given back to run later."""


class UsageError(ValueError):
    """Bad arguments: the message is the command's usage."""


def refuse_unknown_options(name: str, args: list[str], known: tuple[str, ...] = ()) -> None:
    """An argument such as "--pretty" that ``/name`` does not take is refused, not written
    as a file name or set as a prompt's text (``/save --pretty`` wrote a file "--pretty",
    ``/system --bogus`` became the system prompt: a trial)."""
    for arg in args:
        if arg.startswith("--") and len(arg) > 2 and arg not in known:
            raise UsageError(f"{BY_NAME[name].usage} ({arg} is no option of /{name})")


@dataclass
class Parsed:
    command: Command | None
    args: list[str]
    raw: str


def parse(line: str) -> Parsed:
    """``/name args...`` → the command and its arguments (shell-like quoting)."""
    body = line.strip()[1:]
    name, rest = (body.split(None, 1) + ["", ""])[:2]  # "/search<Tab>foo" is /search foo (a trial)
    try:
        args = shlex.split(rest)
    except ValueError:
        args = rest.split()
    return Parsed(BY_NAME.get(name.lower()), args, rest.strip())


def as_message(line: str) -> str | None:
    """The message a line starting with "/" sends, or None when it is a command: "//" sends
    the rest as typed from its second "/" ("//etc is full" → "/etc is full"), and a path
    ("/usr/bin/python3 crashes…": a "/" inside the first word, which no command has) is a
    message as it is."""
    body = line.strip()
    if body.startswith("//"):
        return body[1:]
    first = body.split(maxsplit=1)[0] if body else ""
    return line if "/" in first[1:] else None


def suggestion(name: str) -> str:
    """A hint for an unknown command."""
    import difflib

    # a typo: the nearest command; else every command the name begins ("/undo": /undo-reorganize
    # and /undo-retry — naming the first alone steered a /retry's undo to the tree's, a trial)
    close = difflib.get_close_matches(name, list(BY_NAME), n=1) or \
        sorted(c for c in BY_NAME if name and c.startswith(name))[:3]
    return (f"Unknown command /{name}." + (f" Did you mean {' or '.join('/' + c for c in close)}?" if close else "")
            + " Type /help for the list, or start with // to send it as a message.")


def completions() -> list[str]:
    return [f"/{c.name}" for c in COMMANDS]


def flag_value(args: list[str], flag: str, cast: Callable = str, usage: str = ""):
    if flag not in args:
        return None
    i = args.index(flag)
    try:
        value = cast(args[i + 1])
    except (IndexError, ValueError):
        raise UsageError(usage) from None
    del args[i : i + 2]
    return value

"""One request and its reply (``Turn``), and the words for what went wrong with one."""

from __future__ import annotations

import itertools
import re
import threading
import time
from dataclasses import dataclass, field

from trace_core import textutil
from trace_core.llm import describe_error, shown_url
from trace_core.prompts import SYSTEM_BOILERPLATE

from .events import FailureKind

THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
TAGS = re.compile(r"<[^>]+>")
_turn_ids = itertools.count(1)


def opened(text: str) -> str:
    """``text`` with the ``<think>`` its first ``</think>`` closes: a chat template that opens
    the section itself (DeepSeek-R1's, Qwen3's on a server that does not split reasoning out)
    leaves the reply only the closing tag, and the reasoning before it was shown and stored
    as the answer (a trial)."""
    end = text.find("</think>")
    return "<think>" + text if end >= 0 and "<think>" not in text[:end] else text


def strip_think(text: str) -> str:
    """Reasoning sections are shown collapsed and never stored in memory."""
    return THINK.sub("", opened(text)).strip()


ECHO_WORDS = 4  # a line of the given text this long, said back, is an echo, not an answer
# a line in the form of the memory block or the recent window, however short, said back too
PROMPT_FORM = re.compile(r"\s*(?:#|- |\[|(?:user|assistant|system):)", re.I)


def echoable(line: str) -> bool:
    """A line of the given text that, said back, is an echo: a sentence ("Be brief.") or a
    line of four words or more, or one in the prompt's own form — not an option the answer
    is to be made of ("Positive", "A")."""
    words = len(textutil.words_of_line(line))
    return words >= ECHO_WORDS or bool(PROMPT_FORM.match(line)) or (words >= 2 and line.rstrip().endswith((".", "!", "?")))


def says_something(text: str, own_system: str = "") -> bool:
    """The reply holds words beside its reasoning (``textutil.says_something``: not a bare
    role label, a copied date line, the system prompt's fixed lines or symbols; a number
    or a date as an answer does), nor only the lines of the session's own /system text
    said again ("Answer in one short sentence." came back as the answer, in a trial;
    word for word only: its words are the user's, and an answer may use them). Only a line
    of four words or more counts: a prompt's options ("Positive", "A") are what the answer
    is made of, and a one-letter line took that letter out of every word (a review) — or a
    line of the memory block's form ("## Topic", "- User: …"), marker and all."""
    text = strip_think(text)
    own = [line.strip() for line in own_system.splitlines()
           if echoable(line)]
    if own:  # each line also without its closing stop: "Answer in one short sentence"
        text = textutil.without_echo(text, sorted({*own, *(line.rstrip(".!?:;") for line in own)}, key=len,
                                                  reverse=True))
    return textutil.says_something(text, boilerplate=SYSTEM_BOILERPLATE)


EMPTY_BULLETS = re.compile(r"(?:\n[ \t]*[-*•+][ \t]*)+\s*$")


def without_empty_bullets(text: str) -> str:
    """The reply without the empty list items it ends in: a small model that starts writing
    out a line of the memory block ("- User: …") is stopped after its "-", which was stored
    and shown at the reply's end, and sent again in the next prompt's recent exchanges (a trial)."""
    return EMPTY_BULLETS.sub("", text)


class ReplyError(RuntimeError):
    """A reply that is not an answer: said in words, never stored; ``kind``: what it says
    of the server."""

    def __init__(self, words: str, kind: FailureKind = FailureKind.OTHER) -> None:
        super().__init__(words)
        self.kind = kind


def failure_kind(exc: BaseException | None) -> FailureKind:
    """What a reply's failure says of the server, from the exception and its causes (a
    server gone when the model list was asked first is a ``ServerProblem`` from the
    connection error)."""
    import openai

    while exc is not None:
        if isinstance(exc, ReplyError):
            return exc.kind
        if isinstance(exc, openai.APITimeoutError):  # there, and slow: not known to be gone
            return FailureKind.OTHER
        if isinstance(exc, openai.APIConnectionError):
            return FailureKind.UNREACHABLE
        if isinstance(exc, openai.AuthenticationError):
            return FailureKind.KEY_REFUSED
        exc = exc.__cause__
    return FailureKind.OTHER


@dataclass(eq=False)
class Turn:
    """One request and its reply. Each has its own cancel and its own text, so a late
    timeout or chunk of one request never touches another's."""

    text: str
    forced_query: str | None = None
    id: int = field(default_factory=lambda: next(_turn_ids))
    cancelled: threading.Event = field(default_factory=threading.Event)
    settled: threading.Event = field(default_factory=threading.Event)  # over, and stored or kept
    keep: bool = False  # cancelled by leaving (quit, a session switch): no idle work after it
    replace: bool = False  # /retry, /edit: the reply replaces the newest exchange in memory
    partial: str = ""
    reasoned: int = 0  # characters of reasoning_content streamed (shown folded, never stored)
    outcome: str = ""  # answered | cancelled | failed | empty | refused | unstored
    stored: tuple[int, str] | None = None  # (exchange index, timestamp) once its exchange is stored

    def cancel(self, keep: bool = False) -> None:
        self.keep = self.keep or keep
        self.cancelled.set()


def server_message(exc: BaseException) -> str:
    """The server's own words in an error, when it sent some (JSON or an HTML page)."""
    body = getattr(exc, "body", None)
    msg = ""
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = (err.get("message") or err.get("detail") or "") if isinstance(err, dict) else str(err)
    elif isinstance(body, str):
        msg = body
    elif not hasattr(exc, "status_code") and not no_answer(exc):  # the client's "Request timed out." is no server's
        msg = getattr(exc, "message", "") or ""
    return " ".join(TAGS.sub(" ", str(msg)).split())[:300]


# the model's context and the prompt's tokens, as each server says them when a prompt does not fit:
# llama.cpp "request (9412 tokens) exceeds the available context size (8192 tokens)", llama-cpp-python
# "Requested tokens (9000) exceed context window of 8192", vLLM (and OpenAI) "maximum context length is 4096
# tokens. However, you requested 5120 tokens (4608 in the messages, 512 in the completion)", LM Studio
# "the model is loaded with context length of only 4096 tokens"
CONTEXT_SIZE = re.compile(r"available context size \((\d+)|context window of (\d+)|maximum context length is (\d+)"
                          r"|context length of only (\d+)", re.I)
PROMPT_SIZE = re.compile(r"^request \((\d+) tokens\)|(\d+) in the messages", re.I)
OVERFLOW = re.compile(r"exceed|maximum context length|context length of only|too long", re.I)


@dataclass(frozen=True)
class Overflow:
    """A prompt the server refused as longer than its model's context: the sizes it said."""

    context: int | None = None  # the model's context, in the server's tokens
    prompt: int | None = None  # the prompt, by the server's count


def context_overflow(exc: BaseException) -> Overflow | None:
    """The server's refusal of a prompt too long for its model's context, or None."""
    if getattr(exc, "status_code", None) not in (400, 413, 500):
        return None
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    fields = err if isinstance(err, dict) else {}
    msg = server_message(exc)
    kind = f"{fields.get('type', '')} {fields.get('code', '')}"
    if "exceed_context_size" not in kind and "context_length_exceeded" not in kind \
            and not ("context" in msg.lower() and OVERFLOW.search(msg)):
        return None
    size, prompt = fields.get("n_ctx"), fields.get("n_prompt_tokens")  # llama.cpp's body says both
    if not isinstance(size, int) and (m := CONTEXT_SIZE.search(msg)):
        size = int(next(g for g in m.groups() if g))
    if not isinstance(prompt, int) and (m := PROMPT_SIZE.search(msg)):
        prompt = int(next(g for g in m.groups() if g))
    return Overflow(size if isinstance(size, int) and size > 0 else None,
                    prompt if isinstance(prompt, int) and prompt > 0 else None)


def no_answer(exc: BaseException) -> bool:
    """The openai client's own failure to hear from the server (connection, timeout)."""
    import openai

    return isinstance(exc, openai.APIConnectionError)


def reply_problem(exc: BaseException, base_url: str, timeout: float = 0.0, resend: str = "Ctrl+R") -> str:
    """Why a reply failed, in words; ``timeout``: the wait ``server.timeout`` allowed;
    ``resend``: the resend key as bound ("Ctrl+R" was said after resend = "f8")."""
    if isinstance(exc, RuntimeError) and not hasattr(exc, "request") and exc.args:
        return str(exc.args[0])
    import openai

    if isinstance(exc, openai.APITimeoutError) and timeout:
        # "did not answer in time: Request timed out." said neither how long, nor that a model
        # loaded at the first message (LM Studio, Ollama) takes minutes, nor what to do (a trial)
        return (f"the model server at {shown_url(base_url)} sent no reply in {timeout:g} s (server.timeout) — a "
                f"model it is still loading can take longer: {resend} once it has loaded, or raise server.timeout "
                "in nexus.toml")
    problem = describe_error(exc, base_url)
    msg = server_message(exc)
    return (f"{problem}: {msg}" if msg and msg not in problem else problem) + wait_asked(exc)


def wait_asked(exc: BaseException) -> str:
    """The wait a busy server asks for before the next request (HTTP 429 or 503 with
    Retry-After, in seconds or as a date), in words; "" when it names none. A Ctrl+R
    pressed at once failed the same way, with nothing said of the wait (a trial)."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after", "").strip() if response is not None else ""
    if not value or getattr(exc, "status_code", None) not in (429, 503):
        return ""
    if value.isdigit():
        seconds = int(value)
    else:
        from email.utils import parsedate_to_datetime

        try:
            seconds = round(parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return ""
    return f" — it asks for {max(seconds, 1)} s before the next request" if seconds < 86400 else ""


def store_problem(exc: BaseException) -> str:
    """Why an exchange could not be written, in words."""
    import errno
    import os
    import sqlite3

    from trace_core.errors import SessionFileError, SessionLockedError, SessionMovedError, SessionWriteError

    # a session error's words without its path: a session named "readonly-notes" had every
    # failure said as a read-only file
    text = exc.problem if isinstance(exc, SessionFileError) else str(exc)
    if isinstance(exc, SessionLockedError):  # only after its lock file was removed: a writer holds the lock
        return (f"the session's lock file ({os.path.basename(exc.path)}.lock) was deleted while this window held "
                f"it, and {exc.holder} opened the session to write since")
    if isinstance(exc, SessionMovedError):
        return "the session file was renamed, moved or deleted while open (outside Nexus)"
    if isinstance(exc, UnicodeError):
        return f"the text has characters that cannot be stored ({exc.__class__.__name__})"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC or "database or disk is full" in text:
        return "the disk is full"
    if isinstance(exc, PermissionError) or "readonly" in text or "read-only" in text:
        return "the session file cannot be written (read-only)"
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in text or "is closed (" in text:
        return "the session was closed"
    if isinstance(exc, SessionWriteError):  # "SessionWriteError: /path/s.db: could not be written (…)" (a trial)
        cause = getattr(exc, "cause", "")
        if "disk I/O error" in cause:  # SQLite's words for EFBIG and EIO alike
            return "the session file could not be written (a disk I/O error: a failing disk, or a file-size limit reached)"
        if "locked" in cause:
            return f"the session file could not be written ({cause}: another program held it past the wait)"
        return f"the session file could not be written ({cause})"
    return f"{type(exc).__name__}: {exc}"

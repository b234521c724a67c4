"""Opening and closing a session in the app: the file, its history in the chat pane, the embedder."""

from __future__ import annotations

import logging
from pathlib import Path

from textual.containers import VerticalScroll

from trace_core import SessionDamagedError, SessionFileError, SessionLockedError, SessionNotWritableError
from trace_core.llm import shown_url

from . import events as ev
from . import sessions
from .chat import ChatSession
from .failures import background
from .history import HistoryPager, newest_from_file, past_exchange
from .local_model import MAX_RESTARTS
from .text import counted, exchanges_said
from .widgets import Notice, PastExchangeView

log = logging.getLogger("nexus")


def read_only_reason(locked: SessionLockedError | SessionNotWritableError) -> str:
    """What a user reads when the session is written by another process, or cannot be written."""
    if isinstance(locked, SessionNotWritableError):
        return (f"This session file cannot be written ({locked.why}): opened read-only — you can read and "
                "search it; /new starts another session.")
    kind, note = holder_kind(locked.pid) if locked.pid else ("another Nexus", "")
    who = f"{kind} (pid {locked.pid}){note}" if locked.pid else kind
    return (f"This session is open in {who}: opened read-only — you can read and search it; "
            "/new starts another session.")


def holder_kind(pid: int) -> tuple[str, str]:
    """Which Nexus process holds a session, and a note: a proxy or MCP server keeps the
    sessions it serves open, and "another Nexus" sent the user looking for a window (a trial)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return "another Nexus", ""
    if b"proxy" in args:
        return "a Nexus proxy", ", which keeps the sessions it serves open until it stops"
    if b"mcp" in args:
        return "a Nexus MCP server", ", which keeps its session open until it stops"
    return "another Nexus", ""


def repair_hint(path: Path, problem: BaseException) -> str:
    """The sentence that offers /repair, for a damaged file (else nothing): by the error's
    type, not "damaged" in its words, which name the file ("damaged-notes.db": a review)."""
    if not isinstance(problem, SessionDamagedError):
        return ""
    return f" /repair {path.stem} rebuilds what it can from what it holds (the damaged file is kept)."


# a failed reply's server is looked at again every LOST_RECHECK_SECONDS, LOST_RECHECKS times
LOST_RECHECKS, LOST_RECHECK_SECONDS = 6, 0.5

class SessionView:
    """NexusApp's session: opened and closed in a worker; the app's state is set on the UI thread."""

    @background(group="session", exclusive=True)
    def open_session(self, path: Path, announce: str = "", queued: list | None = None) -> None:
        """``queued``: messages typed in the open session, kept there unsent as it closes.
        A file that cannot be opened is refused before the open session closes: it stays."""
        if self.session is not None and Path(path).is_file() and Path(path).stat().st_size:
            # another embedder too: found only as the tree opened, the open session was closed already
            problem = sessions.open_problem(Path(path), getattr(self.embed_fn, "name", None))
            if problem:
                self.call_from_thread(self.refuse_open, Path(path), problem, queued or [])
                return
        self.close_session(queued)
        self._open(path, announce)

    def refuse_open(self, path: Path, problem: SessionFileError, queued: list) -> None:
        """(UI thread) ``path`` cannot be opened: the open session stays, its queued messages
        go back to the outbox, in their order."""
        self.outbox = queued + self.outbox
        here = f"; {self.session_path.stem} stays open" if self.session is not None else ""
        self.chat_notice(f"Cannot open {path.stem}: {problem}. The file was left untouched{here}."
                         f"{repair_hint(path, problem)}", "error")
        self.post_event(ev.Notice(f"session error: {problem}", "error"))

    @background(group="session", exclusive=True)
    def reopen_session(self, old: ChatSession | None, announce: str) -> None:
        """The session, detached from the app already (``old``), opened again: read-only
        before, writable now that its other writer has closed it."""
        if old is not None:
            old.close()
        self.call_from_thread(self._clear_chat)
        self._open(self.session_path, announce)

    def close_session(self, queued: list | None = None, keep_chat: bool = False) -> None:
        """(worker thread) Settle the reply, keep ``queued`` messages unsent in the session,
        close its file, clear the chat pane (``keep_chat``: the same session reopens)."""
        if self.session is None:
            return
        self.settle_reply()  # the reply in flight is cancelled and stored in the session it belongs to
        session = self.call_from_thread(self.detach_session)
        if session is not None:
            if queued:
                self.store_unsent(session, self.session_path, queued)
            empty = not keep_chat and self.removed_when_left(session)
            session.close()
            if empty:  # each /new left a 116 KiB file of nothing in /sessions (a trial)
                try:
                    sessions.delete(session.path)
                    self.post_event(ev.Notice(f"removed the empty session {session.path.stem}"))
                except (OSError, sessions.SessionInUse):
                    pass
        if not keep_chat:
            self.call_from_thread(self._clear_chat)

    @staticmethod
    def removed_when_left(session: ChatSession) -> bool:
        """The session holds nothing and bears the name /new gave it: it goes when left."""
        return (not session.read_only and session.tree is not None and not session.unstored
                and sessions.unused_and_empty(session.path, len(session.tree.exchanges), len(session.kept),
                                              session.settings.own()))

    # the app's state changes on the UI thread only: the session worker asks for each change

    def detach_session(self) -> ChatSession | None:
        """No session from now on (the caller closes the one returned)."""
        session, self.session, self.history = self.session, None, None
        return session

    @property
    def session_unopenable(self) -> bool:
        """No session is open, and the one asked for could not be opened (said in the chat)."""
        return self.session is None and self.open_failed == self.session_path

    def session_failed(self, path: Path) -> None:
        """``path`` could not be opened: messages typed now wait for the session that opens next."""
        self.open_failed = path
        self.set_embedder_state("not loaded")  # no session, no embedder: not "loading" for good
        self.mark_outbox()

    def adopt_session(self, session: ChatSession) -> bool:
        """``session`` is the app's from now on; False when the app is leaving (the caller closes it)."""
        if self._leaving:
            return False
        self.open_failed = None
        self.session = session
        self._forget_asked = None  # asked in another session, or before leaving this one and coming back (a trial)
        self.mark_outbox()  # queued messages now say what they wait for (the embedder)
        return True

    def set_session_path(self, path: Path) -> None:
        self.session_path = path
        self.update_header()

    def set_embedder_state(self, state: str) -> None:
        self.embedder_state = state  # loading | ready | failed | not loaded
        self.update_header()

    def _clear_chat(self) -> None:
        self.current_reply = None
        self.query_one("#chat").remove_children()

    def _open(self, path: Path, announce: str = "", shown: HistoryPager | None = None) -> None:
        """(worker thread) Open ``path`` as the session and show its history (``shown``: the
        chat shows it already, paged by that pager — a renamed session)."""
        path = Path(path)
        self.call_from_thread(self.set_session_path, path)
        self._setup_file_log()
        early = self._show_newest_page(path) if shown is None else None
        if not self._wait_for_local_model():
            return
        emptied = path.is_file() and path.stat().st_size == 0  # a session file emptied outside Nexus
        # folders a session file named outside Nexus's own folder brings (--session /new/place/x.db)
        missing = [] if path.parent == sessions.sessions_dir() else [p for p in path.parents if not p.exists()]
        session = self._open_file(path)
        if session is None:
            return
        try:
            adopted = self.call_from_thread(self.adopt_session, session)
        except RuntimeError:  # the app has stopped
            adopted = False
        if not adopted:
            session.close()
            return
        try:
            sessions.remember(path)
        except OSError as exc:  # the session is open all the same (it was refused: a trial)
            from .paths import os_problem

            self.post_event(ev.Notice(f"the next start may not resume this session: {os_problem(exc)}", "warning"))
        tree = session.tree
        past = tree.exchanges
        # as the tree pane counts them, the forgotten and archived apart (it said 4 of 2: a trial)
        self.post_event(ev.Notice(f"session {path} ({exchanges_said(past)})"))
        own = session.settings.own()
        if own:  # over the config's (and --local's) values, which the log said at start
            self.post_event(ev.Notice(f"this session's own settings (/set, /system, /web): {own}"))
        if shown is not None:
            shown.attach(past)
            self.call_from_thread(self.keep_history, shown)
        elif early is not None and self.history is early:
            early.attach(past)
            self.call_from_thread(self.history_attached)
            if len(past) > early.read_total:  # stored as it opened (what a failed store left beside the file)
                self.call_from_thread(self.show_stored_on_open, list(past[early.read_total:]))
        else:
            self.call_from_thread(self.show_history, HistoryPager(past))
        if announce:
            self.call_from_thread(self.chat_notice, announce)
        if missing:
            self.call_from_thread(self.chat_notice, f"Made the folder {missing[-1]} for this new session "
                                  f"({path}).", "warning")
        if emptied:
            self.call_from_thread(self.chat_notice, f"The session file {path} was empty (0 bytes): it starts again "
                                  "as a new session. If it held a conversation, it was emptied outside Nexus.",
                                  "warning")
        if session.kept and shown is None:
            self.call_from_thread(self.show_unsent, list(session.kept), session.after_of(session.kept))
        self.call_from_thread(self.refresh_tree)
        embedder = self._load_embedder(tree)  # here, in the worker: the first paint did not wait for it
        self.call_from_thread(self.set_embedder_state, embedder)
        self.call_from_thread(self._probe, "ready")
        self.drain_outbox()  # messages typed while the session opened go now
        if embedder == "ready" and tree.pending_parts():
            self._index_earlier(session)

    def _wait_for_local_model(self) -> bool:
        """(worker thread) ``nexus --local``: the session is made for the bundled server,
        so it waits for it (history is on screen meanwhile; typed messages queue). False:
        Nexus is closing. A server that failed to start is said in words; the session still
        opens (its memory can be read), and a message then fails and is kept."""
        local = self.local_model
        # a failure said already is not said again at each session opened; one that came
        # before this worker looked was never said at all (a loaded machine, a bad model file)
        if local is None or local.applied or (local.done.is_set() and local.error and local.failure_said):
            return True
        if not local.done.is_set():
            self.post_event(ev.Notice(f"starting {local.label}…"))
        if not local.wait(self.quit_check()):
            return False
        if local.error:
            local.failure_said = True
            self.post_event(ev.Notice(f"{local.label} did not start: {local.error}", "error"))
            self.call_from_thread(self.chat_notice, f"The bundled model could not start: {local.error}. Your "
                                  "memory and history are here, but no model answers: restart Nexus, or use "
                                  "another server with --base-url URL.", "error")
            return True
        self.call_from_thread(self.local_model_started)
        return True

    def local_model_lost(self, rechecks: int = LOST_RECHECKS) -> bool:
        """(UI thread) A reply failed or came empty: when the bundled server has died
        (killed, crashed), say so and start it again — the message is kept and sent again
        once it is back. False when it runs, or is not ours. A dying server's stream breaks
        a moment before its process ends: it is looked at again ``rechecks`` times (trial:
        a server killed mid-reply was found dead only when the next message went)."""
        local = self.local_model
        death = local.death() if local is not None else None
        if death is None:
            if local is not None and rechecks > 0 and not self._leaving:
                self.set_timer(LOST_RECHECK_SECONDS, lambda: self.local_model_lost(rechecks - 1))
            return False
        if self.model_restarting:  # found already, by an earlier look
            return True
        if local.restarts >= MAX_RESTARTS:
            self.chat_notice(f"The bundled model server stopped ({death}) after {local.restarts} restarts: it is "
                             "not started again. Your message is kept — restart Nexus, or use another server "
                             "with --base-url URL.", "error")
            return True
        self.chat_notice(f"The bundled model server stopped ({death}). Starting it again (10–20 s): your "
                         "message is kept and sent again when it is back.", "error")
        self.post_event(ev.Notice(f"{local.label} stopped ({death}); starting it again"))
        self.model_restarting = True
        self.update_header()
        self.restart_local_model()
        return True

    @background(group="local-model", exclusive=True)
    def restart_local_model(self) -> None:
        if self.local_model.restart(self.quit_check()):
            self.call_from_thread(self.local_model_back)

    def local_model_back(self) -> None:
        """(UI thread) The restart ended: the session talks to the new server, and the
        message that found it dead goes again."""
        self.model_restarting = False
        local = self.local_model
        if local.error:
            self.update_header()
            self.chat_notice(f"The bundled model could not start again: {local.error}. Your message is kept — "
                             "restart Nexus, or use another server with --base-url URL.", "error")
            return
        self.local_model_started()
        if self.session is not None:
            self.session.use_server()
        back = self.chat_notice("The bundled model is back.")
        if back is not None:
            self.mount_before_waiting(back)  # said above what goes now
        if self.session is not None and self.session.pending is not None and self.turn is None:
            self.resend_pending(first=True)
        self.drain_outbox()

    def local_model_started(self) -> None:
        for note in self.local_model.apply(self.config):
            self.post_event(ev.Notice(note))
        self.post_event(ev.Notice(f"model server: {shown_url(self.config.base_url)} ({self.config.chat_model})"))
        self.update_header()

    def _show_newest_page(self, path: Path) -> HistoryPager | None:
        """(worker thread) The newest page, read from the file and shown while the tree loads."""
        if not path.is_file():
            return None
        try:
            page, total = newest_from_file(path)
        except Exception:  # a file the store refuses: the tree's opening says why
            return None
        early = HistoryPager.after(page, total)
        self.call_from_thread(self.show_history, early, page)
        return early

    def _open_file(self, path: Path) -> ChatSession | None:
        """(worker thread) The session over ``path`` (read-only when another process writes
        it, and said so); None after saying why it cannot be opened."""
        session = ChatSession(self.config, path, self.post_event, self.embed_fn, self.search_fn)
        if not session.model and self.model_found:  # the memory asks it too, from the start (not "local-model")
            session.model = self.model_found
        try:
            try:
                session.open()
            except (SessionLockedError, SessionNotWritableError) as locked:  # read it, and say so
                session.open(read_only=True)
                session.read_only_reason = read_only_reason(locked)
                session.held_elsewhere = isinstance(locked, SessionLockedError)
                self.call_from_thread(self.chat_notice, session.read_only_reason, "warning")
        except (SessionFileError, Exception) as exc:  # a corrupt file, a foreign file, a mismatched embedder
            self.call_from_thread(self.chat_notice, f"Cannot open the session: {str(exc).rstrip('.')}. "
                                  "The file was left untouched."
                                  f"{repair_hint(path, exc)} Type /new to start a new session, or /open another.", "error")
            self.post_event(ev.Notice(f"session error: {exc}", "error"))
            self.call_from_thread(self.session_failed, path)
            return None
        return session

    def _load_embedder(self, tree) -> str:
        """(worker thread) Load the tree's embedder: "ready" or "failed" (said in the log)."""
        try:
            load = getattr(tree.embed_fn, "load", None)
            if load:
                load()
            backend = getattr(tree.embed_fn, "backend", "")
            self.post_event(ev.Notice(f"embedder ready: {tree.embed_fn.name}" + (f" ({backend})" if backend else "")))
        except Exception as exc:
            self.post_event(ev.Notice(f"embedder failed to load: {exc}", "error"))
            return "failed"
        return "ready"

    def _index_earlier(self, session: ChatSession) -> None:
        """(worker thread) A session written before sentence indexing (or just imported):
        catch up a batch at a time, so a switch or /quit is not held up."""
        stop, done = self.stop_check(), 0
        try:
            while not stop() and self.session is session:
                step = session.tree.index_pending(max_exchanges=64)
                if not step:
                    break
                done += step
        except Exception as exc:  # retrieval still works on message vectors
            if self.session is session and not session.tree.vdb.closed:  # a switch closed it: nothing failed
                self.post_event(ev.Notice(f"sentence index not updated: {exc}", "warning"))
        if done:
            # named: a switch can end the work after the next session's first lines
            self.post_event(ev.Notice(f"{session.path.stem}: indexed the sentences of {counted(done, 'earlier exchange')}"))

    def _setup_file_log(self) -> None:
        """One rotating, private, text-only log in the log folder (``nexus --paths``)."""
        from .logs import setup_file_log

        setup_file_log()
        log.info("session %s", self.session_path)

    async def show_history(self, pager: HistoryPager, page: list | None = None) -> None:
        """A session opens: its last page of exchanges goes above anything in the chat
        pane (``page``: read from the file already, while the tree loads)."""
        self.history = pager
        await self.load_earlier(page)
        self.call_after_refresh(self._probe, "history")

    def show_stored_on_open(self, nodes: list) -> None:
        """(UI thread) Exchanges the session stored as it opened, below the page read from
        the file before (they appeared only when the session was opened again)."""
        chat = self.query_one("#chat", VerticalScroll)
        for node in nodes:
            chat.mount(PastExchangeView(past_exchange(node)))

    def keep_history(self, pager: HistoryPager) -> None:
        """(UI thread) The chat as it was pages on with ``pager``."""
        self.history = pager

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

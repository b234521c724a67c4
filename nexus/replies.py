"""One reply at a time: the outbox, the reply worker, its events in the chat pane, storing what is left."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from trace_core.tokens import count_tokens

from . import commands as C
from . import events as ev
from . import messages as M
from . import parked, sessions
from .chat import CANCELLED_MARK, ChatSession, Turn
from .events import FailureKind
from .failures import TaskFailed, background
from .forgetting import asks_to_forget
from .history import when
from .inspector import NodeInspector
from .text import counted
from .turn import failure_kind
from .widgets import STALL_SECONDS, AssistantMessage, ExchangeHead, Notice, PastExchangeView, PromptInput, UserMessage

log = logging.getLogger("nexus")
UNSENT_STATE = "not answered — kept to send again"
SERVER_RECHECK_SECONDS = 5.0


@dataclass
class Outgoing:
    """A message shown in the chat, waiting for its turn."""
    text: str
    forced_query: str | None
    shown: UserMessage
    replace: bool = False  # /retry, /edit: the reply replaces the newest exchange in memory
    command: bool = False  # a slash command typed while the session opened: run in its turn


class Replies:
    """NexusApp's outbox and reply flow; state lives on the app, changed on the UI thread."""

    def submitted(self, event: PromptInput.Submitted) -> None:
        """Enter in the prompt: a slash command runs, a message goes to the outbox."""
        text = event.value
        if not text.strip():
            return
        if self._leaving:  # Enter just before Ctrl+Q, both in one burst: the quit ran first
            self.keep_while_leaving(text)
            return
        self.follow_chat()  # what is sent, and its answer, are in sight
        self.uncover_chat()
        editing, self.editing = self.editing, None
        kept_edit, self.editing_kept = self.editing_kept, None  # a command ends it: the message stays kept
        if text.strip().startswith("/"):
            message = C.as_message(text)
            if message is None:
                self.run_command(text.strip())
                return
            text = message
        # /edit put the last message here: sent, it replaces that exchange (if still the last)
        replace = (editing is not None and self.session is not None and self.session.tree is not None
                   and len(self.session.tree.exchanges) == editing + 1)
        why = self.session.too_long(count_tokens(text)) if self.session is not None else None
        if why:  # refused at Enter, by the estimate: queued behind a reply, it was refused minutes later
            self.editing = editing  # an /edit goes on
            self.editing_kept = kept_edit
            self.refuse_at_enter(text, why)
            return
        if kept_edit is not None:
            self.finish_kept_edit(kept_edit)
        if editing is not None and not replace:  # its notice said it would replace #N: say it did not
            self.chat_notice(f"#{editing} is no longer the newest exchange: this message is sent as a new one.",
                             "warning")
        if self.send(text, replace=replace) is not None and asks_to_forget(text):
            # the model answers "OK, forgotten" and the request itself is filed (a trial)
            self.chat_notice("The model cannot forget: memory keeps every exchange, this one too. "
                             "/forget <words> or /forget #N erases exchanges for good (it lists them first).")

    def cancel_kept_edit(self) -> None:
        """(UI thread) Esc during an /edit of a message with no answer: it stays kept. The
        input is cleared when it holds that message unchanged: left there, Ctrl+R sent the
        message and the copy was sent again with the next words typed after it (a trial)."""
        text, self.editing_kept = self.editing_kept, None
        prompt = self.query_one("#prompt", PromptInput)
        if prompt.value == text:
            prompt.value = ""
            self.chat_notice(f"Edit cancelled: your message with no answer stays as it was ({self.resend_key()} sends it).")
        else:
            self.chat_notice(f"Edit cancelled: your message with no answer stays as it was ({self.resend_key()} sends it); Enter "
                             "sends what is in the input as a new message.")

    def finish_kept_edit(self, text: str) -> None:
        """(UI thread) The edited message is being sent: the one it replaces is no longer
        kept, in the window or the file."""
        session = self.session
        if session is None or session.take_kept(text) is None:  # /drop let it go, or it was answered
            self.chat_notice("The message you were editing is no longer waiting: this one is sent as a new message.",
                             "warning")
            return
        session.save_kept()
        if session.newest_unanswered == text:
            session.newest_unanswered = None
        for shown in self.query(UserMessage):
            if shown.text == text and shown.state == UNSENT_STATE:
                self.remove_unanswered(shown)  # with its "(no answer — Ctrl+R to retry)" box (a review)
                break
        self.settle_failure_note(text, "Sent since, edited.")
        self.recount_unsent()

    def refuse_at_enter(self, text: str, why: str) -> None:
        """A message too long for the context, said at Enter: back in the input, selected."""
        prompt = self.query_one("#prompt", PromptInput)

        def put_back() -> None:  # after the submit has cleared the input
            prompt.value = text
            prompt.select_all()

        self.call_after_refresh(put_back)
        self.say_not_sent(why, back=True)

    def say_not_sent(self, why: str, back: bool) -> None:
        """A refused message: where it went, and the /edit it belongs to, if any."""
        where = (" It is back in the input, selected: type to replace it, or Backspace to clear it (Ctrl+Z "
                 "brings it back)." if back else
                 " You were typing in the input: ↑ there brings it back.")
        still = (f" Still editing #{self.editing}: Enter sends it in place of the old exchange."
                 if back and self.editing is not None else "")
        self.chat_notice(f"Not sent: {why}.{where}{still}", "warning")
        self.log_line(f"not sent: {why}", "warning")

    def uncover_chat(self) -> None:
        """The inspector closes when it hides most of the chat (a narrow terminal): what is
        sent or run, and its answer, were drawn under it, unseen until Esc (trial)."""
        inspector = self.query_one(NodeInspector)
        chat = self.query_one("#chat")
        if inspector.display and inspector.outer_size.width * 2 > chat.size.width:
            inspector.close()

    def send(self, text: str, forced_query: str | None = None, replace: bool = False) -> UserMessage | None:
        """Show the message at once and queue it: it is sent when no reply streams, a
        session is open and the text model is free (``drain_outbox``). Returns its bubble
        (None: refused)."""
        if self.session is not None and self.session.read_only and not self.reopen_if_writable():
            self.refuse_read_only(text)
            return None
        if not self.follow_moved_file(text):
            return None
        shown = UserMessage(text)
        self.query_one("#chat").mount(shown)
        item = Outgoing(text, forced_query, shown, replace)
        if self.running_queued:  # a queued /retry or /web <query>: before what was typed after it
            self.outbox.insert(0, item)
        else:
            self.outbox.append(item)
        self.drain_outbox()
        return shown

    def reopen_if_writable(self) -> bool:
        """(UI thread) A session read-only because another Nexus wrote it, which has closed
        it since, is opened again to write; True when it is (a message sent meanwhile waits
        in the outbox). A file that cannot be written stays as it is."""
        session = self.session
        if session is None or not session.held_elsewhere:
            return False
        now = sessions.where_now(self.session_path, session.file_id)
        if now is None:  # reopening wrote the message into a new, empty file of that name (a trial)
            session.held_elsewhere = False
            session.read_only_reason = (f"{self.session_path.stem} was deleted in the other window (or moved "
                                        "away): this window shows what it held and stores nothing. /new starts "
                                        "a new session, /open NAME opens another.")
            return False
        if not sessions.writer_free(now):
            return False
        announce = "The other Nexus has closed this session: it is open here to write now."
        if now != self.session_path:
            announce = (f"The other Nexus renamed this session to {now.stem} and has closed it: it is open here "
                        "to write now.")
            self.session_path = now
        old = self.detach_session()  # from now on messages queue until the session is open again
        self.reopen_session(old, announce)
        return True

    def follow_moved_file(self, text: str | None) -> bool:
        """(UI thread) The open session's file renamed by another program (a file manager):
        it is opened again under its new name, and the message ``text`` waits for it; deleted
        or moved out of its folder, nothing more can be stored in it: said, and the text goes
        back to the input. False: not sent (None: Ctrl+R storing again)."""
        session = self.session
        if session is None or session.read_only:
            return True
        now = sessions.where_now(self.session_path, session.file_id)
        if now == self.session_path:
            return True
        if now is None:
            self.chat_notice(f"{'Not sent: t' if text is not None else 'T'}he file of this session, "
                             f"{self.session_path}, was deleted or moved away "
                             "outside Nexus (or another file put in its place), so nothing more can be stored in "
                             "it. This window still shows what it held: /save PATH keeps it as a JSON export "
                             "(/load brings it back); /new starts a new session.", "warning")
            if text is not None:
                self.return_to_input(text)
            return False
        announce = f"The file of this session was renamed outside Nexus, to {now.name}: it is open under that name now."
        parked.move_side_files(self.session_path, now)  # an exchange the old name could not take goes with it
        kept_here = [t for t, reply in session.only_here() if not reply]  # refused by the moved file
        if kept_here:  # taken by the session as it opens again, with the others kept for Ctrl+R
            parked.park(now, parked.read(now) + kept_here)
        self.session_path = now
        self.reopen_session(self.detach_session(), announce)  # the message waits in the outbox meanwhile
        return True

    def refuse_read_only(self, text: str) -> None:
        """A read-only session stores nothing: say why, and give the text back to edit or keep."""
        reason = self.session.read_only_reason or "This session is open read-only."
        self.chat_notice(f"Not sent: {reason}", "warning")
        self.return_to_input(text)

    def drain_outbox(self) -> None:
        """Send the next queued message if nothing stops it; mark the others as waiting.
        Safe from any thread (teammates call it after /ingest gives the text model back)."""
        if threading.get_ident() != self._ui_thread:
            self.call_from_thread(self.drain_outbox)
            return
        try:
            self._drain_outbox()
        finally:
            self.journal_queue()

    def journal_opening(self) -> None:
        """(UI thread) Messages typed while the session opens, in a file of this process
        beside it (``parked.journal_opening``): kill -9 while ``--local`` started its model
        lost them (a clean exit parks them). The file goes once the session is open (its
        queue journal and unsent row take over) or the messages are parked."""
        where, written = self.opening_journal
        opening = self.session is None and not self._leaving and not self.session_unopenable
        path = self.session_path if opening else None
        texts = [item.text for item in self.outbox if not item.command] if path is not None else []
        if where is not None and where != path and written:
            parked.journal_opening(where, [])
            written = []
        if path is not None and texts != written:
            parked.journal_opening(path, texts)
        self.opening_journal = (path, texts)

    def journal_queue(self) -> None:
        """(UI thread) The messages queued behind a reply, in a file beside the session from
        the moment they are queued (``parked.journal_queued``): a Nexus killed meanwhile
        (kill -9, a power cut) keeps them for Ctrl+R; only the one being answered was kept (a
        trial). The one being answered stays in the file until its turn is over. Written
        only when it changes: a message sent at once writes nothing."""
        self.journal_opening()
        where, written = self.queue_journal
        session = self.session
        if session is None or session.read_only or session.tree is None:
            texts: list[str] = []
        else:
            if where != self.session_path:
                if where is not None and written:
                    parked.journal_queued(where, [])  # that session's queue was kept in its own file
                where, written = self.session_path, []
            texts = [item.text for item in self.outbox if not item.command]
            if self.turn is not None and self.turn.text in written:
                texts.insert(0, self.turn.text)
        if texts == written or where is None:
            return
        parked.journal_queued(where, texts)
        self.queue_journal = (where, texts)

    def _drain_outbox(self) -> None:
        if not self.outbox or self._leaving:
            return
        if self.mark_outbox():
            return
        item = self.outbox.pop(0)
        if item.command:  # its place in the queue kept the order it was typed in
            item.shown.remove()
            self.running_queued = True  # what is still queued was typed after it
            try:
                self.run_command(item.text)
            finally:
                self.running_queued = False
            chat = self.query_one("#chat")
            for rest in self.outbox:  # what it said goes above the messages typed after it
                if rest.shown.parent is chat:
                    chat.move_child(rest.shown, after=chat.children[-1])
            self._drain_outbox()
            return
        item.shown.set_state("")
        turn = Turn(item.text, item.forced_query, replace=item.replace)
        self.turn = turn
        # its stall is said before the client's timeout ends it
        reply = AssistantMessage(turn.id, stall_after=min(STALL_SECONDS, self.config.section("server").timeout / 2))
        self.replies[turn.id] = reply
        self.current_reply = reply
        chat = self.query_one("#chat")
        if item.shown.parent is not chat:  # the chat pane was cleared (/new, /clear): show it again
            item.shown = UserMessage(item.text)
            chat.mount(item.shown)
        self.asked[turn.id] = item.shown
        chat.mount(reply, after=item.shown)
        for rest in self.outbox:
            rest.shown.set_state("queued — sent when the reply before it ends")
        self.reply_worker(self.session, turn)

    def defer_command(self, line: str) -> None:
        """A command that needs the session, typed while it opens: queued with the
        messages, in order, and run when the session is open."""
        shown = UserMessage(line)
        self.query_one("#chat").mount(shown)
        self.outbox.append(Outgoing(line, None, shown, command=True))
        self.drain_outbox()

    def wait_for_server(self, problem: str) -> None:
        """(UI thread) The model server went away with messages queued (or was found gone
        mid-reply): they wait, and go in order once it answers again (each was sent and
        failed within a second, sixteen notes of "cannot reach", then came back one Ctrl+R
        at a time, last first: a trial)."""
        self.server_waiting = True
        n = len([item for item in self.outbox if not item.command])
        every = f"Nexus asks every {SERVER_RECHECK_SECONDS:g} s"
        if n:
            go = "waits, and goes" if n == 1 else "wait, and go in order"
            said = f"the {counted(n, 'message')} queued after this one {go} when it answers again"
        else:
            # the failure note above says the message goes again: this one says what else waits
            said = "what you send meanwhile waits, and goes after the message above when it answers again"
        note = self.chat_notice(f"The model server is not answering: {said} ({every}).", "warning")
        if note is not None:
            self.mount_before_waiting(note)  # under the answers of what waits, it stayed there, stale (a review)
        self.server_wait_note = note
        self.log_line(f"model server gone ({problem.rstrip('.')}): {counted(n, 'queued message')} "
                      f"{'waits' if n == 1 else 'wait'} for it", "warning")
        self.mark_outbox()
        self.server_wait_worker()

    @background(group="server-wait", exclusive=True)
    def server_wait_worker(self) -> None:
        from .lifecycle import server_problem

        gone = self.quit_check()
        while not gone():
            time.sleep(SERVER_RECHECK_SECONDS)
            if not gone() and server_problem(self.config.base_url, self.config.api_key) is None:
                self.ui(self.server_back)
                return

    def server_back(self) -> None:
        """(UI thread) The model server answers again: the waiting messages go."""
        if not self.server_waiting:
            return
        resends = self.session is not None and self.session.pending is not None and self.turn is None
        back = self.server_answers(resends)
        if back is not None:
            self.mount_before_waiting(back)  # said above what goes now
        if resends:
            self.resent_when_back = self.session.pending
            for note, said in self.failure_notes.get(self.resent_when_back, []):
                if note.is_attached:  # it said "it goes again when the server answers": it went
                    note.say(f"{said} Sent again when the model server answered.")
            self.resend_pending(first=True)  # the one that found it gone goes first, as it was written first
        self.drain_outbox()

    def server_answers(self, resends: bool = False) -> Notice | None:
        """(UI thread) The server-wait is over (it answered the check, or a Ctrl+R): its note
        says so instead of "is not answering" (a new note when it is gone), and is returned;
        ``resends``: the message that found it gone goes again too. "The waiting messages go
        now" was said when none waited (a Ctrl+R answered, nothing queued behind it)."""
        self.server_waiting = False
        n = len([item for item in self.outbox if not item.command]) + resends
        said = ("The model server answers again." if n == 0 else
                "The model server answers again: the waiting message goes now." if n == 1 else
                "The model server answers again: the waiting messages go now, in order.")
        note, self.server_wait_note = self.server_wait_note, None
        if note is None or not note.is_attached:
            return self.chat_notice(said)
        note.say(said)
        note.remove_class("warning")
        note.add_class("info")
        return note

    def mark_outbox(self) -> bool:
        """(UI thread) Mark each queued message with what it waits for; False when nothing
        stops the next one from going."""
        if self.turn is None and self.session is not None and self.embedder_state != "loading" \
                and not self.vision_busy and not self.model_restarting and not self.server_waiting:
            return False
        why = ("waiting — /ingest is using the vision model; sent when the text model is back"
               if self.vision_busy else "waiting — the bundled model is starting again; sent when it is back"
               if self.model_restarting
               else "waiting — the model server is not answering; sent when it answers again"
               if self.server_waiting and self.turn is None
               # the reply is in, and the memory model decides where to file it (a slow one took
               # 19 s, under "when the reply before it ends" below a finished reply: a trial)
               else "queued — sent once the last exchange is filed in memory (the memory model is placing it)"
               if self.turn is not None and self.turn.outcome == "answered"
               else "queued — sent when the reply before it ends" if self.turn is not None
               else "waiting — no session is open: sent in the one /new or /open opens" if self.session_unopenable
               else "queued — sent when the session is open" if self.session is None
               else "queued — sent when the embedding model has loaded")
        for item in self.outbox:
            item.shown.set_state(why.replace("sent when", "runs when") if item.command else why)
        return True

    @background(group="reply")
    def reply_worker(self, session: ChatSession, turn: Turn) -> None:
        try:
            session.send(turn.text, turn.forced_query, turn=turn)
        except Exception as exc:  # reported by the app's one handler, which hands it to the turn
            raise TaskFailed(subject=turn) from exc

    def reply_worker_failed(self, text: str, exc: BaseException) -> None:
        """(from Failures) The turn's reply fails in the chat like any failed reply."""
        turn = getattr(exc, "subject", None)
        cause = exc.__cause__ or exc
        if turn is None:
            self.chat_notice(text, "error")
            return
        self.post_event(ev.ReplyFailed(turn.text, turn.partial, f"{type(cause).__name__}: {cause}", turn.id,
                                       kind=failure_kind(cause)))

    # --- the reply's events, one handler per kind (nexus/messages.py) ---------------------------

    def reply_widget(self, turn: int) -> AssistantMessage | None:
        """The turn's reply in the chat pane; None once the pane was cleared (/new, /clear)."""
        reply = self.replies.get(turn)
        return reply if reply is not None and reply.is_attached else None

    def resend_key(self) -> str:
        """The resend key as the chat says it ("Ctrl+R"; the notices said "ctrl+r")."""
        return self.key_name("resend")

    async def on_reasoning_chunk_message(self, message: M.ReasoningChunkMessage) -> None:
        """reasoning_content: live in the reply's folded section."""
        if not self.on_screen(message):
            return
        reply = self.replies.get(message.event.turn)
        if reply is not None:
            await reply.think(message.event.text)

    async def on_reply_chunk_message(self, message: M.ReplyChunkMessage) -> None:
        reply = None if self._leaving else self.reply_widget(message.event.turn)
        if reply is not None:
            await reply.write(message.event.text)

    async def on_reply_finished_message(self, message: M.ReplyFinishedMessage) -> None:
        e = message.event
        if self._leaving:  # the exchange is stored by the worker; the screen is going away
            return
        self.server_answered = True
        self.update_header()  # "auto" becomes the model the server answered with
        reply = self.reply_widget(e.turn)
        if reply is not None:
            if e.empty:
                key = self.resend_key()
                await reply.finish("", f"({e.note or 'no answer'} — {key} to retry)")
            else:
                note = e.note or ("reply cancelled: partial text kept" if e.cancelled else "")
                await reply.finish(e.text, note, e.sources)
        if self.server_waiting and not e.empty:  # answered (a Ctrl+R): the waiting ones need not wait on
            self.server_answers()
        if e.empty:
            self.log_line(f"the model answered {'only reasoning' if e.note else 'nothing'}: not stored; the message "
                          "is kept for resend", "warning")
            self.local_model_lost()  # an empty answer from a server that died as it began
        elif self.outbox:
            self.mark_outbox()  # what the queued messages wait for now: the filing

    async def on_reply_failed_message(self, message: M.ReplyFailedMessage) -> None:
        e = message.event
        if self._leaving:
            log.error("while leaving: %s", e.problem)
            return
        reply = self.reply_widget(e.turn)
        if reply is not None and e.partial:
            await reply.finish(e.partial, "reply interrupted")
        elif reply is not None:
            await reply.remove()  # an empty reply box: the notice below says what happened
        if e.stays:
            self.chat_notice(f"No new reply: {e.problem.rstrip('.')}. The exchange /retry was to replace is as it was: "
                             "/retry tries again.", "error")
            self.log_line(f"reply failed: {e.problem}", "error")
            return
        if e.kept and self.local_model_lost():
            self.log_line(f"reply failed: {e.problem}", "error")
            return
        if e.kept:
            said = f"No reply: {e.problem.rstrip('.')}."
            waits = self.waits_for_server(e.user, e.kind)
            # the server-wait sends it again itself: "press Ctrl+R" beside it said two things (a review)
            how = ("it goes again, first, when the model server answers." if waits or self.server_waiting
                   else f"press {self.resend_key()} to send it again.")
            came = ""
            if e.partial.strip():  # "No reply" under half a reply: what came stays in sight, unstored
                said = f"Reply interrupted: {e.problem.rstrip('.')}."
                came = " The text that came stays above (not stored)."
            if e.kind is FailureKind.KEY_REFUSED:  # Ctrl+R alone cannot help (a re-trial)
                how = (f"set the key (OPENAI_API_KEY in the environment or .env, or api_key in nexus.toml's "
                       f"[server]) and restart Nexus; then {self.resend_key()} sends it.")
            kept = "kept"
            if self.session is not None and (e.user, "") in self.session.only_here():
                # "kept" read as safe: the file refused it too (a full disk), and a quit loses it
                kept = "kept in this window only (the session file could not take it)"
            note = self.chat_notice(f"{said}{came} Your message is {kept} — {how}", "error")
            if note is not None:  # each failure of it: all are said again when it is answered or dropped
                # said under its own reply, above what was queued after it: there, the answers of those
                # came above it, and it sat stranded under them (a review)
                self.mount_before_waiting(note)
                self.failure_notes.setdefault(e.user, []).append((note, said))
            resend = self.resend_note
            if resend is not None and resend.is_attached and self.session is not None and e.user in self.session.kept:
                # it said "sends the next once this one is answered": this one failed, and goes first again
                left = len(self.session.kept) - 1
                if left:
                    resend.say(f"{counted(left, 'more message')} {'waits' if left == 1 else 'wait'} without an "
                               f"answer: {self.resend_key()} sends this one again first (/drop forgets it).")
            if waits:
                self.wait_for_server(e.problem)  # the messages queued behind it are not sent to fail too
        else:  # refused before sending: nothing failed at the server
            was_edit = self.turn is not None and self.turn.id == e.turn and self.turn.replace
            back = self.give_back(e.turn, e.user)
            if back and was_edit and self.session is not None and self.session.tree is not None \
                    and self.session.tree.exchanges:
                # the edit goes on: its shorter words still replace #N (they went as a new
                # exchange, unsaid, in a trial)
                self.editing = self.session.tree.exchanges[-1].index
            self.say_not_sent(e.problem, back)
            return
        self.log_line(f"reply failed: {e.problem}", "error")

    def waits_for_server(self, user: str, kind: FailureKind) -> bool:
        """(UI thread) A failure of ``user``'s message that starts the server-wait: the
        server found gone with messages queued, or found gone mid-reply (the next message
        was sent to fail) -- not for the message sent again when it came back (a server
        that crashes on it and is restarted would be crashed for ever)."""
        gone = kind in (FailureKind.UNREACHABLE, FailureKind.LOST_MID_REPLY)  # a server killed mid-reply too
        waits = (bool(self.outbox) and gone) or kind is FailureKind.GONE_MID_REPLY
        return waits and not self.server_waiting and user != self.resent_when_back

    def give_back(self, turn: int, text: str) -> bool:
        """A message refused before sending (too long) is not kept: it goes back to the
        input, selected, when the input is empty (to shorten, or clear with one key: a
        trial took 32,000 Backspaces to clear a refused paste); otherwise its bubble stays,
        to copy. True when it went back."""
        prompt = self.query_one("#prompt", PromptInput)
        if prompt.value.strip():
            return False
        prompt.value = text
        prompt.select_all()
        asked = self.asked.get(turn)
        if asked is not None and asked.is_attached:
            asked.remove()
        return True

    def on_store_failed_message(self, message: M.StoreFailedMessage) -> None:
        e = message.event
        if self._leaving:
            log.error("while leaving: %s", e.problem)
            return
        if e.kept_on_disk:
            self.chat_notice(f"This exchange could not be stored: {e.problem.rstrip('.')}. It is kept here — press "
                             f"{self.resend_key()} to store it again (the model is not asked again).", "error")
        else:  # said as it is: "kept here" read as safe, and a /quit lost it (a trial on a full disk)
            self.chat_notice(f"This exchange could not be stored: {e.problem.rstrip('.')}. Nor could it be written "
                             "beside the session: it is only in this window. Free some space, then press "
                             f"{self.resend_key()} to store it (the model is not asked again); quitting before "
                             "that would lose it.", "error")
        self.log_line(f"storing failed: {e.problem}", "error")

    def on_turn_settled_message(self, message: M.TurnSettledMessage) -> None:
        """The turn is over and its exchange stored (or kept): the next queued message may go."""
        turn = message.event.turn
        if self.replies.pop(turn, None) is self.current_reply:
            self.current_reply = None
        asked = self.asked.pop(turn, None)
        if asked is not None and asked.is_attached and self.session is not None and asked.text in self.session.kept:
            asked.set_state(UNSENT_STATE)  # no answer: Ctrl+R sends it again, and this one goes
        elif asked is not None and asked.is_attached and message.event.exchange >= 0 and asked.parent is not None:
            if message.event.replaced:
                self.mark_replaced_above(asked, message.event.exchange)
            asked.parent.mount(ExchangeHead(message.event.exchange, when(message.event.timestamp)), before=asked)
        if self.turn is not None and self.turn.id == turn:
            self.turn = None
            self.resent_when_back = None  # its failure, if any, was said (``on_reply_failed``)
        if not self._leaving:
            self.refresh_unanswered(answered=message.event.exchange >= 0)
            self.drain_outbox()
        else:
            self.journal_queue()

    def refresh_unanswered(self, answered: bool) -> None:
        """After a turn, what the chat says of messages without an answer is what is so now:
        a bubble still marked "not answered" whose words were since answered (typed again)
        goes, and "… once this one is answered" under the answer it got says what is left
        (both stayed, stale: a trial)."""
        s = self.session
        if s is None:
            return
        kept = list(s.kept)
        for bubble in [m for m in self.query(UserMessage) if m.state == UNSENT_STATE]:
            if bubble.text in kept:
                kept.remove(bubble.text)
            else:
                self.remove_unanswered(bubble)
        self.recount_unsent()
        if answered:
            for text in [t for t in self.failure_notes if t not in s.kept]:
                self.settle_failure_note(text, "Sent again since, and answered.")
        note = self.resend_note
        if answered and note is not None and note.is_attached:
            left = len(s.kept)
            if left:
                note.say(f"{counted(left, 'more message')} {'waits' if left == 1 else 'wait'} without an answer: "
                         f"{self.resend_key()} sends the next.")
            else:
                note.remove()
                self.resend_note = None

    def settle_failure_note(self, text: str, since: str) -> None:
        """A failure's note no longer offers Ctrl+R for a message that is answered or dropped."""
        for note, said in self.failure_notes.pop(text, []):
            if note.is_attached:
                note.say(f"{said} {since}")

    def mark_replaced_above(self, asked: UserMessage | None, index: int) -> None:
        """Dim what the chat still shows above ``asked`` (None: anywhere) of exchange
        ``index``, which /retry, /edit or /undo-retry has just replaced: a reopened one, or
        a live one (its head, message and reply). It read as part of the conversation
        until a reopen."""
        chat = list(self.query_one("#chat").children if asked is None else asked.parent.children)
        above = chat if asked is None else chat[: chat.index(asked)]
        for k, widget in enumerate(above):
            if isinstance(widget, PastExchangeView) and widget.exchange.index == index:
                widget.mark_replaced()
            elif isinstance(widget, ExchangeHead) and widget.index == index and "replaced" not in widget.classes:
                widget.mark_replaced()
                for after in above[k + 1:]:  # its message and its reply (notes may sit between)
                    if isinstance(after, (ExchangeHead, PastExchangeView)):
                        break
                    if isinstance(after, (UserMessage, AssistantMessage)):
                        after.add_class("replaced")
                    if isinstance(after, AssistantMessage):
                        break

    def show_forgotten(self, indices: set[int], shown=lambda note: False) -> None:
        """(UI thread) The chat no longer shows what /forget erased: each exchange's head
        stays, saying so; its message and reply go, and the notes ``shown(text)`` names."""
        chat = list(self.query_one("#chat").children)
        for k, widget in enumerate(chat):
            if isinstance(widget, Notice) and shown(widget.plain):
                widget.remove()
            elif isinstance(widget, UserMessage) and widget.text.lstrip().startswith("/forget"):
                widget.remove()  # a /forget queued behind a reply: it may name the words
            elif isinstance(widget, PastExchangeView) and widget.exchange.index in indices:
                widget.mark_forgotten()
            elif isinstance(widget, ExchangeHead) and widget.index in indices:
                widget.mark_forgotten()
                for after in chat[k + 1:]:  # its message and its reply (notes may sit between)
                    if isinstance(after, (ExchangeHead, PastExchangeView)):
                        break
                    if isinstance(after, (UserMessage, AssistantMessage)):
                        after.remove()
                    if isinstance(after, AssistantMessage):
                        break

    def forget_prompts(self, gone) -> None:
        """(UI thread) ↑ no longer recalls the prompts ``gone(text)`` names, here or after
        a restart."""
        self.query_one(PromptInput).prompts.forget(gone)

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

    def take_outbox(self) -> tuple[ChatSession | None, Path, list[Outgoing]]:
        """(UI thread) The queued messages, the session they belong to (None while it
        opens) and its path; the outbox is empty after."""
        items, self.outbox = self.outbox, []
        self.journal_queue()  # kept from here on as they are stored unsent (a crash between: the file has them)
        if self.session_unopenable:  # it never opened: the next session that does takes them
            return None, sessions.no_session_path(), items
        return self.session, self.session_path, items

    def take_queued_messages(self) -> list[Outgoing]:
        """(UI thread) The queued messages out of the outbox (commands stay to run)."""
        messages = [item for item in self.outbox if not item.command]
        self.outbox = [item for item in self.outbox if item.command]
        self.journal_queue()
        return messages

    def store_outbox(self) -> int:
        """(the last moments, blocking: the UI thread or the signal's) ``store_unsent`` of the outbox."""
        return self.store_unsent(*self.take_outbox())

    @staticmethod
    def store_unsent(session: ChatSession | None, path: Path, items: list[Outgoing]) -> int:
        """Leaving with messages still queued: each is kept unsent in the session file,
        shown again and sent with Ctrl+R when the session reopens (beside the file, while
        the session was still opening: ``nexus.parked``). Not an exchange: a message
        nobody answered is not memory, and filing it could ask the memory model."""
        return Replies.keep_texts(session, path, [item.text for item in items if not item.command])

    @staticmethod
    def keep_texts(session: ChatSession | None, path: Path, texts: list[str]) -> int:
        """``store_unsent`` of these texts (a command not run yet is no message: left out)."""
        if not texts:
            return 0
        if session is None or session.tree is None or session.tree.vdb.closed:
            if not parked.park(path, texts):
                return 0
            parked.journal_opening(path, [])  # parked: this process's file of them goes
            if path == sessions.no_session_path():
                return len(texts)
            try:  # the next start resumes this session, even if its file is not made yet
                sessions.remember(path)
            except OSError:
                pass
            return len(texts)
        session.keep_unsent(texts)
        return len(texts)

    def keep_while_leaving(self, text: str) -> None:
        """A message that reached the app as it left (it was mounted on a chat that was
        going: a crash, and the message lost). Kept unanswered for Ctrl+R at the next
        start, not shown; a command is not run."""
        if text.strip().startswith("/"):
            message = C.as_message(text)
            if message is None:
                return
            text = message
        self.keep_texts(self.session, self.session_path, [text])

    def show_unsent(self, texts: list[str], after: dict[str, int] | None = None) -> None:
        """(UI thread, on open) Messages the session kept unsent, each where it was written:
        above the first exchange shown that was stored after it (``after``: that index; one
        from before it was recorded, or written after all, goes under the history). They were
        all drawn under the last exchange: one that failed before an answered one too."""
        chat = self.query_one("#chat")
        past = list(chat.query_children(PastExchangeView))
        for text in texts:
            at = (after or {}).get(text)
            before = next((v for v in past if at is not None and v.exchange.index >= at), None)
            shown = UserMessage(text)
            if before is None:
                chat.mount(shown)
            else:
                chat.mount(shown, before=before)
            shown.set_state(UNSENT_STATE)
        self.unsent_notice = self.chat_notice(self.unsent_note(len(texts)), "warning")
        self.keep_in_sight()

    def unsent_note(self, n: int) -> str:
        key = self.resend_key()  # as the "(no answer — Ctrl+R …)" note
        what = "1 message" if n == 1 else f"{n} messages"
        # no claim of when: it is also said after /rename, for a message that failed in this run
        said = f"{what} above {'has' if n == 1 else 'have'} no answer yet"
        if self.session is not None and self.session.read_only:  # Ctrl+R would only say "read-only" (a trial)
            return f"{said}: this session is open read-only here, so {'it waits' if n == 1 else 'they wait'} " \
                   "for the Nexus that writes it."
        # no claim of which goes first: a failure since goes before these (it said "the first": trial)
        return f"{said}: press {key} to send it." if n == 1 else \
            f"{said}: {key} sends them again, one each time."

    def recount_unsent(self) -> None:
        """A kept message was sent again: the note over them counts the ones left, and goes
        with the last (it stayed, saying "message above" over the message sent below it)."""
        notice = self.unsent_notice
        if notice is None or not notice.is_attached:
            return
        # the kept messages shown *above* the note, each counted once (one message can be shown
        # twice: "2 above", a trial); a failure since, shown below it, is not "above" (trial)
        kept = list(self.session.kept) if self.session is not None else []
        chat = list(notice.parent.children) if notice.parent is not None else []
        left = 0
        for widget in chat[: chat.index(notice)] if notice in chat else []:
            if isinstance(widget, UserMessage) and widget.state == UNSENT_STATE and widget.text in kept:
                kept.remove(widget.text)
                left += 1
        if left:
            notice.say(self.unsent_note(left))
        else:
            notice.remove()
            self.unsent_notice = None

    def action_resend(self) -> None:
        """Ctrl+R: an exchange whose storing failed is stored again (the model is not asked
        again); otherwise a message without an answer is sent again: the one whose failure
        was said last, else the oldest (``ChatSession.pending``)."""
        self._on_main_screen()
        s = self.session
        if s is not None and (not self.follow_moved_file(None) or self.session is not s):
            return  # nothing more can be stored in it, or it opens again under its new name (storing what it kept)
        if s is not None and s.unstored:
            self.store_again_worker(s)
        elif s is not None and s.kept:
            # waiting for the server (or the bundled model) that failed it, it was to go first
            # when it is back: sent last, it went after the messages typed since (a review)
            self.resend_pending(first=self.server_waiting or self.model_restarting)
        elif s is not None and s.tree is not None and s.tree.exchanges \
                and s.tree.exchanges[-1].assistant.endswith(CANCELLED_MARK.strip()):
            # its message was answered in part and stored so: /retry is the way to ask again
            # (a trial read "Nothing to resend." as the message lost)
            self.chat_notice(f"Nothing to resend: #{s.tree.exchanges[-1].index}'s reply was cut off and stored "
                             "as far as it got; /retry asks again.")
        else:
            self.chat_notice("Nothing to resend.")

    def resend_pending(self, first: bool = False) -> None:
        """Send again the message ``ChatSession.pending`` names; ``first``: ahead of the
        messages waiting (the one that found the bundled server dead goes before those typed
        after it)."""
        text = self.session.take_kept()  # kept again if this one fails too
        if text is None:
            return
        if self.editing_kept == text:
            # the edit ends: Enter after it stored the edited words beside these, unsaid (a trial)
            self.editing_kept = None
            self.chat_notice(f"{self.resend_key()} sent the message you were editing as it was; the edit ended, and Enter sends "
                             "what is in the input as a new message.")
        gone = [old for old in self.query(UserMessage) if old.text == text and old.state == UNSENT_STATE]
        for old in gone:
            self.remove_unanswered(old)  # shown again below, as it is sent
        self.recount_unsent()
        replace = self.session.replaces(text)  # a failed /retry or /edit, sent again, still replaces
        if first:
            self.send_first(text, replace)
        else:
            self.send(text, replace=replace)
        left = len(self.session.kept)
        # each Ctrl+R sends one: say that more wait (a trial found the second by chance), once:
        # the note of the Ctrl+R before goes (four in a row read as four messages sent; trial)
        if self.resend_note is not None and self.resend_note.parent is not None:
            self.resend_note.remove()
        self.resend_note = None
        if left:  # the one sent now goes first again if it fails again (``pending``)
            waits = "waits" if left == 1 else "wait"
            self.resend_note = self.chat_notice(f"{counted(left, 'more message')} {waits} without an answer: "
                                                f"{self.resend_key()} sends the next once this one is answered "
                                                "(/drop forgets this one if it fails again).")

    def send_first(self, text: str, replace: bool = False) -> None:
        """``send``, ahead of the messages waiting in the outbox (shown above them too)."""
        shown = UserMessage(text)
        self.mount_before_waiting(shown)
        self.outbox.insert(0, Outgoing(text, None, shown, replace))
        self.drain_outbox()

    def mount_before_waiting(self, widget) -> None:
        """Mount ``widget`` in the chat above the first message still waiting to go."""
        chat = self.query_one("#chat")
        waiting = next((item.shown for item in self.outbox if item.shown.parent is chat), None)
        if waiting is None:
            chat.mount(widget)
        elif widget.parent is chat:
            chat.move_child(widget, before=waiting)
        else:
            chat.mount(widget, before=waiting)

    def remove_unanswered(self, asked: UserMessage) -> None:
        """A message about to be sent again leaves the chat with its empty "(no answer)" box;
        one with a partial reply under it (interrupted) stays above it, marked."""
        siblings = list(asked.parent.children) if asked.parent is not None else []
        at = siblings.index(asked) if asked in siblings else -1
        between: list = []  # notes of that attempt (a failed web search) sit above its box
        after = None
        for w in siblings[at + 1:] if at >= 0 else []:
            if not isinstance(w, Notice):
                after = w
                break
            between.append(w)
        if isinstance(after, AssistantMessage) and after.text.strip():
            asked.set_state("sent again below")
            return
        if isinstance(after, AssistantMessage):
            for w in [*between, after]:  # they stayed above the answer of the resend (trial)
                w.remove()
        asked.remove()

    @background(group="reply-store")
    def store_again_worker(self, session: ChatSession) -> None:
        n = len(session.unstored)
        done, problem = session.store_unstored()
        if problem:
            self.call_from_thread(self.chat_notice, f"Stored {done} of {n}; still not stored: {problem}. "
                                  f"Kept — press {self.resend_key()} to try again.", "error")
        else:
            self.call_from_thread(self.chat_notice, f"Stored {counted(done, 'kept exchange')}.")

"""Slash commands of the conversation: /help, /web, /model, /system, /set, /retry, /undo-retry, /edit,
/clear, /quit."""

from __future__ import annotations

from textual.worker import Worker, WorkerState

from trace_core.llm import shown_url

from . import commands as C
from .abandon import Abandoned, call_abandonable
from .chat import ChatSession
from .failures import TaskFailed, background
from .history import past_exchange
from .keys import ALL_KEYS, key_label, key_said
from .replies import UNSENT_STATE
from .text import quoted
from .widgets import PastExchangeView, PromptInput, UserMessage, two_columns


class ChatCommands:
    """NexusApp's conversation commands (cmd_* run by run_command)."""

    def help_keys(self) -> list[tuple[str, str]]:
        """/help's keys: every key the app and the input bind for Nexus (Ctrl+C was missing,
        bound as it is), and the input's own keys the chat's notes name (F7, Ctrl+Z)."""
        return ([("Enter", "send"), ("↑ / ↓", "earlier / later prompts (from the first / last line)"),
                 ("F7", "select the whole input (the input's own key)"),
                 ("Ctrl+Z", "undo in the input (the input's own key: a cleared input comes back)"),
                 ("Ctrl+C", "copy the text selected in the input, or with the mouse in the chat; with none "
                  "selected: stop the reply in flight, or say how to quit"),
                 (key_said(self.COMMAND_PALETTE_BINDING), "command palette")]
                + [(key_label(k.action, self.keymap), k.description) for k in ALL_KEYS.values()])

    def cmd_help(self, args: list[str]) -> None:
        commands = [(c.usage, C.help_said(c, key_label("resend", self.keymap))) for c in C.COMMANDS]
        keys = self.help_keys()
        plain = "\n".join(["Commands:"] + [f"  {u:<38} {h}" for u, h in commands]
                          + ["Keys (remap in [keys]): " + ", ".join(f"{k}: {d}" for k, d in keys)])
        self.chat_notice(plain, body=two_columns([("Commands", commands), ("Keys (remap them in [keys])", keys)]))

    def cmd_web(self, args: list[str]) -> None:
        s = self.need_session()
        turning_off = len(args) == 1 and args[0].lower() == "off"
        if args and not turning_off and not s.web_allowed:  # --no-web: "never search the web"
            self.chat_notice("Web search is off for this run (--no-web, or web.enabled = false in the settings): "
                             "nothing is searched, /web <query> included. Start Nexus without it to search.", "warning")
            return
        if not args and not s.web_allowed:
            self.chat_notice("Web routing is off for this run (--no-web, or web.enabled = false in the settings): "
                             "nothing is searched.")
            return
        if not args:  # where it stands, and how to change it
            state = "on: a question that needs current information is searched before the reply" \
                if s.web_enabled else "off: nothing is searched unless you ask with /web <query>"
            self.chat_notice(f"Web routing is {state}. Usage: {C.BY_NAME['web'].usage}")
            return
        if len(args) == 1 and args[0].lower() in ("on", "off"):  # "/web ON" too: it was searched for "ON"
            state = args[0].lower()
            s.set_web(state == "on")
            self.chat_notice(f"Web routing is {state} (stored with the session)." if not s.read_only
                             else f"Web routing is {state} in this window (a read-only session stores nothing).")
            return
        query = " ".join(args)
        self.send(query, forced_query=query)

    def cmd_model(self, args: list[str]) -> None:
        if len(args) > 1:
            raise C.UsageError(C.BY_NAME["model"].usage)
        s = self.need_session()
        if not args:
            # said at once, and Esc stops waiting: a server that never answers held /model
            # in silence (a trial)
            self.show_progress("models", f"Asking the server at {shown_url(self.config.base_url)} for its models… "
                               f"({self.key_name('cancel')} stops waiting)")
            self.model_worker(s)
            return
        s.use_chat_model(args[0])
        self.update_header()
        self.chat_notice(f"Chat model is now {args[0]}.")  # at once: the server's list may take seconds
        self.log_line(f"chat model: {args[0]} (/model)")
        self.model_check_worker(s, args[0])

    @background(group="models")
    def model_check_worker(self, s: ChatSession, name: str) -> None:
        """/model NAME: set, and checked against the server's list (a name it does not list
        fails at the next message, or — llama.cpp — is answered by the model it has)."""
        try:  # a quit does not wait for a stalled server's list (it held /quit 15 s: a trial)
            models = call_abandonable(s.list_models, give_up=self.quit_check(), name="list models")
        except Abandoned:
            return
        except Exception as exc:
            self.call_from_thread(self.chat_notice, f"{name} could not be checked against the server's models: "
                                  f"{exc}.", "warning")
            return
        self.call_from_thread(self.models_listed, models)
        if name in models or not models:
            return
        self.call_from_thread(self.chat_notice, f"Chat model {name}: the server at "
                              f"{shown_url(self.config.base_url)} does not list it (it lists {', '.join(models)}): replies "
                              "may fail, or come from another model. /model alone lists them.", "warning")

    @background(group="models")
    def model_worker(self, s: ChatSession) -> tuple[list[str], str] | None:
        """/model: the server's models and the chat model, shown as the worker ends
        (``on_worker_state_changed``; fails in words: "Cannot list models: …"); Esc
        (``stop_model_list``) and a quit cancel the worker, which stops waiting."""
        try:
            models = call_abandonable(s.list_models, give_up=self.quit_check(), name="list models")
        except Abandoned:
            return None
        return models, s.model or "(first listed)"

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """/model's list is shown when its worker has ended, on the UI thread, as Esc is
        handled: Esc comes before (it stops waiting, and no list comes) or after (too late
        to stop it: the list alone). Shown from the worker's thread, an Esc landing as it
        came said "Stopped waiting" and the list came under it (a review)."""
        worker = event.worker
        if worker.name != "model_worker" or event.state is not WorkerState.SUCCESS or not worker.result:
            return
        models, current = worker.result
        self.models_listed(models)
        self.end_progress("models", f"Chat model: {current}\nAvailable: " + ", ".join(models), "info", True, False)

    def stop_model_list(self) -> bool:
        """(UI thread) Esc while /model waits for the server's list: it stops waiting. True
        when it was waiting."""
        waiting = [w for w in self.workers if w.name == "model_worker" and not w.is_finished]
        for worker in waiting:
            worker.cancel()  # its quit_check() gives up the call in flight
        if waiting:
            self.end_progress("models", f"Stopped waiting for the model list ({self.key_name('cancel')}).")
        return bool(waiting)

    def models_listed(self, models: list[str]) -> None:
        self.models_cache = list(models)  # Tab after /model completes these
        self._models_fetching = False

    def cmd_system(self, args: list[str]) -> None:
        session = self.need_session()
        if not args:
            text = session.settings.system
            self.chat_notice(f"System prompt of {self.session_path.stem}:\n{text}" if text else
                             "No system prompt in this session. /system <text> sets one (sent before the memory).")
            return
        if args[0] == "--clear" and len(args) > 1:  # "--clear extra" was set as the prompt's text (a trial)
            raise C.UsageError(C.BY_NAME["system"].usage)
        C.refuse_unknown_options("system", args[:1], ("--clear",))
        text = "" if args == ["--clear"] else self.last_command.raw
        problem = session.system_prompt_problem(text)
        if problem:  # the text goes back to the input to shorten (it was gone: a trial)
            # selected (one key clears it), and Ctrl+Z brings it back: one Backspace lost 2,700
            # words to a trial that did not know
            self.chat_notice(f"System prompt not set: {problem}. It is back in the input to shorten, selected: "
                             "a key typed replaces it, and Ctrl+Z brings it back.", "warning")
            self.return_to_input(f"/system {text}")
            return
        session.set_system_prompt(text)
        self.chat_notice("System prompt cleared." if not text else
                         f"System prompt set for {self.session_path.stem} (used in every reply, before the memory).")

    def cmd_set(self, args: list[str]) -> None:
        from .session_settings import LIMITS

        session = self.need_session()
        allowed = "; ".join(f"{n}: {lim.describe()}" for n, lim in LIMITS.items())
        if not args or (len(args) == 1 and args[0] in LIMITS):  # what they are now, and how to change them
            now = session.sampling(session.limits()[1])
            own = {n for n in LIMITS if getattr(session.settings, n) is not None}
            names = args or list(LIMITS)  # "/set temperature" answered with the usage alone (a trial)
            said = ", ".join(f"{n} {now[n]:g}" + (" (this session's)" if n in own else "") if n in now
                             else f"{n}: the server's default" for n in names)
            self.chat_notice(f"Sampling now: {said}. Usage: {C.BY_NAME['set'].usage} — {allowed}")
            return
        if len(args) != 2:
            raise C.UsageError(f"{C.BY_NAME['set'].usage} — {allowed}")
        try:
            value = session.set_value(args[0], args[1])
        except ValueError as exc:
            self.chat_notice(f"Not set: {exc}.", "warning")
            return
        if value is None:
            now = session.sampling(session.limits()[1]).get(args[0])
            self.chat_notice(f"{args[0]} is back to the default for {self.session_path.stem}: "
                             + (f"{now:g} (the settings')." if now is not None else "the server's own."))
            return
        said = f"{args[0]} = {value:g} for {self.session_path.stem} (stored with the session)."
        ctx, used = session.limits()
        if args[0] == "max_tokens" and value and used < value:  # sent as 4,096, unsaid (a trial)
            said += (f" Replies get at most {used:,} tokens: half of the model's context ({ctx:,}, "
                     "models.context_tokens), the rest is the prompt's.")
        self.chat_notice(said)

    def _last_exchange(self, what: str):
        session = self.need_session()
        if session.read_only:  # said before anything else: nothing here can replace an exchange
            reason = session.read_only_reason or "This session is open read-only."
            self.chat_notice(f"Cannot {what} here: {reason}", "warning")
            return None
        if self.turn is not None or (self.outbox and not self.running_queued):
            self.chat_notice(f"A reply is on its way: {what} when it has ended.", "warning")
            return None
        if not session.tree or not session.tree.exchanges:
            self.chat_notice(f"Nothing to {what} yet: no exchange in this session.", "warning")
            return None
        last = session.tree.exchanges[-1]
        if last.forgotten:  # /retry sent "[forgotten]" to the model, /edit put it in the input (a trial)
            self.chat_notice(f"Cannot {what}: #{last.index}, the newest exchange, was forgotten.", "warning")
            return None
        return last

    def cmd_retry(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["retry"].usage)
        last = self._last_exchange("retry")
        if last is None:
            return
        self.chat_notice(f"Regenerating the reply to #{last.index}: the new one replaces it in memory "
                         "(/undo-retry then puts the one above back).")
        shown = self.send(last.user, replace=True)
        if shown is not None:
            shown.regenerated = True

    def cmd_undo_retry(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["undo-retry"].usage)
        if self._last_exchange("put back") is None:
            return
        self.undo_retry_worker(self.need_session())

    @background(group="memory", exclusive=True)
    def undo_retry_worker(self, session: ChatSession) -> None:
        try:
            node, k, n = session.put_back_version()
        except ValueError as exc:  # nothing replaced the newest exchange: said, no traceback
            raise TaskFailed(level="warning") from exc
        self.call_from_thread(self.version_put_back, node, k, n)

    def version_put_back(self, node, k: int, n: int) -> None:
        """The exchange /undo-retry put back, shown below what it replaced (dimmed)."""
        chat = self.query_one("#chat")
        self.mark_replaced_above(None, node.index)
        self.chat_notice(f"Put back version {k} of {n} of #{node.index} in memory"
                         + (" (/undo-retry again: the one before it)." if n > 2 else
                            " (/undo-retry again: the other one)."))
        chat.mount(PastExchangeView(past_exchange(node)))
        chat.scroll_end(animate=False)
        self.refresh_tree()

    def cmd_edit(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["edit"].usage)
        if self.edit_unanswered():
            return
        last = self._last_exchange("edit")
        if last is None:
            return
        prompt = self.query_one("#prompt", PromptInput)
        self.call_after_refresh(setattr, prompt, "value", last.user)  # after the submit clears the input
        prompt.focus()
        self.editing = last.index
        self.chat_notice(f"Editing #{last.index}: Enter sends it in place of the old exchange.")

    def edit_unanswered(self) -> bool:
        """/edit when the newest message written got no answer: that message goes to the
        input; it stays kept until the edit is sent in its place (Esc leaves it as it was).
        False when it was answered. A /retry's message was written before: after "no
        answer", /retry and /undo-retry, /edit took the retried exchange (a trial)."""
        shown = [m for m in self.query(UserMessage) if not m.regenerated]
        if self.session is None:
            return False
        if not shown:  # /clear took the bubbles: the session knows (a trial's /edit took an answered #N)
            text = self.session.newest_unanswered
            if text is None or text not in self.session.kept:
                return False
        else:
            newest = shown[-1]
            if newest.state != UNSENT_STATE or newest.text not in self.session.kept:
                return False
            text = newest.text
        prompt = self.query_one("#prompt", PromptInput)
        self.call_after_refresh(setattr, prompt, "value", text)  # after the submit clears the input
        prompt.focus()
        self.editing = None
        self.editing_kept = text
        self.chat_notice(f"Editing your message that got no answer: Enter sends it in its place; {self.key_name('cancel')} cancels "
                         "(it stays as it was).")
        return True

    def cmd_drop(self, args: list[str]) -> None:
        """The message Ctrl+R would send next is forgotten: one that fails each time it is
        sent again stood before the others for good, with no way to let it go (a trial)."""
        session = self.need_session()
        if session.read_only:
            self.chat_notice(f"/drop: {self.read_only_words(None)}", "warning")
            return
        text = session.take_kept()
        if text is None:
            self.chat_notice("Nothing to drop: no message waits without an answer.")
            return
        session.save_kept()  # gone from the file too
        if session.newest_unanswered == text:
            session.newest_unanswered = None
        for shown in self.query(UserMessage):
            if shown.text == text and shown.state == UNSENT_STATE:
                shown.set_state("dropped — not sent, not in memory")
        self.chat_notice(f"Dropped {quoted(text, 80)}: it is not sent, and nothing of it is in memory "
                         "(↑ in the input still finds it).")
        if text not in session.kept:
            self.settle_failure_note(text, "Dropped since with /drop.")
        self.recount_unsent()

    def cmd_clear(self, args: list[str]) -> None:
        if self.history is not None:  # no earlier page comes back into the cleared pane (#0 did, in a trial)
            self.history.end()
        self.query_one("#chat").remove_children()

    def cmd_quit(self, args: list[str]) -> None:
        self.call_next(self.leave, 0)  # as Ctrl+Q: stored first, then the app exits

    def models_for_completion(self) -> list[str]:
        """The cached model list for Tab after /model; the first ask fetches it in the
        background (completion never waits for the server)."""
        if not self.models_cache and self.session is not None and not self._models_fetching:
            self._models_fetching = True
            self.models_cache_worker(self.session)
        return self.models_cache

    @background(group="models")
    def models_cache_worker(self, session: ChatSession) -> None:
        try:  # Tab after "/model " against a stalled server held a later quit 15 s (a trial)
            models = call_abandonable(session.list_models, give_up=self.quit_check(), name="list models")
        except Abandoned:
            return
        self.call_from_thread(self.models_listed, models)

    def models_cache_worker_failed(self, text: str, exc: BaseException) -> None:
        self._models_fetching = False  # the next Tab asks again
        self.log_line(text, "debug")


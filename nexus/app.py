"""The Nexus Textual app: chat, tree and log panes over an in-process TRACE."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.command import Hit, Hits, Provider
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import Footer, Header

from trace_core import SessionFileError
from trace_core import events as tev

from . import commands as C
from . import events as ev
from . import sessions
from .chat import ChatSession
from .config import Config
from .widgets import AssistantMessage, EventLog, MemoryTree, Notice, PromptInput, UserMessage

log = logging.getLogger("nexus")


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


class NexusApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "Nexus"
    COMMANDS = App.COMMANDS | {CommandProvider}

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
        self.embedder_state = "loading"
        self._last_idle_run = 0.0
        keys = config.data.get("keys", {})
        for action, desc, default in [
            ("toggle_tree", "tree", "ctrl+t"), ("toggle_log", "log", "ctrl+l"), ("cancel", "cancel", "escape"),
            ("resend", "resend", "ctrl+r"), ("copy_reply", "copy reply", "ctrl+y"),
            ("copy_code", "copy code", "ctrl+k"), ("cycle_log_level", "log level", "ctrl+g"),
            ("grow_side", "wider tree", "ctrl+right"), ("shrink_side", "narrower tree", "ctrl+left"),
        ]:
            self.bind(keys.get(action, default), action, description=desc, show=action in (
                "toggle_tree", "toggle_log", "cancel", "resend", "copy_reply"))
        self.bind("ctrl+q", "quit", description="quit")

    # --- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="main"):
            yield VerticalScroll(id="chat")
            yield MemoryTree(id="tree")
        yield EventLog(level=str(self.config.get("ui", "log_level")), id="log")
        yield PromptInput(placeholder="Message, or /help", id="prompt",
                          suggester=SuggestFromList(C.completions(), case_sensitive=False))
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#tree").display = bool(self.config.get("ui", "show_tree"))
        self.query_one("#log").display = bool(self.config.get("ui", "show_log"))
        self.query_one("#chat", VerticalScroll).anchor()
        self.update_header()
        self.query_one("#prompt").focus()
        self.open_session(self.session_path)
        self.call_after_refresh(self._probe, "first_paint")
        idle = float(self.config.get("memory", "idle_reorganize_seconds"))
        if idle > 0:
            self.set_interval(min(idle, 30.0), self.idle_consolidate)

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
        self.query_one(EventLog).add(text, level)
        log.log(logging.getLevelName(level.upper()), "%s", text)

    def chat_notice(self, text: str, level: str = "info") -> None:
        self.query_one("#chat").mount(Notice(text, level))

    async def on_engine_message(self, message: EngineMessage) -> None:
        e = message.event
        if isinstance(e, ev.ReplyChunk):
            if self.current_reply is not None:
                await self.current_reply.write(e.text)
        elif isinstance(e, ev.ReplyStarted):
            self.current_reply = AssistantMessage()
            await self.query_one("#chat").mount(self.current_reply)
        elif isinstance(e, ev.ReplyFinished):
            if self.current_reply is not None:
                await self.current_reply.finish(e.text, "reply cancelled (Esc): partial text kept" if e.cancelled
                                                else "", e.sources)
            self.current_reply = None
        elif isinstance(e, ev.ReplyFailed):
            if self.current_reply is not None:
                await self.current_reply.finish(e.partial, "reply interrupted")
                self.current_reply = None
            key = self.config.data.get("keys", {}).get("resend", "ctrl+r")
            self.chat_notice(f"No reply: {e.problem}. Your message is kept — press {key} to send it again.",
                             "error")
            self.log_line(f"reply failed: {e.problem}", "error")
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
                node = tree._exchanges[x.index]
                for t in tree.get_ancestors(node.parent, exclude_root=True) if node.parent else []:
                    injected[t.node_id] = max(injected.get(t.node_id, 0.0), x.fused)
        self.refresh_tree(injected)

    def refresh_tree(self, injected: dict | None = None) -> None:
        tree = self.session.tree if self.session else None
        self.query_one(MemoryTree).refresh_tree(tree, injected)

    # --- session ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="session")
    def open_session(self, path: Path) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        self.session_path = Path(path)
        self.call_from_thread(self.update_header)
        self._setup_file_log()
        session = ChatSession(self.config, self.session_path, self.post_event, self._embed_fn, self._search_fn)
        try:
            tree = session.open()
        except (SessionFileError, Exception) as exc:  # a corrupt file, a foreign file, a mismatched embedder
            self.call_from_thread(self.chat_notice, f"Cannot open the session: {exc}. The file was left untouched. "
                                  "Type /new to start a new session.", "error")
            self.post_event(ev.Notice(f"session error: {exc}", "error"))
            return
        self.session = session
        sessions.remember(self.session_path)
        n = len(tree.exchanges)
        self.post_event(ev.Notice(f"session {self.session_path} ({n} exchanges)"))
        if n:
            self.call_from_thread(self.chat_notice, f"Resumed {self.session_path.stem}: {n} exchanges in memory.")
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
        if self.embedder_state == "ready" and tree.pending_parts():
            # a session written before sentence indexing: catch up in the background
            done = session.index_sentences()
            if done:
                self.post_event(ev.Notice(f"indexed the sentences of {done} earlier exchanges"))

    def _setup_file_log(self) -> None:
        root = logging.getLogger()
        for h in list(root.handlers):
            if getattr(h, "_nexus", False):
                root.removeHandler(h)
                h.close()
        handler = logging.FileHandler(sessions.log_path(self.session_path), encoding="utf-8")
        handler._nexus = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        for noisy in ("httpx", "httpx2", "openai", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)

    # --- input -----------------------------------------------------------------------------------

    @on(PromptInput.Submitted, "#prompt")
    def submitted(self, event: PromptInput.Submitted) -> None:
        text = event.value
        if not text.strip():
            return
        event.input.value = ""
        if text.strip().startswith("/"):
            self.run_command(text.strip())
            return
        self.send(text)

    def send(self, text: str, forced_query: str | None = None) -> None:
        if self.session is None:
            self.chat_notice("No session is open yet (see the log). Type /new for a new session.", "warning")
            return
        self.query_one("#chat").mount(UserMessage(text))
        self.reply_worker(text, forced_query)

    @work(thread=True, exclusive=True, group="reply")
    def reply_worker(self, text: str, forced_query: str | None) -> None:
        self.session.send(text, forced_query)

    def run_command(self, line: str) -> None:
        parsed = C.parse(line)
        if parsed.command is None:
            name = line[1:].split(" ", 1)[0]
            self.chat_notice(C.suggestion(name), "warning")
            return
        handler = getattr(self, f"cmd_{parsed.command.handler}")
        try:
            handler(parsed.args)
        except C.UsageError as exc:
            self.chat_notice(f"Usage: {exc or parsed.command.usage}", "warning")
        except Exception as exc:  # a command never crashes the app
            self.chat_notice(f"/{parsed.command.name} failed: {exc}", "error")
            self.log_line(f"/{parsed.command.name} failed: {exc!r}", "error")

    def palette_command(self, c: C.Command) -> None:
        prompt = self.query_one("#prompt", PromptInput)
        if "<" in c.usage or "[" in c.usage:
            prompt.value = f"/{c.name} "
            prompt.cursor_position = len(prompt.value)
            prompt.focus()
        else:
            self.run_command(f"/{c.name}")

    def need_session(self) -> ChatSession:
        if self.session is None:
            raise RuntimeError("no session is open (type /new)")
        return self.session

    # --- commands -----------------------------------------------------------------------------------

    def cmd_help(self, args: list[str]) -> None:
        lines = ["Commands:"] + [f"  {c.usage:<38} {c.help}" for c in C.COMMANDS]
        keys = ", ".join(f"{b.key}: {b.description}" for b in self._bindings.key_to_bindings.get("", []))
        self.chat_notice("\n".join(lines) + (f"\n{keys}" if keys else ""))

    def cmd_tree(self, args: list[str]) -> None:
        show = "--messages" in args
        if [a for a in args if a != "--messages"]:
            raise C.UsageError(C.BY_NAME["tree"].usage)
        s = self.need_session()
        self.chat_notice(s.tree.render_tree(show_messages=show))

    def cmd_search(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["search"].usage)
        self.search_worker(" ".join(args))

    @work(thread=True, group="memory")
    def search_worker(self, query: str) -> None:
        hits = self.need_session().search(query)
        if not hits:
            self.call_from_thread(self.chat_notice, f"Nothing in memory matches {query!r}.")
            return
        lines = [f"Memory search: {query}"]
        for h in hits:
            lines.append(f"  {h.similarity:.2f}  {h.thread_path}  #{h.exchange_index} {h.role}: "
                         f"{' '.join(h.text.split())[:120]}")
        self.call_from_thread(self.chat_notice, "\n".join(lines))

    def cmd_reorganize(self, args: list[str]) -> None:
        usage = C.BY_NAME["reorganize"].usage
        args = list(args)
        threshold = C.flag_value(args, "--threshold", float, usage)
        prune = "--prune" in args
        if prune:
            args.remove("--prune")
        if args or (threshold is not None and not 0 < threshold <= 1):
            raise C.UsageError(usage)
        self.need_session()
        self.chat_notice("Reorganising memory… (progress in the log)")
        self.reorganize_worker(threshold, prune)

    @work(thread=True, exclusive=True, group="memory")
    def reorganize_worker(self, threshold, prune) -> None:
        try:
            res = self.need_session().reorganize(threshold, prune or None)
        except Exception as exc:
            self.call_from_thread(self.chat_notice, f"Reorganisation failed: {exc}", "error")
            return
        self.call_from_thread(self.chat_notice, f"Reorganised: {res['merged']} merged, {res['pruned']} archived, "
                              f"{res['vetoed']} vetoed, {res['skipped']} skipped in {res['duration_secs']:.2f} s."
                              " /undo-reorganize restores the tree.")
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
        self.call_from_thread(self.refresh_tree)

    def cmd_ingest(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["ingest"].usage)
        self.need_session()
        self.ingest_worker(" ".join(args))

    @work(thread=True, exclusive=True, group="ingest")
    def ingest_worker(self, target: str) -> None:
        from .ingest import ingest

        for line, level in ingest(self, target):
            self.call_from_thread(self.chat_notice, line, level)
        self.call_from_thread(self.refresh_tree)

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
        self.model_worker(args[0] if args else None)

    @work(thread=True, group="models")
    def model_worker(self, name: str | None) -> None:
        s = self.need_session()
        if name is None:
            try:
                models = s.list_models()
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
        s.tree.save(str(path), save_conversation=True)
        self.chat_notice(f"Exported the tree to {path}.")

    def cmd_load(self, args: list[str]) -> None:
        if len(args) != 1:
            raise C.UsageError(C.BY_NAME["load"].usage)
        self.load_worker(Path(args[0]).expanduser())

    @work(thread=True, exclusive=True, group="session")
    def load_worker(self, path: Path) -> None:
        from trace_core import CTree, VectorDatabase

        try:
            tree = CTree.load(str(path), embed_fn=self._embed_fn, judge="embedding")
            target = sessions.new_session_path()
            tree.vdb = VectorDatabase(str(target))
            tree.vdb.close()
        except Exception as exc:
            self.call_from_thread(self.chat_notice, f"Cannot load {path}: {exc}", "error")
            return
        self.call_from_thread(self.chat_notice, f"Imported {path} as a new session {target.stem}.")
        self.call_from_thread(self.open_session, target)

    def cmd_new(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["new"].usage)
        self.query_one("#chat").remove_children()
        path = sessions.new_session_path()
        self.chat_notice(f"New session {path.stem}.")
        self.open_session(path)

    def cmd_sessions(self, args: list[str]) -> None:
        rows = sessions.list_sessions()
        if not rows:
            self.chat_notice("No sessions yet.")
            return
        lines = ["Sessions (newest first; start one with nexus --session NAME):"]
        for p, mtime, size in rows[:30]:
            mark = "*" if p == self.session_path else " "
            lines.append(f" {mark} {p.stem:<32} {time.strftime('%Y-%m-%d %H:%M', time.localtime(mtime))} "
                         f"{size / 1024:.0f} KiB")
        self.chat_notice("\n".join(lines))

    def cmd_stats(self, args: list[str]) -> None:
        st = self.need_session().stats()
        self.chat_notice("\n".join(f"{k:>20}: {v}" for k, v in st.items()))

    def cmd_clear(self, args: list[str]) -> None:
        self.query_one("#chat").remove_children()

    def cmd_quit(self, args: list[str]) -> None:
        self.exit(0)

    # --- keys ---------------------------------------------------------------------------------------

    def action_toggle_tree(self) -> None:
        t = self.query_one("#tree")
        t.display = not t.display

    def action_toggle_log(self) -> None:
        t = self.query_one("#log")
        t.display = not t.display

    def action_grow_side(self) -> None:
        t = self.query_one("#tree")
        t.styles.width = min(int(t.size.width) + 4, 120)

    def action_shrink_side(self) -> None:
        t = self.query_one("#tree")
        t.styles.width = max(int(t.size.width) - 4, 16)

    def action_cancel(self) -> None:
        if self.session is not None:
            self.session.cancel()

    def action_resend(self) -> None:
        if self.session is not None and self.session.pending:
            self.send(self.session.pending)
        else:
            self.chat_notice("Nothing to resend.")

    def action_copy_reply(self) -> None:
        replies = list(self.query(AssistantMessage))
        if replies:
            self.copy_to_clipboard(replies[-1].text)
            self.notify("Reply copied.")

    def action_copy_code(self) -> None:
        for reply in reversed(list(self.query(AssistantMessage))):
            blocks = reply.code_blocks()
            if blocks:
                self.copy_to_clipboard(blocks[-1])
                self.notify("Code block copied.")
                return
        self.notify("No code block to copy.")

    def action_cycle_log_level(self) -> None:
        log_pane = self.query_one(EventLog)
        levels = EventLog.LEVELS
        log_pane.set_level(levels[(levels.index(log_pane.level) + 1) % len(levels)])
        self.notify(f"Log level: {log_pane.level}")

    # --- idle consolidation ---------------------------------------------------------------------------

    def idle_consolidate(self) -> None:
        s = self.session
        idle = float(self.config.get("memory", "idle_reorganize_seconds"))
        if s is None or idle <= 0 or not s.tree or not s.tree.exchanges:
            return
        if time.monotonic() - s.last_activity < idle or self._last_idle_run >= s.last_activity:
            return
        if any(w.group in ("reply", "memory", "ingest") and w.is_running for w in self.workers):
            return
        self._last_idle_run = time.monotonic()
        self.log_line("idle: reorganising memory in the background")
        self.reorganize_worker(None, None)

    async def on_unmount(self) -> None:
        if self.session is not None:
            self.session.cancel()
            self.session.close()
        if self._on_exit:
            self._on_exit()

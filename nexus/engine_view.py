"""Engine events on screen: the log pane, the tree pane and the inspector (one handler per event kind)."""

from __future__ import annotations

import logging

from textual.css.query import NoMatches

from trace_core.model import ARROW

from . import messages as M
from .inspector import NodeInspector
from .text import counted, quoted
from .treeinfo import reorganize_lines, reorganize_marks
from .web import NOT_TRIED
from .widgets import MemoryTree

log = logging.getLogger("nexus")


def branch_line(path, exchanges) -> str:
    """One injected branch in the log. A branch the block groups its topics under (a group
    at depth 1) names the topics its entries came from: "branch ROOT → Started Sourdough ·
    Running Sunday" alone read as sourdough recalled for a wedding question (a trial)."""
    own = dict.fromkeys(x.thread_path.rsplit(ARROW, 1)[-1] for x in exchanges
                        if x.index in path.entries and x.thread_path and x.thread_path != path.path)
    via = f" (from {'its topic' if len(own) == 1 else 'its topics'} {', '.join(own)})" if own else ""
    # an entry far in meaning came for a word it shares with the question: said, or the
    # line read as "cos 0.07" injected against the evidence rule (a trial)
    words = max((x.keyword for x in exchanges if x.index in path.entries), default=0.0)
    shared = f" (an entry shares a word with the question: bm25 {words:.2f})" if words >= 0.005 else ""
    return (f"  branch {path.path}{via}  best entry cos {path.best_entry:.2f}{shared}, topic score "
            f"{path.similarity:.2f} bm25 {path.keyword:.2f}  ({counted(len(path.entries), 'exchange')})")


class EngineView:
    """NexusApp's view of engine events: each kind has its own message and handler (nexus.messages)."""

    def on_screen(self, message: M.EngineMessage) -> bool:
        """False once the app is leaving: the panes are going away, the file log has the event."""
        if self._leaving:
            # named only: an event's fields can hold what was said (a reply's text), and its
            # repr read as Python objects in the log; a notice is the app's own words
            if isinstance(message, M.NoticeMessage):
                log.log(logging.getLevelName(message.event.level.upper()), "%s", message.event.text)
            else:
                log.debug("while leaving: %s", type(message.event).__name__)
            return False
        return True

    # --- one handler per event kind (nexus/messages.py) ----------------------------------------

    def on_notice_message(self, message: M.NoticeMessage) -> None:
        if self.on_screen(message):
            self.log_line(message.event.text, message.event.level)
            if message.event.chat:
                self.chat_notice(message.event.text[:1].upper() + message.event.text[1:] + ".",
                                 "error" if message.event.level == "error" else "info")

    def on_retrieved_message(self, message: M.RetrievedMessage) -> None:
        if self.on_screen(message):
            self.show_report(message.event.report)

    def on_web_searching_message(self, message: M.WebSearchingMessage) -> None:
        reply = self.reply_widget(message.event.turn) if self.on_screen(message) else None
        if reply is not None:
            reply.show_searching(message.event.query)

    def on_web_routed_message(self, message: M.WebRoutedMessage) -> None:
        if not self.on_screen(message):
            return
        e = message.event
        reply = self.reply_widget(e.turn) if e.turn else None
        if reply is not None:
            reply.show_searching("")
        if e.problem:
            why = e.problem.removeprefix("web search failed: ")  # "failed (web search failed: …" said it twice
            skipped = why.startswith(NOT_TRIED)  # the last search failed moments ago
            what = f"no search for {quoted(e.query)}: {why.removeprefix(NOT_TRIED)}" if skipped else \
                f"search for {quoted(e.query)} failed: {why}"
            then = "the message was cancelled meanwhile" if e.cancelled else "replying without it"
            self.log_line(f"web: {e.reason}; {what} — {then}", "warning")
            if e.cancelled:  # "the reply comes without it" under "cancelled before the first word" (a trial)
                return
            # said in the chat too: with the log hidden the user never learned the reply had no web results
            said = (f"No web search for {quoted(e.query)}: {why.removeprefix(NOT_TRIED)}. The reply comes without "
                    "it." if skipped else
                    f"The web search for {quoted(e.query)} failed ({why}): the reply comes without it.")
            self.chat_notice(said, "warning", before=self.reply_widget(e.turn))  # above the reply it explains
        elif e.search:
            self.log_line(f"web: {e.reason}; searched {quoted(e.query)}: {e.results} results in {e.seconds:.2f} s")
        else:
            self.log_line(f"web: no search ({e.reason})", "debug")

    def on_remembered_message(self, message: M.RememberedMessage) -> None:
        if self.on_screen(message):
            e = message.event
            after = {"replaced": " (/undo-retry puts the one it replaced back)",
                     "put back": " (the version /undo-retry chose)"}.get(e.how, "")
            self.log_line(f"{e.how} exchange #{e.exchange_index} in {e.thread_path}{after}")
            self.refresh_tree()

    def on_model_step_message(self, message: M.ModelStepMessage) -> None:
        if self.on_screen(message):
            e = message.event
            self.log_line(f"model: {e.step} ({e.seconds:.2f} s){' — ' + e.detail if e.detail else ''}",
                          "info" if e.ok else "error")

    def on_progress_message(self, message: M.ProgressMessage) -> None:
        if self.on_screen(message):
            self.log_line(f"{message.event.task}: {message.event.done}/{message.event.total}", "debug")

    def on_judge_decided_message(self, message: M.JudgeDecidedMessage) -> None:
        if self.on_screen(message):
            e = message.event
            self.log_line(f"judge {e.judge}: {e.action} → {e.topic} ({e.reason})")

    # what stood in for the memory model, by task
    LLM_FALLBACK = {"name": "an extractive name was used", "summary": "an extractive summary was used",
                    "merge veto": "the embedding rule decided"}

    def on_llm_failed_message(self, message: M.LlmFailedMessage) -> None:
        e = message.event
        if not self.on_screen(message) or e.task == "placement":
            return  # a placement's failure is in the judge's own line: said once (twice, in a trial)
        instead = self.LLM_FALLBACK.get(e.task, "the embedding judge decided")
        self.log_line(f"memory model failed at {e.task}: {e.problem}; {instead}", "warning")

    def on_reorganize_progress_message(self, message: M.ReorganizeProgressMessage) -> None:
        if not self.on_screen(message):
            return
        e = message.event
        self.log_line(f"reorganize: {e.phase} {e.done}/{e.total}", "debug")
        if "reorganize" in self._progress:  # a /reorganize the user asked for (idle ones stay in the log)
            self.show_progress("reorganize", f"/reorganize: {e.phase} {e.done:,}/{e.total:,}")

    def on_reorganize_finished_message(self, message: M.ReorganizeFinishedMessage) -> None:
        if self.on_screen(message):
            e = message.event
            # the info line is the "Reorganised: …" summary, vetoes and why included: this one
            # beside it said the same counts without the vetoes, on every run (a trial)
            self.log_line(f"reorganize: {e.merged} merged, {e.pruned} archived, {e.skipped} skipped in "
                          f"{e.duration_secs:.2f} s", "debug")

    def on_engine_event_message(self, message: M.EngineEventMessage) -> None:
        if self.on_screen(message):
            self.log_line(str(message.event), message.event.level)  # EngineEvent.__str__: in words

    # --- the panes ------------------------------------------------------------------------------

    def show_report(self, r) -> None:
        ratio = f"{r.memory_tokens}/{r.full_history_tokens} tokens ({r.saved_ratio:.0%} of the full history)"
        # no exchange but tokens: a question about the memory itself got the outline ("0 exchanges
        # in 0 branches, 457/1624 tokens" read as nothing recalled, and yet something sent: a trial)
        what = (f"{counted(len(r.exchanges), 'exchange')} in {counted(len(r.paths), 'branch')}"
                if r.exchanges or not r.memory_tokens else "no message close enough: the conversation's outline")
        self.log_line(f"retrieval: {what}, {ratio}, {r.seconds * 1000:.1f} ms")
        for p in r.paths:
            self.log_line(branch_line(p, r.exchanges))
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
                    # fused scores are z-scores, below 0 too: ★ shows the best as it is, not "0.000"
                    injected[t.node_id] = max(injected.get(t.node_id, float("-inf")), x.fused)
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

    def reinspect(self, ctree) -> None:
        """The pane shows ``ctree`` anew: an open inspector reads its node again."""
        try:
            inspector = self.query_one(NodeInspector)
        except NoMatches:  # shutting down: the pane's last update arrived after the screen went
            return
        own = self.session is not None and ctree is self.session.tree
        synth = self.session.synth if own else None
        inspector.refresh_for(ctree, synth.last_report if synth else None, synth)

    def inspect_node(self, event: MemoryTree.NodeSelected) -> None:
        """Enter or a click on a topic or exchange: its details beside the pane."""
        pane = self.query_one(MemoryTree)
        own = self.session is not None and pane.ctree is self.session.tree
        synth = self.session.synth if own else None
        node = event.node
        if node.data is None and node.parent is not None:  # a topic's summary line (↳): that topic
            node = node.parent
        self.query_one(NodeInspector).inspect(pane.ctree, node.data, synth.last_report if synth else None, synth)

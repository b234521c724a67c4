"""Slash commands on the memory: /tree, /search, /forget, /reorganize, /undo-reorganize, /ingest, /check, /find, /stats."""

from __future__ import annotations

import re
import time
from collections import Counter

from trace_core.synthesizer import clip_text

from . import commands as C
from .abandon import Abandoned, call_abandonable
from .failures import TaskFailed, background
from .memory_service import SEARCH_FLOOR, holds_words, score_text
from .text import around_words, counted, quoted
from .treeinfo import check_health
from .widgets import MemoryTree, labelled, two_columns


def reorganize_summary(res: dict, threshold: float) -> str:
    """What a reorganisation did (at cosine ``threshold``), and when it did nothing, why."""
    done = (f"Reorganised: {res['merged']} merged, {res['pruned']} archived, {res['vetoed']} vetoed, "
            f"{res['skipped']} skipped in {res['duration_secs']:.2f} s.")
    if res["merged"] or res["pruned"]:
        # which exchanges went: a trial's fact was archived unnamed, and /search found it no more
        gone = res.get("archived") or []
        named = f" Archived: {', '.join(f'#{i}' for i in gone[:12])}{' …' if len(gone) > 12 else ''}." if gone else ""
        return done + named + " /undo-reorganize restores the tree."
    at = f"{threshold:g}"
    if res.get("candidates", 0) < 2:
        why = ("only topics off the active path are merged (the current one and those above it stay "
               f"as they are), and there {'is' if res.get('candidates', 0) == 1 else 'are'} "
               f"{res.get('candidates', 0)} such")
    elif not res.get("pairs"):
        why = (f"no two of the {res['candidates']} topics off the active path (the current one and those above "
               f"it stay as they are) are alike enough (cosine ≥ {at})")
    elif res.get("kept_apart") and not (res["vetoed"] or res["skipped"]):
        # an idle run said "0 vetoed, 0 skipped" and "the 2 pairs were vetoed or skipped" (a trial)
        why = (f"the {counted(res['pairs'], 'similar pair')} {'is' if res['pairs'] == 1 else 'are'} kept apart: "
               "an undo took their merge back (a /reorganize typed now makes it again)")
    elif res.get("kept_apart"):
        # "1 vetoed, 0 skipped … the 3 similar pairs were vetoed or skipped": two of them an undo had
        # taken apart (an idle run after /undo-reorganize, in a trial)
        told = " and ".join(f"{n} {'was' if n == 1 else 'were'} {what}"
                            for n, what in ((res["vetoed"], "vetoed"), (res["skipped"], "skipped")) if n)
        apart = res["kept_apart"]
        why = (f"of the {counted(res['pairs'], 'similar pair')}, {told} (the log says why), and {apart} "
               f"{'is' if apart == 1 else 'are'} kept apart: an undo took {'its' if apart == 1 else 'their'} merge "
               "back (a /reorganize typed now makes it again)")
    else:
        why = (f"the {counted(res['pairs'], 'similar pair')} {'was' if res['pairs'] == 1 else 'were'} "
               "vetoed or skipped (the log says why)")
    return done + f" Nothing changed: {why}."


_WORD = re.compile(r"\w+")


class MemoryCommands:
    """NexusApp's memory commands (cmd_* run by run_command)."""

    def cmd_tree(self, args: list[str]) -> None:
        show = "--messages" in args
        extra = [a for a in args if a != "--messages"]
        if extra:
            C.refuse_unknown_options("tree", extra)
            raise C.UsageError(f"{C.BY_NAME['tree'].usage} ({quoted(' '.join(extra))} is not understood)")
        s = self.need_session()
        # exchanges, as the tree pane counts them (the TRACE README's print_tree counts messages)
        self.chat_notice(s.tree.render_tree(show_messages=show, count_exchanges=True), drawing=True)

    def unanswered_note(self, query: str) -> str:
        """A line naming the open session's messages without an answer that hold every word
        of ``query``: they are on screen but in no memory until answered, and /search said
        "Nothing … matches" of a message the user could see (a trial)."""
        words = set(_WORD.findall(query.lower()))
        s = self.session
        held = [m for m in (s.kept if s is not None else []) if words and words <= set(_WORD.findall(m.lower()))]
        if not held:
            return ""
        return (f"Not in memory yet: {counted(len(held), 'message')} without an answer "
                f"{'holds' if len(held) == 1 else 'hold'} it — {quoted(clip_text(held[0], 80))} "
                f"({self.resend_key()} sends it; answered, it is remembered).")

    def cmd_search(self, args: list[str]) -> None:
        every = "--all" in args
        args = [a for a in args if a != "--all"]
        if not args:
            raise C.UsageError(C.BY_NAME["search"].usage)
        self.need_session()
        self.search_worker(" ".join(args), every)

    @background(group="search")
    def search_worker(self, query: str, every: bool = False) -> None:
        if every:
            return self.search_all_worker(query)
        if not any(ch.isalnum() for ch in query):  # nothing was searched: said so, not "nothing matches"
            self.call_from_thread(self.chat_notice, f"Nothing to search for in {quoted(query, 40)}: it has no letter "
                                  "or digit.")
            return
        hits = self.need_session().search_scored(query)  # fails: a session closed meanwhile, an embedder not loaded
        unanswered = self.unanswered_note(query)
        if not hits:
            self.call_from_thread(self.chat_notice, "\n".join(filter(None, [
                f"Nothing in memory matches {quoted(query, 120)} (no message holds its words, and none reaches "
                f"cosine {SEARCH_FLOOR:.2f}, where unrelated text stops).", unanswered])))
            return
        title = f"Memory search: {clip_text(query, 120)}"
        if any(holds_words(lift) for _, lift in hits):
            title += "  (≡ holds its words)"
        # a corrected fact is said so, as the memory block tags it: "where does my sister live"
        # showed the old city first, unmarked (a trial)
        corrected = self.need_session().corrections([h.exchange_index for h, _ in hits])

        def mark(i: int) -> str:
            later = corrected.get(i)
            return f"  [superseded by #{max(later)}]" if later else ""

        # the branch on a line, the message under it: run on after a short path, the text of
        # one hit started beside it and the others' below (a trial); cut with "…" (mid-word,
        # it read as whole)
        rows = [(score_text(h.similarity) + (" ≡" if holds_words(lift) else ""), f"{h.thread_path}{mark(h.exchange_index)}\n"
                 f"#{h.exchange_index} {h.role}: {around_words(h.text, query)}") for h, lift in hits]
        self.call_from_thread(self.chat_notice, "\n".join([title] + [f"  {a}  {b}" for a, b in rows]),
                              "info", two_columns([(title, rows)]))
        if unanswered:
            self.call_from_thread(self.chat_notice, unanswered)

    def search_all_worker(self, query: str) -> None:
        """``/search --all``: every session (the others read-only, never blocking their writer)."""
        from .memory_service import search_sessions

        try:
            s = self.need_session()
            res = search_sessions(s.tree, s.path, query, k=12)
        except Exception as exc:
            raise TaskFailed("/search --all failed") from exc
        title = (f"Memory search in every session: {clip_text(query, 120)}" if res.hits else
                 f"Nothing in any session matches {quoted(query, 120)}.")
        if any(h.words for h in res.hits):
            title += "  (≡ holds its words)"
        rows = [(score_text(h.score) + (" ≡" if h.words else ""), f"[{h.session}]  {h.branch}\n#{h.exchange} {h.role}: "
                 f"{around_words(h.text, query)}") for h in res.hits]
        rows += [("", f"(not searched: {why})") for why in res.skipped]
        self.call_from_thread(self.chat_notice, "\n".join([title] + [f"  {a}  {b}".rstrip() for a, b in rows]),
                              "info", two_columns([(title, rows)]))
        if unanswered := self.unanswered_note(query):
            self.call_from_thread(self.chat_notice, unanswered)

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
        if args:  # said, not only the usage: "--prnue", or "0.5" without --threshold (a trial)
            C.refuse_unknown_options("reorganize", args, ("--threshold",))
            raise C.UsageError(f"{usage} ({quoted(' '.join(args))} is not understood: the threshold goes after "
                               "--threshold, --prune is given once)")
        self.need_session()
        if self.refused_read_only("/reorganize") or self.refused_while_busy():
            return
        self.cancel_long.clear()
        self.show_progress("reorganize", f"/reorganize: starting… ({self.key_name('cancel')} cancels)")
        self.reorganize_worker(threshold, prune, asked=True)

    @background(group="memory", exclusive=True)
    def reorganize_worker(self, threshold, prune, asked: bool = False) -> None:
        try:
            # an LLM merge veto can take as long as the server likes: closing does not wait for
            # it. The round in flight is never applied and rounds are written in one
            # transaction each, so the file stays as before or as after a whole round.
            res = call_abandonable(self.need_session().reorganize, threshold, prune or None, self.stop_check(),
                                   asked, give_up=self.quit_check(), name="reorganize")
        except Abandoned:
            return
        if res.get("cancelled"):
            self.ui(self.end_progress, "reorganize", f"Reorganisation cancelled: {res['merged']} merges from the "
                    "rounds finished before were kept; nothing half-done was.", "warning")
            self.ui(self.refresh_tree)
            return
        used = threshold if threshold is not None else self.config.section("memory").reorganize_threshold
        # an idle run that changed nothing is said in the log only: nobody asked, and its
        # "Nothing changed" sat in the chat between two exchanges (a trial)
        said = asked or bool(res["merged"] or res["pruned"])
        summary = reorganize_summary(res, used)
        self.ui(lambda: self.end_progress("reorganize", summary, in_chat=said))
        self.call_from_thread(self.show_reorganization, res)
        self.call_from_thread(self.refresh_tree)

    def cmd_undo(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["undo-reorganize"].usage)
        if self.refused_read_only("/undo-reorganize"):
            return
        self.undo_worker()

    @background(group="memory", exclusive=True)
    def undo_worker(self) -> None:
        from trace_core.reorganize import UndoError

        try:
            self.need_session().tree.undo_reorganize()  # fails: nothing to undo, no session
        except UndoError as exc:  # a refusal, not a fault: no traceback at ERROR in the log (a trial)
            raise TaskFailed(level="warning") from exc
        self.call_from_thread(self.chat_notice, "The last reorganisation was undone.")
        self.call_from_thread(self.log_line, "reorganisation undone: the tree is as it was before it")
        self.call_from_thread(lambda: self.query_one(MemoryTree).clear_marks())
        self.call_from_thread(self.refresh_tree)

    def cmd_forget(self, args: list[str]) -> None:
        from .forgetting import forget_question, forget_request

        if not args:
            raise C.UsageError(C.BY_NAME["forget"].usage)
        s = self.need_session()
        if self.refused_read_only("/forget") or self.refused_while_busy():
            return
        line = "/forget " + " ".join(args)
        # the reply in flight may repeat what is to be forgotten: it is stored first, then looked at
        if not self.running_queued and (self.turn is not None or self.outbox):
            self.defer_command(line)
            self.chat_notice("/forget waits for the reply (and the messages queued before it), then runs.")
            return
        exchanges = s.tree.exchanges
        req = forget_request(exchanges, args, s.kept + [u for u, _ in s.unstored])
        if req.unknown:
            self.chat_notice(f"Nothing forgotten: there is no exchange {', '.join(req.unknown)} "
                             f"(this session has #0–#{len(exchanges) - 1}).", "warning")
            return
        if not req.indices and not req.unanswered:
            what = f"no exchange holds every word of {quoted(req.by_words, 80)}" if req.by_words else \
                "those exchanges are forgotten already"
            self.chat_notice(f"Nothing to forget: {what}.", "warning")
            return
        # what was asked, and in which session: a confirmation typed after /open erased
        # the other session's #3 unasked (a trial)
        key = (str(s.path), req.indices, req.unanswered)
        asked = self._forget_asked
        if asked is None or asked[0] != key or time.monotonic() - asked[1] > 30:
            question = self.chat_notice(forget_question(exchanges, req, line), "warning")
            self._forget_asked = (key, time.monotonic(), question)
            return
        self._forget_asked = None
        if asked[2] is not None:
            asked[2].remove()  # it quotes what is forgotten
        self.forget_worker(req)

    @background(group="memory", exclusive=True)
    def forget_worker(self, req) -> None:
        from trace_core.forget import words_in

        s = self.need_session()
        users = {s.tree.exchanges[i].user for i in req.indices} | set(req.unanswered)
        try:
            res, dropped = s.forget(req.indices, req.names)
        except Exception as exc:  # a full disk: memory is read again from the file, which is as it was
            s.reload()
            self.call_from_thread(self.refresh_tree)
            raise TaskFailed("Nothing was forgotten (the session is as the file holds it); /forget again "
                             "once that is mended") from exc

        def names(text: str) -> bool:  # a word only they held ("/search Quuxbank", a /tree with its name)
            return req.names(text) or bool(words_in(text) & res.words) or any(u[:60] in text for u in users if u)

        def gone(prompt: str) -> bool:  # ↑ recalls them no more, nor a command that names them
            return prompt in users or prompt.lstrip().startswith("/forget") or names(prompt)

        self.call_from_thread(self.forget_prompts, gone)
        what = [", ".join(f"#{i}" for i in res.forgotten)] if res.forgotten else []
        what += [counted(dropped, "message without an answer")] if dropped else []
        said = f"Forgot {' and '.join(what)}: gone from memory and the session file."
        if not res.file_purged:
            said += (" Another Nexus has this session open: it shows them until it is closed, and the file's "
                     "log keeps their old copy until the first exchange stored after that.")
        if res.renamed:  # the new names only: the old ones hold the words
            said += f" {counted(len(res.renamed), 'topic')} named again: " + ", ".join(quoted(b) for _, b in res.renamed) + "."
        if res.undo_dropped:
            said += " The last reorganisation can no longer be undone (its record held the old names)."
        self.call_from_thread(self.show_forgotten, set(res.forgotten), names)  # before this note is shown
        self.call_from_thread(self.chat_notice, said)
        self.call_from_thread(self.log_line, f"forgot {counted(len(res.forgotten), 'exchange')}")
        self.call_from_thread(self.refresh_tree)

    def cmd_ingest(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["ingest"].usage)
        session = self.need_session()
        if session.read_only:  # refused before the models are swapped (it swapped, described, then threw it away)
            self.chat_notice(f"/ingest: {self.read_only_words(None)}", "warning")
            return
        if self.refused_while_busy():
            return
        # swapping models now would cut the reply streaming: queued, it runs in its turn
        if not self.running_queued and (self.turn is not None or self.outbox):
            self.defer_command("/ingest " + " ".join(args))
            self.chat_notice("/ingest waits for the reply (and the messages queued before it), then runs.")
            return
        self.cancel_long.clear()
        self.ingest_worker(" ".join(args))

    @background(group="ingest", exclusive=True)
    def ingest_worker(self, target: str) -> None:
        from .abandon import Abandoned
        from .ingest import NO_IMAGES, ingest_images, model_manager_for

        session, quitting = self.need_session(), self.quit_check()
        try:
            manager = model_manager_for(session, self.model_manager, self.post_event, quitting)
            if manager is not self.model_manager:  # kept for the next /ingest, set on the UI thread
                self.ui(self.keep_model_manager, manager)
            lines = ingest_images(
                session, manager, target, self.post_event,
                on_line=lambda text, level: self.ui(self.chat_notice, text, level),
                on_progress=lambda text: self.ui(self.show_progress, "ingest", text),
                on_vision=lambda busy: self.ui(self.set_vision_busy, busy),  # chat messages wait meanwhile
                stop=self.stop_check(), quitting=quitting)
        except Abandoned:  # closing before the models were swapped: nothing was described
            lines = [("Ingest stopped: Nexus is closing.", "warning")]
        done = sum(1 for text, _ in lines if text.startswith("Ingested "))
        # "No images found" says it all: "finished: 0 images described" under it said it twice (a trial)
        nothing = any(text.startswith(NO_IMAGES) for text, _ in lines)
        self.ui(self.end_progress, "ingest", f"/ingest finished: {done} image{'s' if done != 1 else ''} "
                f"described into memory.", "info" if done else "warning", not nothing)
        self.ui(self.refresh_tree)

    def keep_model_manager(self, manager) -> None:
        self.model_manager = manager  # the next /ingest swaps models through the same one

    def set_vision_busy(self, busy: bool) -> None:
        """/ingest holds the vision model: chat messages wait (shown as waiting) until the
        text model is back, then the queue drains."""
        self.vision_busy = busy
        self.update_header()
        self.drain_outbox()

    def cmd_check(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["check"].usage)
        self.check_worker(self.need_session().tree)

    @background(group="check", description="check the tree")  # no repr of the tree's args
    def check_worker(self, tree) -> None:
        health = check_health(tree)  # O(exchanges × depth): seconds at 10,000, off the UI thread
        lines = health.lines()
        running = self.scenarios.name if self.scenarios.running else None
        if running:  # the pane shows the scratch tree: say which one was checked (/find searches the pane's)
            lines[0] += f" (your session {self.session_path.stem}; the tree pane shows the {running} scenario's)"
        # in columns: a fan-out line wrapped under its label on a narrow chat (a trial at 80x24)
        body = two_columns([(lines[0], health.rows())])
        self.call_from_thread(self.chat_notice, "\n".join(lines), "info" if health.ok else "error", body)

    def cmd_find(self, args: list[str]) -> None:
        pane = self.query_one(MemoryTree)
        found = pane.find(" ".join(args))
        if not args:
            self.chat_notice("Find cleared.")
            return
        names = [pane.snapshot.path(t)[-1].name for t in found] if pane.snapshot else []
        counts = Counter(names)  # topics of one name are said once, counted (it listed one name twice: a trial)
        unique = list(dict.fromkeys(names))
        shown = [f"{n} (×{counts[n]})" if counts[n] > 1 else n for n in unique[:10]]
        more = f" and {len(unique) - 10} more" if len(unique) > 10 else ""
        words = clip_text(" ".join(args), 120)  # a 5,000-character query filled the screen twice (a trial)
        where = f" in the {self.scenarios.name} scenario's tree" if self.scenarios.running else ""
        self.chat_notice(f"/find {words}{where}: {counted(len(found), 'topic')} "
                         f"match{'es' if len(found) == 1 else ''}" +
                         (f" (highlighted in the tree): {', '.join(shown)}{more}" if found else
                          f" by name or summary (a topic still open has no summary yet); /search {words} "
                          "searches the messages."))

    def cmd_scenario(self, args: list[str]) -> None:
        self.scenarios.command(args)

    def cmd_memory(self, args: list[str]) -> None:
        """The system text the newest message went to the model with: the memory block as
        the model read it (the log gave counts and scores only: a trial)."""
        session = self.need_session()
        if session.last_sent is None:
            self.chat_notice("The last memory block was cleared by /forget: the next message shows the new one."
                             if session.sent_forgotten else "No message has been sent in this window yet: the "
                             "memory block is made for each message, from what it asks.")
            return
        text, system = session.last_sent
        self.chat_notice(f"What the model was sent with {quoted(text, 80)} (system text, memory block included):\n\n"
                         + system)

    def cmd_stats(self, args: list[str]) -> None:
        session = self.need_session()
        st = session.stats()
        own = session.settings
        st["system prompt"] = " ".join(own.system.split())[:80] + ("…" if len(own.system) > 80 else "") or "(none)"
        sampling = session.sampling(session.limits()[1] if hasattr(session, "limits") else 0)
        st["sampling"] = ", ".join(f"{k} {v}" for k, v in sampling.items())
        # a heading: the lines would otherwise run straight on from the output above
        title = "Statistics of this session:"
        self.chat_notice("\n".join([title] + [f"{k:>20}: {v}" for k, v in st.items()]), "info",
                         labelled(title, [(k, str(v)) for k, v in st.items()]))

"""The node inspector: the details of the topic or exchange selected in the tree pane.

A topic: name, summary, range, depth, children against the fan-out bound, frozen or
active, exchanges below, its five nearest other branches by centroid cosine and, when
it fed the last reply, its retrieval scores. An exchange: both messages in full, date,
branch path, archived / superseded status and its indexed sentence parts. The details
are read under the tree's lock in a worker thread; Esc closes the view.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import get_current_worker

from trace_core.synthesizer import clip_text
from trace_core.textutil import speaker_label

from .failures import ReportsFailures, background
from .history import when
from .text import counted
from .treeinfo import ExchangeDetail, TopicDetail, exchange_detail, topic_detail
from .widgets import cancel_key


def _safe(text: str) -> str:
    from .widgets import safe

    return safe(text)


def short_path(path: str, keep: int = 6) -> str:
    """A branch path of at most ``keep`` names: a 10,000-exchange tree can be hundreds
    of levels deep, and a path that long says less than its two ends."""
    names = path.split(" → ")
    if len(names) <= keep:
        return path
    return " → ".join(names[:1] + [f"… {len(names) - keep + 1} levels …"] + names[-(keep - 2):])


def topic_text(d: TopicDetail, merged: str = "") -> Text:
    """``merged``: what the last /reorganize merged into it, as the pane's ⇐ mark says
    (which the pane cuts at its edge)."""
    t = Text()
    t.append(_safe(d.name) + "\n", style="bold")
    t.append(_safe(short_path(d.path)) + "\n\n", style="dim")
    rows = [
        ("range", f"[{d.start}:{d.end}]"),
        ("depth", str(d.depth)),
        ("children", f"{d.topic_children}/{d.max_children} topics, {d.exchange_children}/{d.max_children} exchanges"),
        ("state", "ROOT" if d.is_root else ("frozen" if d.frozen else "active (on the current path)")),
        ("exchanges", f"{d.exchanges_below} below"),
    ]
    for k, v in rows:
        t.append(f"{k:<10} ", style="bold")
        t.append(v + "\n")
    if merged:
        t.append("\nlast /reorganize  ", style="bold")
        t.append(_safe(merged) + "\n")
    if d.summary:
        t.append("\nsummary\n", style="bold")
        t.append(_safe(d.summary) + "\n")
    if d.asked:
        more = d.exchanges_below - len(d.asked)
        t.append("\nyou said" + (f" (the first {len(d.asked)} of {d.exchanges_below})" if more > 0 else "") + "\n",
                 style="bold")
        for text in d.asked:
            t.append(f"  • {_safe(clip_text(text, 140))}\n")
    if d.retrieval is not None:
        r = d.retrieval
        t.append("\nfed the last reply\n", style="bold magenta")
        if r.similarity is not None:
            t.append(f"  branch cos {r.similarity:.3f}  bm25 {r.keyword or 0:.3f}\n")
        # fused scores are relative to the other candidates: the weakest reads 0.0, which looked
        # as if the branch holding the answer had counted for nothing (a trial)
        weakest = " (relative: the weakest candidate reads 0)" if r.best_fused == 0 else ""
        t.append(f"  {counted(r.injected, 'exchange')} injected, best fused {r.best_fused:.4f}{weakest}\n")
        if r.injected:  # why they were evidence: close in meaning, or a shared word
            t.append(f"  their best message: cos {r.best_vector:.2f}, bm25 {r.best_keyword:.2f}\n")
        t.append(f"  for: {_safe(r.query[:120])}\n", style="dim")
    if d.nearest:
        t.append("\nnearest branches (centroid cosine)\n", style="bold")
        for n in d.nearest:
            t.append(f"  {n.cosine:+.3f}  ")
            t.append(_safe(short_path(n.path).removeprefix("ROOT → ")) + "\n")
    return t


def exchange_text(d: ExchangeDetail) -> Text:
    t = Text()
    t.append(f"Exchange #{d.index}\n", style="bold")
    t.append(_safe(short_path(d.path)) + "\n\n", style="dim")
    status = "archived" if d.archived else "in the tree"
    if d.status and d.status != "unknown":
        status += f", {d.status}"
    elif not d.status:
        status += ", not superseded"
    # the chat's local "2026-12-04 10:22", not the stored UTC ISO string (a trial read two times)
    for k, v in (("date", when(d.timestamp) or "(none)"), ("status", status)):
        t.append(f"{k:<7} ", style="bold")
        t.append(v + "\n")
    for role, content in d.messages:
        t.append(f"\n{role}\n", style="bold")
        t.append(_safe(content) + "\n")
    if d.parts:
        t.append("\nindexed sentence parts\n", style="bold")
        said = {role: " ".join(content.split()) for role, content in d.messages}
        for role, parts in d.parts:
            if not parts:
                why = "one sentence: scored by the message itself" if d.indexed else "not indexed yet"
                t.append(f"  {role}: {why}\n", style="dim")
                continue
            for p in parts:
                text = " ".join(p.split())
                own = text[len(speaker_label(text)):] in said.get(role, "")
                # the message read after the one it answers: what it means in context
                t.append(f"  {role}: " if own else f"  {role}, after the message before it: ", style="dim")
                t.append(_safe(text) + "\n")
    return t


@dataclass
class _Request:
    ctree: object
    subject: str | int
    report: object
    synth: object
    snap: object


class NodeInspector(ReportsFailures, VerticalScroll):
    """Beside the tree pane; hidden until a node is selected."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.body = Static("", id="inspector-body")
        self.subject = None  # topic id (str) or exchange index (int) on view
        self._request: _Request | None = None  # the inspection in progress
        self.detail: TopicDetail | ExchangeDetail | None = None
        self._seen: tuple | None = None  # (tree, report, synth) of the node on view
        self._refreshing = False  # the view is read again: keep where it was scrolled to

    def compose(self):
        yield self.body

    def on_mount(self) -> None:
        self.display = False
        self.border_title = f"Inspector · {cancel_key(self)} closes"

    @property
    def is_open(self) -> bool:
        return bool(self.display)

    def inspect(self, ctree, data, report=None, synth=None) -> None:
        """``data``: a topic id or an exchange node, as the tree pane holds them."""
        if ctree is None or data is None:
            return
        self._refreshing = False
        self._seen = (ctree, report, synth)
        self._inspect(ctree, data if isinstance(data, str) else data.index, report, synth)

    def refresh_for(self, ctree, report=None, synth=None) -> None:
        """The tree pane shows ``ctree`` anew: the open view is read again, where it was
        scrolled to (it went stale: a topic's range and counts as they were when selected).
        Open on another tree (a scenario's scratch tree, gone when it ended; the session
        before a switch), it closes: its node is in no tree on screen."""
        if not self.display or self.subject is None or self._seen is None:
            return
        if self._seen[0] is not ctree:
            self.close()
            return
        self._refreshing = True
        self._inspect(ctree, self.subject, report or self._seen[1], synth or self._seen[2])

    def _inspect(self, ctree, subject, report, synth) -> None:
        self.subject = subject
        from .treepane import MemoryTree

        panes = [p for p in self.app.query(MemoryTree) if p.ctree is ctree]
        snap = panes[0].snapshot if panes else None  # reused while current
        # The worker is handed a weak reference: Textual's worker threads keep their last
        # worker and its arguments, which would keep a closed session's tree alive.
        self._request = _Request(ctree, self.subject, report, synth, snap)
        self._load(weakref.ref(self._request))

    @background(group="inspector", exclusive=True, description="inspect a node")
    def _load(self, request_ref: weakref.ref) -> None:
        request = request_ref()
        if request is None:
            return
        ctree, subject, report, synth, snap = request.ctree, request.subject, request.report, request.synth, request.snap
        del request
        if isinstance(subject, str):
            detail = topic_detail(ctree, subject, report, snap=snap)
        else:
            detail = exchange_detail(ctree, subject, synth)
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._show, subject, detail)

    def _show(self, subject, detail) -> None:
        if subject != self.subject:
            return  # a later selection won
        self._request = None
        self.detail = detail
        if detail is None:
            self.body.update(Text("That node is no longer in the tree.", style="italic"))
        elif isinstance(detail, TopicDetail):
            self.body.update(topic_text(detail, self._merged_into(subject)))
        else:
            self.body.update(exchange_text(detail))
        if not self.display:
            from .treepane import MemoryTree

            panes = [p for p in self.app.query(MemoryTree) if p.display]
            self.beside(panes[0].outer_size.width if panes else 0)
        self.display = True
        if not self._refreshing:
            self.scroll_home(animate=False)

    def _merged_into(self, topic_id: str) -> str:
        """The ⇐ mark of the pane showing the inspected tree, for that topic."""
        from .treepane import MemoryTree

        ctree = self._seen[0] if self._seen else None
        return next((p.marks.get(topic_id, "") for p in self.app.query(MemoryTree) if p.ctree is ctree), "")

    def beside(self, width: int) -> None:
        """Sit left of the tree pane, ``width`` cells wide (Ctrl+←/→ change it)."""
        if self.styles.margin.right != width:
            self.styles.margin = (0, width, 0, 0)

    def close(self) -> bool:
        """Hide the view; False when it was not open (Esc then goes on to cancel)."""
        if not self.display:
            return False
        self.display = False
        self.subject = None
        self.detail = None
        self._seen = None
        return True

"""The memory tree pane: the live context tree, updated in place.

It renders from a ``TreeSnapshot`` copied under the tree's lock (never from nodes a
worker may be moving). Children load when a node is expanded, so a 10,000-exchange
tree costs only what is open; an update touches only the nodes whose children or
labels changed (a new exchange adds one leaf and relabels its path). A snapshot row
that is the same object as at the last update stands for an unchanged subtree
(``nexus.treesnap``), so an update skips it whole, open or not. Marks: the
active path (●), the branches that fed the last reply (★ score), what the last
reorganisation merged (⇐, until the next exchange) and /find matches (highlighted).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode
from textual.worker import get_current_worker

from trace_core.synthesizer import clip_text

from . import heap
from .failures import ReportsFailures, background
from .scrolling import scroll_a_page
from .text import counted
from .treesnap import TopicRow, TreeSnapshot, find_topics, snapshot_unlocked, take_snapshot, try_lock

SUMMARY = "summary"  # the key of a topic's summary line among its children
MIN_NAME_CELLS = 8  # a name clipped to fit the pane keeps this many cells before its range gives way
LAST_NAME_CELLS = 2  # ... and then less, down to a letter and "…", before its count or score is cut
_RANGE = re.compile(r" \[\d+:\d+\]")  # a label's exchange range, after its name
_COUNT = re.compile(r" \(\d+\)")  # its exchange count
_SCORE = re.compile(r" ★\d+\.\d")  # the score of a branch that fed the last reply
FREEZE_AT = 1000  # exchanges: a tree this large is kept out of the collector's full passes (nexus/heap.py)


def _safe(text: str) -> str:
    from .widgets import safe  # widgets re-exports this pane: imported late, not at module load

    return safe(text)


def depth_of(node: TreeNode) -> int:
    """How many levels below the pane's root ``node`` is (the root: 0)."""
    depth, up = 0, node.parent
    while up is not None:
        depth, up = depth + 1, up.parent
    return depth


@dataclass
class NameFit:
    """Where a topic's name sits in its pane label, and the label clipped to the room the
    pane has for it (kept: the pane renders each line again as it scrolls)."""

    start: int  # the name's first and past-last character in the label
    end: int
    head_cells: int  # the label's cells up to the end of what must stay in sight: the count, a ★ score
    depth: int
    _key: tuple = ()
    _out: Text | None = None

    def fitted(self, label: Text, room: int) -> Text:
        """``label`` with its name clipped so that its range, count and ★ score fit in
        ``room`` cells; ``label`` itself when they do. A name under ``MIN_NAME_CELLS``
        drops the range first; the count and score are never cut."""
        key = (id(label), room)
        if key != self._key or self._out is None:
            self._key, self._out = key, self._clip(label, room)
        return self._out

    def _clip(self, label: Text, room: int) -> Text:
        """What gives way, in order: the name (to ``MIN_NAME_CELLS``), the range, the ★ in
        front (the score after the count still marks it), the name (to a letter and "…"),
        then whole parts — the score (the ★ in front comes back), the count. A part is
        dropped whole, never cut to "(12" or "★3" (a trial's narrow pane); a ⇐ mark after
        them ends in "…" at the pane's edge."""
        over = self.head_cells - room
        if self.end > len(label):
            return label
        if over <= 0:
            return _ended(label, room, self.head_end(label))
        name, rest = label[self.start:self.end], label[self.end:]
        cut = self.head_end(label) - self.end
        rest, tail = rest[:cut], rest[cut:]  # range, count, score; the ⇐ mark, if any
        if name.cell_len - over < MIN_NAME_CELLS:  # too narrow for name and range: the range goes, the count stays
            span = _RANGE.match(rest.plain)
            if span:
                rest = rest[span.end():]
                over -= span.end()
        lead, keep = label[:self.start], name.cell_len - over
        if keep < LAST_NAME_CELLS and lead.plain.startswith("★ ") and _SCORE.search(rest.plain):
            lead, keep = lead[2:], keep + 2
        if keep < LAST_NAME_CELLS:  # still no room: whole parts go, the score first
            for part in (_SCORE, _COUNT):
                found = part.search(rest.plain)
                if found is None:
                    continue
                rest = rest[:found.start()] + rest[found.end():]
                keep += found.end() - found.start()
                if part is _SCORE and label.plain.startswith("★ ") and not lead.plain.startswith("★ "):
                    lead, keep = label[:self.start], keep - 2  # the ★ in front marks it again
                if keep >= LAST_NAME_CELLS:
                    break
        keep = max(LAST_NAME_CELLS, keep)
        if keep < name.cell_len:
            name = _clipped(name, keep)
        head = Text.assemble(lead, name, rest)
        return _ended(Text.assemble(head, tail), room, len(head))

    def head_end(self, label: Text) -> int:
        """The character index where the label's must-stay part ends (its score or count)."""
        plain = label.plain
        mark = plain.find("  ⇐ ", self.end)
        return mark if mark >= 0 else len(plain)


def _clipped(name: Text, cells: int) -> Text:
    """``name`` cut to ``cells`` with "…", no space or dot before it: a cut on a space, or
    on a double-width character's padding, read as a word and a lone "…" ("Ünïcödé …",
    "Flying Lisbon · …": a trial)."""
    name = name.copy()
    name.truncate(cells, overflow="ellipsis")
    body = name.plain[:-1]
    kept = len(body.rstrip(" ·"))  # a group's "A · B" cut after its dot: "A…"
    return name if kept == len(body) or not kept else Text.assemble(name[:kept], name[-1:])


def _ended(label: Text, room: int, head_end: int) -> Text:
    """``label`` with its ⇐ mark (after ``head_end``) cut to the pane's edge with "…", or
    left out when not even "  ⇐ X…" fits; what comes before the mark is never cut here."""
    if label.cell_len <= room or head_end >= len(label):
        return label
    head, mark = label[:head_end], label[head_end:]
    left = room - head.cell_len
    if left < 6:  # "  ⇐ X…": less says nothing (the inspector has the whole mark)
        return head
    mark.truncate(left, overflow="ellipsis")
    return Text.assemble(head, mark)


class MemoryTree(ReportsFailures, Tree):
    """The live context tree (see the module docstring)."""

    class Updated(Message):
        """The pane shows a newer snapshot of ``ctree`` (what the inspector shows may be stale)."""

        def __init__(self, ctree) -> None:
            super().__init__()
            self.ctree = ctree

    class Typed(Message):
        """Text typed or pasted while the tree has focus: it belongs in the input (it was
        lost); ``key``: backspace or enter, typed in the same run of keys."""

        def __init__(self, text: str = "", key: str = "") -> None:
            super().__init__()
            self.text = text
            self.key = key

    # → and ← open and close branches, as in a file manager (they scrolled the pane sideways)
    # shown in the footer while the pane has focus: a trial found no word there of how to
    # move in it, open a branch or inspect a node
    BINDINGS = [Binding("enter", "select_cursor", "inspect"),
                Binding("right", "open_branch", "open", key_display="→"),
                Binding("left", "close_branch", "close", key_display="←"),
                Binding("space", "toggle_node", "fold")]

    def _open_inspector(self):
        from .inspector import NodeInspector

        return next((i for i in self.app.query(NodeInspector) if i.display), None)

    def _page(self, way: str) -> None:
        """PageDown/PageUp scroll an open inspector (in a small terminal it showed 9 of its
        lines and nothing reached the rest by keyboard); else the pane, a page."""
        inspector = self._open_inspector()
        if inspector is not None:
            scroll_a_page(inspector, way == "up")
        else:
            getattr(super(), f"action_page_{way}")()

    def action_page_down(self) -> None:
        self._page("down")

    def action_page_up(self) -> None:
        self._page("up")

    def action_open_branch(self) -> None:
        """→: open the branch under the cursor; on an open one, go to its first child."""
        node = self.cursor_node
        if node is None or not node.allow_expand:
            return
        if not node.is_expanded:
            node.expand()
        elif node.children:
            self.move_cursor(node.children[0])

    def action_close_branch(self) -> None:
        """←: close the open branch under the cursor; else go to its parent."""
        node = self.cursor_node
        if node is None:
            return
        if node.allow_expand and node.is_expanded:
            node.collapse()
        elif node.parent is not None:
            self.move_cursor(node.parent)

    def on_focus(self) -> None:
        self._typing = False

    def on_key(self, event) -> None:
        # the tree's own keys are arrows, Enter and space; any other character starts a
        # message or command typed without leaving the tree. Keys that arrive before the
        # input has the focus (a fast typist, a burst) follow it there, spaces, Backspace
        # and Enter included
        typing = self._typing
        if event.is_printable and event.character and (event.character != " " or typing):
            self._typing = True
            self.post_message(self.Typed(event.character))
        elif typing and event.key in ("enter", "backspace"):
            self.post_message(self.Typed(key=event.key))
        else:
            return
        event.stop()
        event.prevent_default()

    def on_paste(self, event) -> None:
        self._typing = True
        event.stop()
        self.post_message(self.Typed(event.text))

    def __init__(self, **kw) -> None:
        super().__init__("ROOT", **kw)
        self.ctree = None
        self._typing = False  # keys typed here go on in the input, until the tree has the focus again
        self.snapshot: TreeSnapshot | None = None
        self.expanded_ids: set[str] = {"root"}
        self.injected: dict[str, float] = {}  # topic id -> fused score of the last reply
        self.marks: dict[str, str] = {}  # topic id -> what the last reorganisation merged into it
        self._marks_at = -1  # exchange count when marked: the next exchange clears them
        self.found: set[str] = set()  # /find matches
        self._reveal: set[str] = set()  # topics to open the path to at the next update
        self.show_root = True
        self.guide_depth = 3
        self.auto_expand = False  # Enter / click inspects; space, arrows or the ▶ icon expand
        self._topic_nodes: dict[str, TreeNode] = {}  # topic id -> its node in the pane
        self._shown: dict[str, tuple] = {}  # topic id -> keys of the children shown under it
        self._sigs: dict[str, tuple] = {}  # topic id -> what its label shows
        self._fits: dict[str, NameFit] = {}  # topic id -> where its name is in its label
        self._synced: dict[str, tuple] = {}  # topic id -> (row, marks generation) its open subtree shows
        self._gen = 0  # bumped when the marks, matches or nodes to open change: every label is checked again
        self._held = None  # the user's (tree, injected) while a scenario's tree is shown
        self._scenario: str | None = None  # that scenario's name (the pane's title says whose tree it is)
        self._frozen_for = None  # the tree the heap was frozen with (the user's, kept during a scenario)
        self._freeze_pending = False  # freeze once the tree's first snapshot is on screen
        self.updates = 0  # in-place updates applied (for tests and the bench)
        self.rebuilt = 0  # child lists rebuilt

    # --- the source tree -------------------------------------------------------------------

    def refresh_tree(self, ctree, injected: dict[str, float] | None = None) -> None:
        """Show ``ctree`` (None: nothing). Cheap when nothing changed."""
        # another tree: the last reply's scores were the other tree's (an import keeps node
        # ids, and its topics showed another session's ★ scores: a trial)
        shown = self._held[0] if self._held is not None else self.ctree
        if ctree is not shown and injected is None:
            injected = {}
        if self._held is not None:  # a scenario is on screen: the user's tree waits
            self._held = (ctree, injected if injected is not None else self._held[1])
            return
        if injected is not None and injected != self.injected:
            self.injected = injected
            self._gen += 1
        self._show(ctree)

    def _show(self, ctree) -> None:
        if ctree is not self.ctree:
            self._reset(ctree)
        if ctree is None:
            return
        snap = try_lock(ctree, snapshot_unlocked)
        if snap is None:
            self._snapshot_worker(weakref.ref(ctree))
        else:
            self.apply(snap)

    @background(group="tree-snapshot", exclusive=True, description="snapshot the tree")
    def _snapshot_worker(self, tree_ref: weakref.ref) -> None:
        # (a weak reference: Textual's worker threads keep their last worker, and its arguments)
        ctree = tree_ref()
        if ctree is None:
            return
        snap = take_snapshot(ctree)  # waits for the writer, off the UI thread
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self.apply_if_current, ctree, snap)

    def _freeze(self, ctree, tries: int) -> None:
        """Freeze the heap with this tree loaded (``nexus/heap.py``); while a tree let go is
        still referenced, try again a second later, at most three times."""
        if ctree is not self.ctree or self._frozen_for is not None or self.showing_scenario:
            return
        if not heap.freeze_loaded(force=tries >= 3):
            self.set_timer(1.0, lambda: self._freeze(ctree, tries + 1))
            return
        self._frozen_for = self.ctree
        self._warm_worker(weakref.ref(self.ctree))
        self.set_timer(2.0, lambda: self._freeze_more(ctree))

    def _freeze_more(self, ctree) -> None:
        """Two seconds after the freeze: what the session's opening left (its history on
        screen) joins the frozen heap."""
        if self._frozen_for is ctree and ctree is self.ctree:
            heap.freeze_more()

    @background(group="tree-warm", exclusive=True, description="prepare the inspector's centroids")
    def _warm_worker(self, tree_ref: weakref.ref) -> None:
        from .treeinfo import warm_centroids  # the inspector's data: made once, updated per change after

        ctree = tree_ref()
        if ctree is not None:
            warm_centroids(ctree)

    def apply_if_current(self, ctree, snap: TreeSnapshot) -> None:
        """Show ``snap`` if ``ctree`` is still the tree on screen (a snapshot taken off the UI thread)."""
        if ctree is self.ctree:
            self.apply(snap)

    def _reset(self, ctree) -> None:
        if self._frozen_for is not None and self._frozen_for is self.ctree is not ctree \
                and (self._held is None or self._held[0] is not self.ctree):
            heap.thaw(self.ctree)  # the frozen tree is let go (not held while a scenario runs)
            self._frozen_for = None
        self._freeze_pending = ctree is not None and self._frozen_for is None
        self.ctree = ctree
        self.snapshot = None
        self.clear()
        self.root.data = None
        self._topic_nodes.clear()
        self._shown.clear()
        self._sigs.clear()
        self._synced.clear()
        self._gen += 1
        self.found.clear()
        self.marks.clear()
        self._reveal.clear()
        self.border_title = ""

    def show_scenario(self, ctree, name: str = "") -> None:
        """Show a scratch tree (the running scenario ``name``); the user's tree comes back
        with ``end_scenario``."""
        if self._held is None:
            self._held = (self.ctree, dict(self.injected))
        self.injected = {}
        self._scenario = name
        self._reset(ctree)
        # until its first snapshot: not the user's "ROOT (3 exchanges)" under a blank title
        self.root.set_label("ROOT")
        self.border_title = f"scenario {name} (scratch): starting…" if name else "scenario: starting…"

    def end_scenario(self) -> None:
        if self._held is None:
            return
        ctree, injected = self._held
        self._held = None
        self._scenario = None
        self.injected = injected or {}
        self._reset(None)
        self._show(ctree)

    @property
    def showing_scenario(self) -> bool:
        return self._held is not None

    # --- marks -----------------------------------------------------------------------------

    def mark_reorganization(self, marks: dict[str, str]) -> None:
        if marks:  # the ★ scores were the branches of the tree before these merges (stale, a trial)
            self.injected = {}
        self.marks = dict(marks)
        self._marks_at = self.snapshot.exchanges if self.snapshot else -1
        self._reveal = set(marks)  # shown open once the reorganised tree is on screen
        self._relabel()
        self._refreeze()

    def clear_marks(self) -> None:
        """After ``/undo-reorganize``."""
        self.marks = {}
        self._relabel()
        self._refreeze()

    def _refreeze(self) -> None:
        """A reorganisation (or its undo) dropped nodes: they are collected before the heap
        is frozen again, half a second later (after the pane shows the result)."""
        if self._frozen_for is not None:
            heap.thaw()
            self._frozen_for = None
            ctree = self.ctree
            self.set_timer(0.5, lambda: self._freeze(ctree, 0))

    def find(self, words: str, expand_at_most: int = 50) -> list[str]:
        """Highlight and expand the topics whose name or summary match; their ids."""
        if self.snapshot is None:
            return []
        ids = find_topics(self.snapshot, words)
        self.found = set(ids)
        self._gen += 1
        for tid in ids[:expand_at_most]:
            for row in self.snapshot.path(tid)[:-1]:
                self.expanded_ids.add(row.node_id)
        self.apply(self.snapshot)
        if ids and ids[0] in self._topic_nodes:
            node = self._topic_nodes[ids[0]]
            self.move_cursor(node)
            self.scroll_to_node(node, animate=False)
        return ids

    def _relabel(self) -> None:
        self._gen += 1
        if self.snapshot is not None:
            self.apply(self.snapshot)

    # --- rendering -------------------------------------------------------------------------

    def apply(self, snap: TreeSnapshot) -> None:
        """Bring the pane in line with ``snap``, touching only what changed."""
        if self.marks and self._marks_at >= 0 and snap.exchanges != self._marks_at:
            self.marks = {}  # a new exchange since the reorganisation
            self._gen += 1
        self.snapshot = snap
        self.updates += 1
        self.post_message(self.Updated(self.ctree))
        if self._freeze_pending:
            self._freeze_pending = False
            if snap.exchanges >= FREEZE_AT:
                self._freeze(self.ctree, 0)
        for tid in [t for t in self._reveal if t in snap.topics][:50]:
            self.expanded_ids.update(row.node_id for row in snap.path(tid)[:-1])
            self._reveal.discard(tid)
            self._gen += 1
        self.border_title = snap.title(self.title_room, self._scenario)
        root = snap.topics[snap.root_id]
        label = self._root_label(snap)
        if self.root.data != snap.root_id or str(self.root.label) != label.plain:
            self.root.set_label(label)
            self.root.data = snap.root_id
        self._topic_nodes[snap.root_id] = self.root
        self._sync(self.root, root)
        if not self.root.is_expanded:
            self.root.expand()

    def label_for(self, row: TopicRow, depth: int) -> Text:
        """The label of a topic at ``depth`` in the pane (the root's children: 1)."""
        label = Text()
        if row.node_id in self.injected:  # in front, where a narrow pane still shows it; the score after the count
            label.append("★ ", style="bold magenta")
        if row.active:
            label.append("● ", style="green")
        style = "bold" if row.active else ""
        if row.node_id in self.found:
            style = "bold black on yellow"
        start = len(label)
        label.append(_safe(row.name), style=style)
        end = len(label)
        label.append(f" [{row.start}:{row.end}] ({row.exchanges_below})", style="dim")
        if row.node_id in self.injected:  # short, and kept in sight with the count (the inspector has it whole)
            label.append(f" ★{self.injected[row.node_id]:.1f}", style="bold magenta")
        self._fits[row.node_id] = NameFit(start, end, label.cell_len, depth)
        if row.node_id in self.marks:
            label.append(f"  ⇐ {_safe(self.marks[row.node_id])}", style="bold cyan")
        return label

    def _signature(self, row: TopicRow) -> tuple:
        return (row.name, row.start, row.end, row.exchanges_below, row.active, row.node_id in self.found,
                self.injected.get(row.node_id), self.marks.get(row.node_id))

    @staticmethod
    def _keys(row: TopicRow) -> tuple:
        keys = [(SUMMARY, row.summary)] if row.summary and row.parent_id is not None else []
        return tuple(keys + [c.node_id for c in row.children])

    def _sync(self, node: TreeNode, row: TopicRow) -> None:
        """Children of a loaded node: unchanged → relabel; appended → add; else rebuild
        this node's children only. Loaded and expanded children follow, level by level
        (a loop, not recursion: a large tree can be hundreds of levels deep)."""
        snap = self.snapshot
        todo = [(node, row, depth_of(node))]
        while todo:
            node, row, depth = todo.pop()
            done = self._synced.get(row.node_id)
            if done is not None and done[0] is row and done[1] == self._gen:
                continue  # the same subtree, the same marks: nothing to do below it
            keys = self._keys(row)
            old = self._shown.get(row.node_id)
            if old is None or keys[: len(old)] != old:
                self._forget_children(node)
                node.remove_children()
                self.rebuilt += 1
                start = 0
            else:
                start = len(old)
            for key, child in zip(keys[start:], self._child_items(row)[start:]):
                if child is None:
                    node.add_leaf(Text("↳ " + _safe(clip_text(key[1], 200)), style="italic dim"))
                elif child.is_topic:
                    self._add_topic(node, snap.topics[child.node_id], depth + 1)
                else:
                    node.add_leaf(Text(f"#{child.index} " + _safe(clip_text(child.user, 70)), style="dim"),
                                  data=child)
            self._shown[row.node_id] = keys
            for child in node.children:
                tid = child.data if isinstance(child.data, str) else None
                if tid is None or tid not in snap.topics:
                    continue
                crow = snap.topics[tid]
                sig = self._signature(crow)
                if self._sigs.get(tid) != sig:
                    child.set_label(self.label_for(crow, depth + 1))
                    self._sigs[tid] = sig
                if tid in self.expanded_ids:  # a collapsed one catches up when it opens
                    todo.append((child, crow, depth + 1))
                if tid in self.expanded_ids and not child.is_expanded:
                    child.expand()
            self._synced[row.node_id] = (row, self._gen)

    def get_label_width(self, node: TreeNode) -> int:
        """The label's cells plus its ▶/▼ icon, without rendering it (Textual renders
        every visible label to size the pane otherwise: slow with thousands open); a
        topic's as clipped to the pane (``render_label``)."""
        fit = self._fit_of(node)
        if fit is None:
            return node.label.cell_len + 2
        return fit.fitted(node.label, self._room(fit)).cell_len + 2

    def render_label(self, node: TreeNode, base_style, style) -> Text:
        """A topic's name is clipped with "…" where the label would pass the pane's edge,
        so its range, exchange count and ★ score stay in sight (a group's name holds two
        of its parts' names); a ⇐ mark after them may still run past it. The inspector
        shows the whole name."""
        fit = self._fit_of(node)
        if fit is None:
            return super().render_label(node, base_style, style)
        label = node.label
        fitted = fit.fitted(label, self._room(fit))
        if fitted is label:
            return super().render_label(node, base_style, style)
        # Textual's own rendering (icon, styles) of the clipped label: swapped in for the call
        node._label = fitted
        try:
            return super().render_label(node, base_style, style)
        finally:
            node._label = label

    def _fit_of(self, node: TreeNode) -> NameFit | None:
        """Where a topic's name is in its label (``None`` for other nodes)."""
        return self._fits.get(node.data) if isinstance(node.data, str) else None

    def _room(self, fit: NameFit) -> int:
        """Cells left for a label, its ▶/▼ icon excluded, after the guides of its depth."""
        width = self.size.width - self.scrollbar_size_vertical
        return width - fit.depth * self.guide_depth - 2

    def _child_items(self, row: TopicRow) -> list:
        items: list = [None] if row.summary and row.parent_id is not None else []
        return items + list(row.children)

    def _add_topic(self, parent: TreeNode, row: TopicRow, depth: int) -> TreeNode:
        child = parent.add(self.label_for(row, depth), data=row.node_id, allow_expand=True)
        self._topic_nodes[row.node_id] = child
        self._sigs[row.node_id] = self._signature(row)
        return child

    def _forget_children(self, node: TreeNode) -> None:
        stack = list(node.children)
        while stack:
            n = stack.pop()
            if isinstance(n.data, str):
                self._topic_nodes.pop(n.data, None)
                self._shown.pop(n.data, None)
                self._sigs.pop(n.data, None)
                self._fits.pop(n.data, None)
                self._synced.pop(n.data, None)
            stack.extend(n.children)

    @property
    def title_room(self) -> int | None:
        """Cells the border leaves a title (its corners and a dash each side)."""
        return self.outer_size.width - 4 if self.outer_size.width else None

    def _root_label(self, snap: TreeSnapshot) -> Text:
        """"ROOT (12 exchanges)", or "ROOT (12)" where that does not fit: a narrow pane cut
        it to "ROOT (12 ex" (a trial)."""
        live = snap.exchanges - snap.archived  # as the pane's title counts them (archived ones are out of the tree)
        long = f"ROOT ({counted(live, 'exchange')})"
        room = self.size.width - self.scrollbar_size_vertical - 2  # its ▼ icon
        return Text(long if not room or len(long) <= room else f"ROOT ({live:,})")

    def on_resize(self) -> None:
        from .inspector import NodeInspector  # drawn over the chat, beside this pane

        if self.snapshot is not None:
            self.border_title = self.snapshot.title(self.title_room, self._scenario)
            if self.root.data == self.snapshot.root_id:
                label = self._root_label(self.snapshot)
                if str(self.root.label) != label.plain:
                    self.root.set_label(label)

        for inspector in self.app.query(NodeInspector):
            inspector.beside(self.outer_size.width)

    def on_unmount(self) -> None:
        if self._frozen_for is not None:
            heap.thaw()
            self._frozen_for = None

    # --- expansion ----------------------------------------------------------------------------

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        tid = event.node.data
        if isinstance(tid, str):
            self.expanded_ids.add(tid)
            if self.snapshot is not None and tid in self.snapshot.topics:
                self._sync(event.node, self.snapshot.topics[tid])  # loads it, or brings it up to date

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed) -> None:
        tid = event.node.data
        if isinstance(tid, str):
            self.expanded_ids.discard(tid)

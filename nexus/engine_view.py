"""Engine events on screen: the log pane, the tree pane and the inspector (one handler per event kind)."""

from __future__ import annotations

from textual.css.query import NoMatches

from .inspector import NodeInspector
from .treeinfo import reorganize_lines, reorganize_marks
from .widgets import MemoryTree


class EngineView:
    """NexusApp's view of engine events: each kind has its own message and handler (nexus.messages)."""

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

    def inspect_node(self, event: MemoryTree.NodeSelected) -> None:
        """Enter or a click on a topic or exchange: its details beside the pane."""
        pane = self.query_one(MemoryTree)
        own = self.session is not None and pane.ctree is self.session.tree
        synth = self.session.synth if own else None
        self.query_one(NodeInspector).inspect(pane.ctree, event.node.data,
                                              synth.last_report if synth else None, synth)

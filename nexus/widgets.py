"""The panes' widgets: chat messages, the memory tree, the event log, the input line."""

from __future__ import annotations

import re

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Collapsible, Input, Markdown, RichLog, Static, Tree
from textual.widgets.tree import TreeNode

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)|\x1b.")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
CODE = re.compile(r"```[^\n]*\n(.*?)```", re.S)


def safe(text: str) -> str:
    """Model output is text: terminal escape sequences and control characters are made
    visible, never sent to the terminal. (Rich markup is inert: we never parse it.)"""
    text = ANSI.sub(lambda m: m.group(0).replace("\x1b", "␛"), text)
    return CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


class UserMessage(Static):
    def __init__(self, text: str) -> None:
        super().__init__(Text(safe(text)), classes="user-message")


class Notice(Static):
    def __init__(self, text: str, level: str = "info") -> None:
        super().__init__(Text(safe(text)), classes=f"notice {level}")


class AssistantMessage(Vertical):
    """A streamed reply: tokens go to a MarkdownStream (no full re-render per token);
    one final update folds <think> sections and adds sources."""

    def __init__(self) -> None:
        super().__init__(classes="assistant-message")
        self.text = ""
        self.body = Markdown("", classes="reply-body")
        self._stream = None

    def compose(self):
        yield self.body

    async def write(self, chunk: str) -> None:
        self.text += chunk
        if self._stream is None:
            self._stream = Markdown.get_stream(self.body)
        await self._stream.write(safe(chunk))

    async def finish(self, text: str, note: str = "", sources=()) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.text = text
        thoughts = [t.strip() for t in THINK.findall(text) if t.strip()]
        answer = THINK.sub("", text).strip()
        if thoughts:
            await self.mount(Collapsible(Static(Text(safe("\n\n".join(thoughts)))), title="reasoning",
                                        collapsed=True), before=self.body)
        await self.body.update(safe(answer))
        if sources:
            lines = "\n".join(f"[{i}] {title} — {url}" for i, (title, url) in enumerate(sources, 1))
            await self.mount(Static(Text(safe("Sources:\n" + lines)), classes="sources"))
        if note:
            await self.mount(Static(Text(note), classes="reply-note"))

    def code_blocks(self) -> list[str]:
        return CODE.findall(THINK.sub("", self.text))


class PromptInput(Input):
    """The input line; Tab accepts the suggested slash command."""

    BINDINGS = [Binding("tab", "complete", "complete", show=False)]

    def action_complete(self) -> None:
        suggestion = getattr(self, "_suggestion", "")
        if suggestion and suggestion.startswith(self.value):
            self.value = suggestion + ("" if suggestion.endswith(" ") else " ")
            self.cursor_position = len(self.value)


class EventLog(RichLog):
    LEVELS = ["debug", "info", "warning", "error"]
    STYLES = {"debug": "dim", "info": "", "warning": "yellow", "error": "bold red"}

    def __init__(self, level: str = "info", **kw) -> None:
        super().__init__(markup=False, highlight=False, wrap=True, max_lines=5000, **kw)
        self.level = level
        self.history: list[tuple[str, str]] = []

    def add(self, text: str, level: str = "info") -> None:
        self.history.append((level, text))
        if self.LEVELS.index(level) >= self.LEVELS.index(self.level):
            self.write(Text(f"{level[:4].upper():<4} {safe(text)}", style=self.STYLES[level]))

    def set_level(self, level: str) -> None:
        self.level = level
        self.clear()
        for lv, text in self.history[-2000:]:
            if self.LEVELS.index(lv) >= self.LEVELS.index(level):
                self.write(Text(f"{lv[:4].upper():<4} {safe(text)}", style=self.STYLES[lv]))


class MemoryTree(Tree):
    """The live context tree. Children load when a node is expanded (thousands of
    nodes stay fast); expansion survives refreshes; the active path and the branches
    injected for the last reply are marked."""

    def __init__(self, **kw) -> None:
        super().__init__("ROOT", **kw)
        self.ctree = None
        self.expanded_ids: set[str] = {"root"}
        self.injected: dict[str, float] = {}  # topic id -> fused score of the last reply
        self.show_root = True
        self.guide_depth = 3

    def label_for(self, t, active: set) -> Text:
        n = sum(len(m.messages) for m in t.iter_messages())
        label = Text()
        if t in active:
            label.append("● ", style="green")
        label.append(safe(t.topic_name), style="bold" if t in active else "")
        label.append(f" [{t.start_index}:{t.end_index}] ({n})", style="dim")
        if t.node_id in self.injected:
            label.append(f"  ★ {self.injected[t.node_id]:.3f}", style="bold magenta")
        return label

    def refresh_tree(self, ctree, injected: dict[str, float] | None = None) -> None:
        self.ctree = ctree
        if injected is not None:
            self.injected = injected
        self.clear()
        if ctree is None:
            return
        self.root.set_label(Text(f"ROOT ({len(ctree.exchanges)} exchanges)"))
        self.root.data = ctree.root
        self._populate(self.root)
        self.root.expand()

    def _populate(self, node: TreeNode) -> None:
        t = node.data
        node.remove_children()
        if t is None or not getattr(t, "is_topic", False):
            return
        active = set(self.ctree.active_path())
        if t.summary and t is not self.ctree.root:
            node.add_leaf(Text("↳ " + safe(t.summary[:200]), style="italic dim"))
        for c in t.children:
            if c.is_topic:
                child = node.add(self.label_for(c, active), data=c, allow_expand=True)
                if c.node_id in self.expanded_ids:
                    self._populate(child)
                    child.expand()
            else:
                node.add_leaf(Text(f"#{c.index} " + safe(" ".join(c.user.split())[:70]), style="dim"), data=c)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        t = event.node.data
        if t is not None and getattr(t, "is_topic", False):
            self.expanded_ids.add(t.node_id)
            if not event.node.children:
                self._populate(event.node)

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed) -> None:
        t = event.node.data
        if t is not None and getattr(t, "is_topic", False):
            self.expanded_ids.discard(t.node_id)

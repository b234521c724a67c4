"""The panes' widgets: chat messages, the memory tree, the event log, the input line."""

from __future__ import annotations

import functools
import os
import re
import time
import unicodedata

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.actions import SkipAction
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, RichLog, Static, TextArea

from trace_core.nodes import FORGOTTEN
from trace_core.textutil import marks, without_marks

from .completion import Completer
from .keys import PROMPT_KEYS
from .prompt_history import PromptHistory
from .scrolling import scroll_a_page
from .text import cluster_start, quoted, safe, visible_markdown
from .turn import opened

THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
# a fence opens a line: three or more backticks or tildes (CommonMark)
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[^\n`]*$")


def split_streamed(text: str) -> tuple[str, str]:
    """A reply streamed so far: (what is drawn as the answer, its ``<think>`` sections).
    A section still open runs to the end; a tag that has half arrived is held back."""
    visible, thoughts = [], []
    text = opened(text)
    pos = 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            tail = text[pos:]
            for k in range(min(len(tail), 7), 0, -1):  # "<thi" or "</th" may be the start of a tag
                if "<think>".startswith(tail[-k:]) or "</think>".startswith(tail[-k:]):
                    tail = tail[:-k]
                    break
            visible.append(tail)
            break
        visible.append(text[pos:start])
        end = text.find("</think>", start)
        if end < 0:
            inner = text[start + 7:]
            for k in range(min(len(inner), 7), 0, -1):
                if "</think>".startswith(inner[-k:]):
                    inner = inner[:-k]
                    break
            thoughts.append(inner.strip())
            break
        thoughts.append(text[start + 7:end].strip())
        pos = end + 8
    return "".join(visible), "\n\n".join(t for t in thoughts if t)


def code_blocks(reply: str) -> list[str]:
    """The fenced code blocks of a reply, outside its reasoning (Ctrl+K copies them). As
    Markdown reads them: a ``~~~`` fence, a four-backtick fence round a three-backtick
    one, and a fence a cut reply left open (to its end) are blocks too; Ctrl+K copied an
    older reply's block instead, or a fragment (a trial)."""
    blocks: list[str] = []
    fence = ""
    body: list[str] = []
    for line in THINK.sub("", opened(reply)).split("\n"):
        if not fence:
            m = FENCE.match(line)
            if m:
                fence, body = m.group(1), []
            continue
        stripped = line.strip()
        if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
            blocks.append("\n".join(body) + "\n")
            fence = ""
        else:
            body.append(line)
    if fence and body:  # left open: Markdown shows it as code to the end
        blocks.append("\n".join(body) + "\n")
    return blocks


# what Ctrl+↑/↓ (or a click) selects and Ctrl+Y copies, in screen order
SELECTABLE = "UserMessage, AssistantMessage, PastExchangeView"
STALL_SECONDS = 15.0  # a reply whose text stops this long says it is waiting (and what Esc does)


def message_text(widget) -> str:
    """The text a selected message copies: a reply without its reasoning section."""
    if isinstance(widget, AssistantMessage):  # the app's "[reply cancelled]" is no words of the reply
        return without_marks(THINK.sub("", opened(widget.text))).strip()
    if isinstance(widget, PastExchangeView):  # a stored exchange: the message, then the reply
        return f"{widget.exchange.user}\n\n{without_marks(widget.exchange.assistant).strip()}"
    return getattr(widget, "text", "")


def head_line(index: int, when: str, *notes: str) -> str:
    """"#12 · 2026-12-03 10:04 · archived": the line over an exchange, live or reopened."""
    return " · ".join([f"#{index}", *(p for p in (when, *notes) if p)])


class ExchangeHead(Static):
    """The line over a live exchange once it is stored: its number and time, as a
    reopened session shows them (``PastExchangeView``)."""

    def __init__(self, index: int, when: str) -> None:
        super().__init__(Text(head_line(index, when), justify="center"), classes="exchange-head")
        self.index = index
        self.when = when

    def mark_replaced(self) -> None:
        self.add_class("replaced")
        self.update(Text(head_line(self.index, self.when, "replaced below"), justify="center"))

    def mark_forgotten(self) -> None:
        self.add_class("forgotten")
        self.update(Text(head_line(self.index, self.when, "forgotten"), justify="center"))


class UserMessage(Static):
    can_focus = True  # selectable: click it or Ctrl+↑/↓, then Ctrl+Y copies it

    def __init__(self, text: str) -> None:
        super().__init__(Text(safe(text)), classes="user-message")
        self.text = text
        self.state = ""
        self.regenerated = False  # a /retry's: the message was written before, not now

    def set_state(self, state: str) -> None:
        """A mark under the message: "queued …" / "waiting …" until it is sent; "" removes it."""
        self.state = state
        body = Text(safe(self.text))
        if state:
            body.append("\n" + state, style="italic")
        self.set_class(bool(state), "queued")
        self.update(body)


class Notice(Static):
    """A note in the chat. ``body``: a Rich renderable drawn instead of ``text`` (a table
    that wraps by column); ``plain`` is the text either way."""

    def __init__(self, text: str, level: str = "info", body=None) -> None:
        super().__init__(Text(safe(text)) if body is None else body, classes=f"notice {level}")
        self.plain = text

    def say(self, text: str) -> None:
        """Change the text in place (a progress line)."""
        self.plain = text
        self.update(Text(safe(text)))


def cancel_key(widget: Widget) -> str:
    """The cancel key as the widget's notes say it: Esc, or what [keys] made it."""
    name = getattr(widget.app, "key_name", None)
    return name("cancel") if name is not None else "Esc"


def two_columns(sections: list[tuple[str, list[tuple[str, str]]]]):
    """Titled two-column grids for a notice (/help, /search): a long right-hand text
    wraps in its own column, under itself, instead of under the left one."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table

    parts = []
    for title, rows in sections:
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(max_width=46, overflow="fold")
        grid.add_column(ratio=1)
        for left, right in rows:  # Text: "[name]" in a usage is no markup
            grid.add_row(Text(safe(left)), Text(safe(right)))
        parts += [Text(safe(title), style="bold"), Padding(grid, (0, 0, 0, 2))]
    return Group(*parts)


def labelled(title: str, rows: list[tuple[str, str]]):
    """A title over "label: value" lines, the labels right-aligned (/stats): a long value
    (a session's path) wraps in its own column, not at the notice's edge under its label."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table

    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")
    for label, value in rows:
        grid.add_row(Text(safe(f"{label}:")), Text(safe(value)))
    return Group(Text(safe(title)), Padding(grid, (0, 0, 0, 2)))


@functools.cache
def dotted_markdown():
    """Rich's Markdown with "1." in ordered lists (Rich draws "1", the live reply "1."):
    a reopened reply reads as it did live. Made once, on first use."""
    from rich.markdown import ListItem
    from rich.markdown import Markdown as RichMarkdown
    from rich.segment import Segment

    class DottedItem(ListItem):
        def render_number(self, console, options, number, last_number):
            width = len(str(last_number)) + 3
            lines = console.render_lines(self.elements, options.update(width=options.max_width - width),
                                         style=self.style)
            style = console.get_style("markdown.item.number", default="none")
            for k, line in enumerate(lines):
                yield Segment(f"{number}.".rjust(width - 1) + " " if k == 0 else " " * width, style)
                yield from line
                yield Segment("\n")

    class Dotted(RichMarkdown):
        elements = {**RichMarkdown.elements, "list_item_open": DottedItem}

    return Dotted


class PastExchangeView(Widget):
    """A stored exchange shown when a session opens (nexus.history): its date, the
    message, the reply as Markdown; an archived exchange is dimmed. One widget drawn by
    Rich (not a Markdown widget per block): a page of 50 mounts several times faster."""

    COMPONENT_CLASSES = {"past-exchange--date", "past-exchange--user", "past-exchange--note"}
    DEFAULT_CSS = "PastExchangeView { height: auto; }"
    can_focus = True  # selectable like the live messages: Ctrl+Y copies the exchange

    def __init__(self, x) -> None:
        super().__init__(classes="past-exchange" + (" archived" if x.archived else ""))
        self.exchange = x
        # the reply's Markdown source, made safe; the app's marks ("[reply cancelled]") are
        # shown under it as a note, as in a live reply, not as words of the reply
        self.source = visible_markdown(safe(without_marks(x.assistant)))
        self.marks = [safe(m) for m in marks(x.assistant)]
        self._reply = None  # parsed once: render() runs for layout and for each paint
        self.replaced = False  # /retry or /edit put another exchange in its place (shown below)
        self.forgotten = x.archived and x.user == FORGOTTEN and x.assistant == FORGOTTEN

    def mark_forgotten(self) -> None:
        """/forget erased it: its head alone stays, saying so."""
        self.forgotten = True
        self.add_class("forgotten")
        self.refresh(layout=True)

    def mark_replaced(self) -> None:
        self.replaced = True
        self.add_class("replaced")
        self.refresh(layout=True)

    def render(self):
        from rich.console import Group
        from rich.padding import Padding

        if self._reply is None:
            self._reply = dotted_markdown()(self.source)

        x = self.exchange
        if self.forgotten:  # in a Group, as the other heads: a bare Text was drawn flush left
            return Group(Text(head_line(x.index, x.when, "forgotten"), justify="center",
                              style=self.get_component_rich_style("past-exchange--date")))
        head = head_line(x.index, x.when, "archived" if x.archived else "", "replaced below" if self.replaced else "")
        parts: list = [Text(head, style=self.get_component_rich_style("past-exchange--date"), justify="center")]
        if x.note:
            parts.append(Text(safe(x.note), style=self.get_component_rich_style("past-exchange--note")))
        user = Padding(Text(safe(x.user)), (0, 1), style=self.get_component_rich_style("past-exchange--user"))
        parts.append(Padding(user, (1, 0, 0, 8)))
        parts.append(Padding(self._reply, (1, 4, 0, 0)))
        if self.marks:
            parts.append(Padding(Text(" · ".join(self.marks), style=self.get_component_rich_style(
                "past-exchange--note")), (0, 1)))
        return Group(*parts)


class AssistantMessage(Vertical):
    """A streamed reply: tokens go to a MarkdownStream (no full re-render per token);
    one final update folds <think> sections and adds sources."""

    can_focus = True  # selectable, as UserMessage

    def __init__(self, turn: int = 0, stall_after: float = STALL_SECONDS) -> None:
        super().__init__(classes="assistant-message")
        self.turn = turn
        # text came, then none for this long: said under it (a stalled stream looked alive)
        self.stall_after = stall_after
        self.stalled = Static("", classes="reply-stalled")
        self.stalled_text = ""
        self._last_text = time.monotonic()
        self._stall_timer = None
        self.text = ""
        self.body = Markdown("", classes="reply-body")
        self._stream = None
        # from send to the first token: the model is working, for this many seconds
        self.waiting = Static("", classes="reply-waiting")
        self.waiting_text = ""
        self.searching = ""  # the web query searched before the model is asked, while it runs
        self.note = ""
        self.streamed_reasoning = ""  # reasoning_content (never part of self.text: never stored)
        self.inline_reasoning = ""  # the reply's own <think> sections, so far
        self._shown = 0  # characters of the reply's visible part drawn or pending
        self._drawn = ""  # that part
        self._thoughts: Static | None = None
        self._started = time.monotonic()
        self._timer = None
        self._pending: list[str] = []  # chunks not drawn yet (drawn in batches: _flush)
        self._flush_timer = None
        self.draws = 0  # batches drawn while streaming

    def compose(self):
        yield self.waiting
        yield self.body
        yield self.stalled

    def on_mount(self) -> None:
        self.stalled.display = False
        self._tick()
        self._timer = self.set_interval(1.0, self._tick)
        self._stall_timer = self.set_interval(0.5, self._check_stall)

    def _check_stall(self) -> None:
        """Some text came, then none for ``stall_after`` seconds: say so, and what Esc does."""
        quiet = time.monotonic() - self._last_text
        if not (self.text or self.streamed_reasoning) or quiet < self.stall_after:
            return
        self.stalled_text = f"⋯ no new text for {int(quiet)} s — {cancel_key(self)} stops it, the partial text is kept"
        self.stalled.update(Text(self.stalled_text))
        self.stalled.display = True

    def _text_came(self) -> None:
        self.stop_waiting()
        self._last_text = time.monotonic()
        self.stalled.display = False

    def _tick(self) -> None:
        seconds = int(time.monotonic() - self._started)
        if self.searching:  # "the model is working" for the 9 s an offline search took (a trial)
            self.waiting_text = f"⋯ searching the web for {quoted(self.searching, 80)} — {seconds} s"
        elif getattr(self.app, "server_answered", True):
            self.waiting_text = f"⋯ the model is working — {seconds} s"
        else:  # "working" for two minutes while the title said "no model server" (a trial)
            self.waiting_text = ("⋯ waiting for the model server, which did not answer when Nexus started — "
                                 f"{seconds} s ({cancel_key(self)} cancels)")
        self.waiting.update(Text(self.waiting_text))

    def show_searching(self, query: str) -> None:
        """The web search of this reply's turn began (``query``) or ended (``""``)."""
        self.searching = query
        if self._timer is not None:  # still waiting for the first token
            self._tick()

    def stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.waiting.display = False

    @property
    def reasoning(self) -> str:
        return "\n\n".join(r for r in (self.streamed_reasoning, self.inline_reasoning) if r)

    async def write(self, chunk: str) -> None:
        """Chunks are drawn in batches, the longer the reply the fewer: each draw parses
        the reply's last block again, so a chunk at a time cost the square of its length
        (a 2,000-line reply held the screen 81 s: a trial). A ``<think>`` section goes to
        the folded reasoning as it streams (it was drawn as the answer until the end: a trial)."""
        self._text_came()
        self.text += chunk
        visible, inline = split_streamed(self.text)
        if not visible.startswith(self._drawn):  # a "</think>" came: what was drawn as the answer was reasoning
            await self._redraw(visible)
        elif len(visible) > self._shown:
            self._pending.append(safe(visible[self._shown:]))
            self._shown = len(visible)
            self._drawn = visible
        if inline != self.inline_reasoning:
            self.inline_reasoning = inline
            await self._show_reasoning()
        if self._pending and self._flush_timer is None:
            self._flush_timer = self.set_timer(min(2.0, max(0.05, len(self.text) / 200_000)), self._flush)

    async def _redraw(self, visible: str) -> None:
        """Draw the answer anew, as ``visible`` (the stream drew the text before it)."""
        await self._stop_stream()
        await self.body.update(safe(visible))
        self._shown = len(visible)
        self._drawn = visible

    async def _stop_stream(self) -> None:
        """No more streamed drawing: the pending text dropped (the caller draws the whole)."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        self._pending = []
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None

    async def _flush(self) -> None:
        self._flush_timer = None
        if not self._pending:
            return
        text, self._pending = "".join(self._pending), []
        if self._stream is None:
            self._stream = Markdown.get_stream(self.body)
        self.draws += 1
        await self._stream.write(text)

    async def think(self, chunk: str) -> None:
        """Streamed reasoning (``reasoning_content``): live in the folded section."""
        self._text_came()
        self.streamed_reasoning += chunk
        await self._show_reasoning()

    async def _show_reasoning(self) -> None:
        text = self.reasoning
        if not text:
            return
        if self._thoughts is None:
            self._thoughts = Static(Text(safe(text)), classes="reasoning-text")
            await self.mount(Collapsible(self._thoughts, title="reasoning", collapsed=True), before=self.body)
        else:
            self._thoughts.update(Text(safe(text)))
        # folded, the title shows it is alive
        self.query_one(Collapsible).title = f"reasoning ({len(text.split())} words)"

    async def finish(self, text: str, note: str = "", sources=()) -> None:
        self.stop_waiting()
        if self._stall_timer is not None:
            self._stall_timer.stop()
        self.stalled.display = False
        await self._stop_stream()  # the whole text is drawn below
        self.text = text
        thoughts = [t.strip() for t in THINK.findall(opened(text)) if t.strip()]
        answer = THINK.sub("", opened(text)).strip()
        if note:  # the note says it ("reply cut at the max_tokens limit"): the stored mark need not
            answer = without_marks(answer)
        self.inline_reasoning = "\n\n".join(thoughts)  # both kinds: one folded section
        await self._show_reasoning()
        await self.body.update(visible_markdown(safe(answer)))
        if sources:
            lines = "\n".join(f"[{i}] {title} — {url}" for i, (title, url) in enumerate(sources, 1))
            await self.mount(Static(Text(safe("Sources:\n" + lines)), classes="sources"))
        if note:
            self.note = note
            await self.mount(Static(Text(note), classes="reply-note"))

    def code_blocks(self) -> list[str]:
        return code_blocks(self.text)


def is_format_character(character: str | None) -> bool:
    """An invisible character that shapes text (Unicode category Cf: joiners, direction
    marks, soft hyphen), typed as one key."""
    return character is not None and len(character) == 1 and unicodedata.category(character) == "Cf"


class PromptInput(TextArea):
    """The multi-line input. Enter sends; Shift+Enter / Ctrl+J add a line; ↑ on the first
    line and ↓ on the last recall earlier prompts; Tab completes commands and arguments."""

    BINDINGS = [Binding(k.key, k.action, k.description, show=False, id=k.action) for k in PROMPT_KEYS]

    class Submitted(Message):
        """Enter was pressed: ``value`` is the whole text (newlines kept)."""

        def __init__(self, input: PromptInput, value: str) -> None:
            super().__init__()
            self.input = input
            self.value = value

        @property
        def control(self) -> PromptInput:
            return self.input

    def __init__(self, placeholder: str | tuple[str, ...] = "", id: str | None = None,
                 history: PromptHistory | None = None, completer: Completer | None = None) -> None:
        hints = (placeholder,) if isinstance(placeholder, str) else placeholder
        super().__init__(id=id, placeholder=hints[0] if hints else "", soft_wrap=True, tab_behavior="focus",
                         show_line_numbers=False, highlight_cursor_line=False)
        self.hints = hints  # the placeholder, longest first: the longest that fits is shown
        self.titles: tuple[str, ...] = ()  # the border title, alike
        self.prompts = history if history is not None else PromptHistory()  # (TextArea.history is undo)
        self.completer = completer or Completer()
        self._cycle: tuple[str, list[str], int] | None = None  # Tab pressed again: next candidate
        self._choices_for: set[str] = set()  # the texts the choices on the border are about
        self._own_keys: dict[str, str] | None = None  # key -> the editor's own action (``_own_binding``)

    def on_resize(self, event: events.Resize) -> None:
        self._fit_texts()

    def show_title(self, *titles: str) -> None:
        """The border title: the longest of ``titles`` that fits (none: no title)."""
        self.titles = titles
        self._fit_texts()

    def _fit_texts(self) -> None:
        """The longest hint that fits on the empty input's one row, and the longest title
        on its border: cut at the edge, a 60-column terminal read "(Enter sends,
        Shift+Enter or Ctrl+J:" and a 50-column one "editing #14 · … · Esc cance…" (trials)."""
        room = self.content_size.width - 1  # the cursor's cell after it
        if self.hints:
            self.placeholder = next((h for h in self.hints if cell_len(h) <= room), self.hints[-1])
        room = self.outer_size.width - 6  # the corners, a line and a space each side
        self.border_title = next((t for t in self.titles if cell_len(t) <= room), self.titles[-1]) if self.titles else ""

    @property
    def value(self) -> str:
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    @property
    def draft(self) -> str:
        """The text typed and not sent (not an earlier prompt ↑ is showing)."""
        return self.prompts.unsent(self.text)

    async def _on_key(self, event: events.Key) -> None:
        # Every key of the editor is handled here, in key order: a binding runs only after
        # its key has bubbled up to the app, and the keys behind it were typed first (Ctrl+U
        # then "/quit" in one burst deleted "/q" and sent "uit"; Backspace took the wrong letter)
        if event.key == "enter":  # TextArea would insert a newline
            event.stop()
            event.prevent_default()
            self.action_submit()
            return
        action = self._own_binding(event.key)
        if action is not None:
            event.stop()
            event.prevent_default()
            await self.run_action(action)
        elif is_format_character(event.character) and not self.read_only:
            # TextArea types only what ``str.isprintable`` passes, and it fails the joiners
            # (U+200C/U+200D) of Persian words and emoji sequences (trial: typed "می‌خواهم"
            # was sent as "میخواهم"); what the user types is sent as typed
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard(event.character, start, end)

    def _own_binding(self, key: str) -> str | None:
        """The action this editor binds ``key`` to, the user's keymap applied (the app's
        priority keys never reach it). Worked out once: it is asked at every key."""
        if self._own_keys is None:
            bindings = self._bindings.copy()
            keymap = getattr(self.app, "keymap", None)  # validated at start, as Textual was given it
            if keymap:
                bindings.apply_keymap(keymap)
            self._own_keys = {}
            for k, found in bindings.key_to_bindings.items():
                actions = [b.action for b in found if not b.priority]
                if actions:
                    self._own_keys[k] = actions[0]
        return self._own_keys.get(key)

    def action_copy(self) -> None:
        """Ctrl+C: the input's selection is copied, else text selected with the mouse in
        the chat (it stopped the reply instead: a review); with none, the key goes on to the
        app's own Ctrl+C (handled here, every key of the editor stops here: it did nothing)."""
        if self.selected_text:
            super().action_copy()
            return
        on_screen = self.screen.get_selected_text()
        if on_screen:
            self.app.copy_to_clipboard(on_screen)
        else:
            self.app.action_help_quit()

    def action_delete_left(self) -> None:
        """Backspace takes the character the user sees: an emoji of joined parts, a flag,
        a letter with its accent. One code point at a time left a lone joiner in the
        draft ("a🐈‍b" from "a🐈‍⬛b": a trial)."""
        start, end = self.selection
        if self.read_only or start != end or start[1] == 0:
            super().action_delete_left()
            return
        row, col = start
        self._delete_via_keyboard((row, cluster_start(self.document.get_line(row), col)), start)

    def check_consume_key(self, key: str, character: str | None) -> bool:
        return is_format_character(character) and not self.read_only or super().check_consume_key(key, character)

    def action_submit(self) -> None:
        text = self.text
        if not text.strip():
            return
        self.prompts.add(text)
        self.prompts.reset()
        # emptied now, not when the app reads the message: keys typed meanwhile (fast
        # typing, a terminal's burst) start the next prompt instead of joining this one
        self.value = ""
        self.post_message(self.Submitted(self, text))

    def action_newline(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)
        # the input grows to its bound first: the new line was scrolled to before it had
        # room, and the cursor sat under the bottom border until the next key (a trial)
        self.call_after_refresh(self.scroll_cursor_visible)

    def _on_paste(self, event: events.Paste) -> None:
        # TextArea's own handler inserts the text (Textual calls each class's in turn)
        self.call_after_refresh(self.scroll_cursor_visible)

    def action_delete_to_start_of_line(self) -> None:
        """Ctrl+U clears to the start of the line typed, not of the screen row it wrapped
        onto (it took the last row of a long sentence only: a trial)."""
        start, end = self.selection
        if self.read_only or start != end or end[1] == 0:
            super().action_delete_to_start_of_line()
            return
        self._delete_via_keyboard((end[0], 0), end)

    def _cursor_row(self) -> int:
        """The screen row of the cursor in the text, lines wrapped."""
        return self.wrapped_document.location_to_offset(self.cursor_location).y

    # ↑/↓ recall prompts from the first or last row on screen, not of the line: on a line
    # wrapped over rows, ↑ replaced the sentence being typed by an earlier prompt (a trial)
    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self._cursor_row() == 0:
            earlier = self.prompts.previous(self.text)
            if earlier is not None:
                self.value = earlier
            return
        super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        if not select and self._cursor_row() >= self.wrapped_document.height - 1:
            later = self.prompts.following(self.text)
            if later is not None:
                self.value = later
            return
        super().action_cursor_down(select)

    def _choices(self, names: list[str]) -> str:
        """The completions on the bottom border: whole names, as many as fit, then how many
        more. The border cut the last one ("/sessi…", a 40-column trial) and said nothing
        of those after the eighth."""
        room = self.outer_size.width - 6  # the corners, a line and a space each side
        shown: list[str] = []
        for name in names:
            more = len(names) - len(shown) - 1
            if cell_len("  ".join([*shown, name]) + (f"  +{more} more" if more else "")) > room:
                break
            shown.append(name)
        rest = len(names) - len(shown)
        return "  ".join(shown) + (f"  +{rest} more" if rest else "")

    def update_suggestion(self) -> None:  # TextArea's hook, called as the text changes
        """The ghost text after the cursor: the first completion (→ or Tab takes it)."""
        text = self.text
        if (getattr(self, "completer", None) is None or not text.startswith("/") or "\n" in text
                or self.cursor_location != self.document.end):
            self.suggestion = ""
            return
        found = self.completer.complete(text)
        self.suggestion = found[0][len(text):] if found and found[0].startswith(text) else ""

    def action_complete(self) -> None:
        text = self.text
        if self._cycle and self._cycle[1] and text == self._cycle[1][self._cycle[2]]:
            base, found, i = self._cycle
            i = (i + 1) % len(found)
            self._cycle = (base, found, i)
            self.value = found[i]
            return
        found = self.completer.complete(text)
        self._cycle = None
        if not found:
            return
        common = os.path.commonprefix(found)
        if len(found) == 1:
            self.value = found[0]
        elif len(common) > len(text):
            self.value = common
        else:
            self._cycle = (text, found, 0)
            self.value = found[0]
        self.border_subtitle = self._choices([f.rstrip().rsplit(" ", 1)[-1] for f in found]) if len(found) > 1 else ""
        self._choices_for = set(found) | {self.text} if len(found) > 1 else set()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        # the choices stay while Tab cycles through them; other typing, a send or a recalled
        # prompt takes them away (they stayed on the border through later messages)
        if self.border_subtitle and self.text not in self._choices_for:
            self.border_subtitle = ""
            self._choices_for = set()


class EventLog(RichLog):
    LEVELS = ["debug", "info", "warning", "error"]
    STYLES = {"debug": "dim", "info": "", "warning": "yellow", "error": "bold red"}
    TAGS = {"debug": "DBG ", "info": "INFO", "warning": "WARN", "error": "ERR "}  # "ERRO" read as a typo (a trial)

    def __init__(self, level: str = "info", **kw) -> None:
        super().__init__(markup=False, highlight=False, wrap=True, max_lines=5000, **kw)
        self.level = level
        self.history: list[tuple[str, str]] = []
        self._stale = False  # lines were written while hidden (at a default width)
        self._drawn_width = 0  # the width the shown lines were wrapped at

    def add(self, text: str, level: str = "info") -> None:
        self.history.append((level, text))
        if self.LEVELS.index(level) >= self.LEVELS.index(self.level):
            self._line(level, text)

    def _line(self, level: str, text: str) -> None:
        """One line, wrapped at the pane's width (RichLog's own measure stops near 80
        columns); written while hidden, drawn again when the pane is shown."""
        width = self.scrollable_content_region.width
        shown = self.display and width > 0
        self.write(Text(f"{self.TAGS[level]} {safe(text)}", style=self.STYLES[level]),
                   width=width if shown else None)
        if not shown:
            self._stale = True
        else:
            self._drawn_width = width

    def on_resize(self, event) -> None:
        super().on_resize(event)
        self.redraw_if_stale()  # shown again, or narrowed or widened: wrapped again at its width

    def redraw_if_stale(self) -> None:
        """Lines written while the pane was hidden, or at another width, drawn again at its width."""
        width = self.scrollable_content_region.width
        if self.display and width > 0 and (self._stale or (self._drawn_width and width != self._drawn_width)):
            self._stale = False
            self.set_level(self.level)

    def set_level(self, level: str) -> None:
        self.level = level
        self.clear()
        for lv, text in self.history[-2000:]:
            if self.LEVELS.index(lv) >= self.LEVELS.index(level):
                self._line(lv, text)


class ChatScroll(VerticalScroll):
    """The chat. A resize keeps the reading place: the message at the top of the view
    stays there, at the same share of its height (the same line number pointed at
    another message once every message wrapped anew: a trial, reading back in a long
    session). Following the end needs nothing: the anchor keeps it there."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._place: tuple[Widget, float] | None = None  # (message, share of it above the view)
        self._place_width = 0  # the width the place was read at
        self._restoring = False

    @property
    def following(self) -> bool:
        return self.is_anchored and not self._anchor_released

    def action_page_up(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.release_anchor()
        scroll_a_page(self, up=True)

    def action_page_down(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        scroll_a_page(self, up=False)

    def reading_place(self) -> tuple[Widget, float] | None:
        """The message at the top of the view, and how far into it the view starts."""
        y = self.scroll_y
        kids = [w for w in self.children if w.display]
        lo, hi = 0, len(kids)
        while lo < hi:  # the first message whose bottom is below the view's top
            mid = (lo + hi) // 2
            r = kids[mid].virtual_region
            if r.y + r.height > y:
                hi = mid
            else:
                lo = mid + 1
        if lo == len(kids):
            return None
        r = kids[lo].virtual_region
        return kids[lo], (y - r.y) / r.height if r.height else 0.0

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        relaid = self._place is not None and self.size.width != self._place_width
        super().watch_scroll_y(old_value, new_value)
        if relaid:
            # laid out at a new width, shorter: the view was pulled to the end, which took
            # the anchor back, and a resize while reading back jumped to the reply streaming
            # below (a trial). The user did not scroll: the resize restores the place.
            self._anchor_released = True
            return
        if not self._restoring:
            # read now, in the layout the user sees: by the time a Resize arrives, the
            # messages are laid out at the new width already
            self._remember_place()

    def _remember_place(self) -> None:
        self._place = None if self.following else self.reading_place()
        self._place_width = self.size.width

    def on_resize(self, event: events.Resize) -> None:
        if self._place is not None and not self.following:
            self._restoring = True
            self.call_after_refresh(self._restore, 4)

    def _restore(self, passes: int) -> None:
        """Scroll back to the reading place; again after the next refresh while the
        messages are still settling at the new width (Markdown wraps after the first)."""
        place = self._place
        if place is None or place[0].parent is not self or self.following:
            self._restoring = False
            self._place = None  # gone (/clear) or followed: read again at the next scroll
            return
        widget, share = place
        r = widget.virtual_region
        y = r.y + round(share * r.height)
        if y == round(self.scroll_y) or passes <= 1:
            self.scroll_to(y=y, animate=False, immediate=True)
            self._restoring = False
            self._remember_place()  # at this width now
            return
        self.scroll_to(y=y, animate=False, immediate=True)
        self.call_after_refresh(self._restore, passes - 1)


# the memory tree pane lives in its own module (snapshots, in-place updates, marks)
from .treepane import MemoryTree  # noqa: E402,F401

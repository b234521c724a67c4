"""Key actions: panes, Esc, selecting and copying messages, the log level."""

from __future__ import annotations

import time

from textual.actions import SkipAction
from textual.containers import VerticalScroll

from trace_core.textutil import without_marks

from .inspector import NodeInspector
from .scrolling import scroll_a_page
from .treepane import MemoryTree
from .widgets import SELECTABLE, AssistantMessage, EventLog, PastExchangeView, UserMessage, code_blocks, message_text

CODE_AGAIN_SECONDS = 10.0  # Ctrl+K within this of the last: the block before


class KeyActions:
    """NexusApp's key actions (bound in nexus/keys.py)."""

    def _on_main_screen(self) -> None:
        """The app's keys are priority bindings: over the command palette (or any other
        screen) they step aside so that screen's own keys (Esc closes it) work."""
        if len(self.screen_stack) > 1:
            raise SkipAction()

    def action_toggle_tree(self) -> None:
        self._on_main_screen()
        t = self.query_one("#tree")
        t.display = not t.display

    def focus_now(self, widget) -> None:
        """Focus moved by a key takes the keys right behind it: ``focus()`` waits for the
        next idle moment, and Ctrl+B then Enter in one burst sent the draft (a trial)."""
        self.screen.set_focus(widget)

    def action_focus_tree(self) -> None:
        """Into the tree pane from the keyboard (shown if hidden): the arrows move, Space
        opens a branch, Enter inspects; Esc comes back to the input."""
        self._on_main_screen()
        self.query_one("#tree").display = True
        self.focus_now(self.query_one(MemoryTree))

    def action_toggle_log(self) -> None:
        self._on_main_screen()
        t = self.query_one("#log")
        t.display = not t.display

    # Ctrl+←/→ take the tree pane past the stylesheet's bounds for its default, by 4
    # columns, to SIDE_WIDEST at most and never leaving the chat under CHAT_NARROWEST
    SIDE_NARROWEST, SIDE_WIDEST, CHAT_NARROWEST = 16, 120, 40

    def _widest_side(self, screen_width: int) -> int:
        return max(self.SIDE_NARROWEST, min(self.SIDE_WIDEST, screen_width - self.CHAT_NARROWEST))

    def _side_width(self, step: int) -> None:
        self._on_main_screen()
        t = self.query_one("#tree")
        # the width last set, not yet laid out in a burst (four Ctrl+→ widened it once: a
        # trial); else the laid-out outer width (the width style includes border and padding)
        current = t.outer_size.width
        if t.styles.inline.has_rule("width") and t.styles.width is not None and t.styles.width.is_cells:
            current = int(t.styles.width.value)
            bound = t.styles.max_width  # a smaller terminal holds it under its width (fit_side)
            if bound is not None and bound.is_cells:
                current = min(current, int(bound.value))
        widest = self._widest_side(self.size.width)
        width = min(max(current + step, self.SIDE_NARROWEST), widest)
        if step > 0 and width < current:  # "wider" never narrows it (at 60 columns it took one off: a trial)
            width = current
        t.styles.width = width
        t.styles.max_width, t.styles.min_width = max(widest, width), self.SIDE_NARROWEST

    def fit_side(self, screen_width: int) -> None:
        """A tree pane widened by hand keeps the chat its 40 columns when the terminal
        shrinks (it kept its width, the chat squeezed to 12: a trial), and gets its width
        back when the terminal grows again."""
        panes = self.query("#tree")
        if panes and panes.first().styles.inline.has_rule("max_width"):  # set by Ctrl+←/→
            panes.first().styles.max_width = self._widest_side(screen_width)

    def fit_prompt(self, screen_height: int) -> None:
        """The input grows with its lines up to a third of the terminal, 12 rows at most:
        at 18 rows its 12 left the chat 2, and a refusal's words were cut (a trial)."""
        prompts = self.query("#prompt")
        if prompts:
            prompts.first().styles.max_height = max(3, min(12, screen_height // 3))

    def action_grow_side(self) -> None:
        self._side_width(4)

    def action_shrink_side(self) -> None:
        self._side_width(-4)

    def action_cancel(self) -> None:
        """Esc: close the inspector; from the tree or a selected message, back to the input
        (a user browsing while a reply streams must not stop it); else stop what runs."""
        self._on_main_screen()
        if self.query_one(NodeInspector).close():
            return
        if self.focused is not None and self.focused is not self.query_one("#prompt"):
            self.action_focus_input()
            return
        if self.editing is not None and self.turn is None:
            self.cancel_edit(self.key_name("cancel"))
            return
        if self.editing_kept is not None and self.turn is None:
            self.cancel_kept_edit()
            return
        if self.scenarios.cancel():
            return  # a running scenario takes Esc before the reply does
        busy = self.busy_with_long_command()
        if busy and not self.cancel_long.is_set():  # /load, /ingest, /reorganize stop at their next step
            self.cancel_long.set()
            # said at once: a veto in flight can take seconds, and Esc seemed lost (a trial)
            self.chat_notice(f"Cancelling {busy} after its current step…")
        if self.stop_model_list():  # /model's wait, not the reply that may stream meanwhile
            return
        if self.turn is not None:  # that request only, before its first byte too
            self.turn.cancel()

    def action_help_quit(self) -> None:
        """Ctrl+C with nothing selected to copy: what a terminal's Ctrl+C would do — a reply
        streaming stops (as Esc); else a note says how to quit (it did nothing and said
        nothing: a trial; Textual's own toast looked for a key it did not find)."""
        if self.turn is not None:
            self.turn.cancel()
            return
        hint = (f"Ctrl+C copies selected text. {self.key_name('quit')} quits Nexus (what you wrote is kept); "
                f"{self.key_name('cancel')} cancels a reply.")
        if self.last_chat_notice() == hint:  # pressed again, as in a terminal: the hint once (it stacked: a trial)
            self.follow_chat()
            return
        self.chat_notice(hint)

    def action_focus_input(self) -> None:
        self._on_main_screen()
        self.focus_now(self.query_one("#prompt"))
        self.follow_chat()

    def action_page_chat_up(self) -> None:
        self._page_chat(up=True)

    def action_page_chat_down(self) -> None:
        self._page_chat(up=False)

    def _page_chat(self, up: bool) -> None:
        """PageUp/PageDown while typing scroll the chat (the input's own paging moved its
        cursor only); in any other pane they are that pane's own keys."""
        if self.focused is None or self.focused.id != "prompt":
            raise SkipAction()
        chat = self.query_one("#chat", VerticalScroll)
        if up:
            chat.release_anchor()  # reading up: new text no longer pulls the chat down
        scroll_a_page(chat, up)
        if not up and chat.scroll_y >= chat.max_scroll_y:
            self.follow_chat()  # back at the end: follow new text again

    def follow_chat(self) -> None:
        """Back at the chat's end, and kept there as replies stream in: reading up (a
        scroll, Ctrl+↑) lets go of the end until the user sends, or comes back to the input."""
        self.query_one("#chat", VerticalScroll).anchor()

    def selectable_messages(self) -> list:
        """The chat's messages in screen order: what Ctrl+↑/↓ select and Ctrl+Y copies."""
        return list(self.query_one("#chat").query(SELECTABLE))

    def _select(self, step: int) -> None:
        self._on_main_screen()
        items = self.selectable_messages()
        if not items:
            self.notify("No messages yet.")
            return
        focused = self.focused
        if focused in items:
            if step > 0 and focused is items[-1]:  # past the newest message: the input, the chat's end
                self.action_focus_input()
                return
            i = max(0, min(len(items) - 1, items.index(focused) + step))
        elif step > 0:  # nothing selected: the input is past the newest message already
            self.action_focus_input()  # (Ctrl+↓ there selected #0, and typing was lost: a trial)
            return
        else:
            i = len(items) - 1
        items[i].can_focus = True
        self.focus_now(items[i])
        items[i].scroll_visible(animate=False)

    def on_key(self, event) -> None:
        """A character typed with a message selected (Ctrl+↑/↓, a click) goes on in the
        input, as from the tree pane: it was lost."""
        if isinstance(self.focused, (AssistantMessage, PastExchangeView, UserMessage)) and event.is_printable \
                and event.character:
            event.stop()
            event.prevent_default()
            self.tree_typed(MemoryTree.Typed(event.character))

    def action_select_previous(self) -> None:
        self._select(-1)

    def action_select_next(self) -> None:
        self._select(1)

    def action_copy_reply(self) -> None:
        """Copy the selected message (clicked, or Ctrl+↑/↓), else the last reply."""
        self._on_main_screen()
        if self.focused in self.selectable_messages():
            self.copy_to_clipboard(message_text(self.focused))
            self.notify("Message copied.")
            return
        replies = self.replies_on_screen()
        if replies:
            self.copy_to_clipboard(replies[-1])
            self.notify("Reply copied.")
        else:
            self.notify("No reply to copy yet.")

    def replies_on_screen(self) -> list[str]:
        """The replies the chat shows, in order: live ones and those of a reopened or
        loaded session (Ctrl+Y and Ctrl+K found nothing in those)."""
        out = []
        for widget in self.query_one("#chat").children:
            if isinstance(widget, AssistantMessage):
                out.append(message_text(widget))
            elif isinstance(widget, PastExchangeView):
                out.append(without_marks(widget.exchange.assistant).strip())
        return [text for text in out if text]

    def action_copy_code(self) -> None:
        """The selected message's last code block, else the last reply's; pressed again
        (within ``CODE_AGAIN_SECONDS``), the block before it. It copied the newest reply's
        block whatever was selected, and the same one at each press (a trial)."""
        self._on_main_screen()
        if self.focused in self.selectable_messages():
            blocks = code_blocks(message_text(self.focused))
        else:
            blocks = [b for reply in self.replies_on_screen() for b in code_blocks(reply)]
        if not blocks:
            self.notify("No code block to copy." if self.focused not in self.selectable_messages()
                        else "No code block in the selected message.")
            return
        now = time.monotonic()
        last_at, back, last_blocks = self._code_copied
        back = back + 1 if now - last_at < CODE_AGAIN_SECONDS and last_blocks == blocks else 0
        back %= len(blocks)
        self._code_copied = (now, back, blocks)
        self.copy_to_clipboard(blocks[-1 - back])
        key = self.key_name("copy_code")
        # at the first block the next press goes round to the last: "the one before" it has none
        then = "the one before" if back < len(blocks) - 1 else "the last"
        where = f" ({len(blocks) - back} of {len(blocks)}; {key} again for {then})" if len(blocks) > 1 else ""
        self.notify(f"Code block copied{where}.")

    def action_cycle_log_level(self) -> None:
        self._on_main_screen()
        log_pane = self.query_one(EventLog)
        levels = EventLog.LEVELS
        log_pane.set_level(levels[(levels.index(log_pane.level) + 1) % len(levels)])
        self.notify(f"Log level: {log_pane.level}")

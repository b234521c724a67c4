"""Paging a scrollable pane by keyboard."""

from __future__ import annotations

from textual.widget import Widget


def scroll_a_page(widget: Widget, up: bool) -> None:
    """A page up or down, applied now. Key repeat delivers a burst of PageUps before any
    refresh, and Textual's own page scroll, applied after the next refresh, counted each
    from the same place: eight PageUps moved the chat two pages (a trial)."""
    page = widget.scrollable_content_region.height
    widget.scroll_to(y=widget.scroll_y + (-page if up else page), animate=False, immediate=True)

"""An app's own marks on a line of their own ("[reply cancelled]") are not words of the
conversation: topic names and summaries are made without them."""

from __future__ import annotations

from trace_core.textutil import extractive_name, extractive_summary

CUT = ("My name is Ada and I live in Porto.", "Lovely, Porto is\n\n[reply cancelled]")


def test_a_mark_line_names_nothing():
    name = extractive_name("\n".join(CUT))
    assert "Cancelled" not in name and "Reply" not in name
    assert "Porto" in name and "Ada" in name


def test_a_mark_line_is_not_summarised():
    summary = extractive_summary([CUT])
    assert "[reply cancelled]" not in summary and "Porto" in summary


def test_brackets_inside_text_still_count():
    assert "Postgres" in extractive_name("See [the Postgres docs](http://x) about indexes")
    assert "Checklist" in extractive_name("[x] Checklist item for the Postgres upgrade")

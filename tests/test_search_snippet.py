"""A search hit in a long message shows the part that holds the query's words: a 60-line
paste found for "number 42" showed its first lines (a trial)."""

from nexus.text import around_words

PASTE = "\n".join(f"Line {i:04d}: filler text here" for i in range(60)).replace(
    "Line 0042: filler text here", "Line 0042: the number 42 is here")


def test_a_long_message_shows_the_part_with_the_query_words():
    shown = around_words(PASTE, "number 42")
    assert "the number 42 is here" in shown and shown.startswith("…") and len(shown) <= 120
    assert "Line 0001" not in shown


def test_a_message_whose_start_holds_the_words_or_that_is_short_shows_its_start():
    assert around_words("short text", "anything") == "short text"
    start = around_words("My sister Ana lives in Porto. " + "More words. " * 30, "sister Porto")
    assert start.startswith("My sister Ana") and start.endswith("…")
    assert around_words("x " * 200, "nowhere").startswith("x x")

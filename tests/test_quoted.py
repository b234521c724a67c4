"""What a user typed is quoted the same way whatever it holds (a trial saw 'a' and "it's")."""

from nexus.text import quoted


def test_quotes_do_not_change_with_an_apostrophe():
    assert quoted("What's the weather in Lisbon today?") == '"What\'s the weather in Lisbon today?"'
    assert quoted("latest news") == '"latest news"'


def test_one_line_and_cut_with_a_mark():
    assert quoted("two\nlines") == '"two lines"'
    assert quoted("x" * 200, 120) == '"' + "x" * 119 + '…"'

"""A message in an export cannot spill into what follows it (a trial: an unclosed fence
turned the rest of the export into code; a raw <script> was written as is)."""

from nexus.export import as_block


def test_an_unclosed_fence_is_closed_at_the_messages_end():
    assert as_block("Here:\n```python\nprint(1)") == "Here:\n```python\nprint(1)\n```"
    assert as_block("~~~~\ncode") == "~~~~\ncode\n~~~~"
    closed = "```\nx\n```\nafter"
    assert as_block(closed) == closed
    # a shorter or different fence inside does not close a longer one
    assert as_block("````\n```\nx").endswith("\n````")


def test_tags_are_text_outside_code_and_as_written_inside():
    assert as_block("<script>alert(1)</script> and 3 < 4") == "&lt;script>alert(1)&lt;/script> and 3 < 4"
    assert as_block("use `<div>` here") == "use `<div>` here"
    assert as_block("```html\n<div>x</div>\n```") == "```html\n<div>x</div>\n```"

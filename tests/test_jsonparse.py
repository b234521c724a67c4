"""Small models' JSON is repaired with json-repair before the judge falls back (issue 15 item 6).
Each case is a shape gemma-3-270m was seen to answer."""

from __future__ import annotations

import pytest

from trace_core import jsonparse
from trace_core.jsonparse import JSONParseError, parse_json_object

REPAIRABLE = [
    ('{"action": "new", "parent": 0, "name": "Marathon Training', {"action": "new", "parent": 0, "name": "Marathon Training"}),
    ('Sure! {"search": true', {"search": True}),
    ("{action: continue}", {"action": "continue"}),
    ('```json\n{"summary": "Ferns like humidity."\n```', {"summary": "Ferns like humidity."}),
]


@pytest.mark.parametrize("text, expected", REPAIRABLE)
def test_broken_objects_are_repaired(text, expected):
    assert parse_json_object(text) == expected


@pytest.mark.parametrize("text, expected", REPAIRABLE)
def test_without_repair_they_are_refused(text, expected, monkeypatch):
    monkeypatch.setattr(jsonparse, "REPAIR", False)
    with pytest.raises(JSONParseError):
        parse_json_object(text)


@pytest.mark.parametrize("text", ['{"action": }', "{broken", '{"name": "", "parent":', "no json at all", "[1, 2]"])
def test_a_repair_with_no_value_is_no_answer(text):
    with pytest.raises(JSONParseError, match="no JSON object"):
        parse_json_object(text)


def test_a_refused_answer_is_described_never_quoted(monkeypatch):
    """The parse error quoted the model's first 120 characters: a model that restates the
    exchange ("…my bank PIN is 4921…") put the user's words into the proxy's log (trial)."""
    from trace_core import jsonparse
    from trace_core.jsonparse import described as _as_json

    monkeypatch.setattr(jsonparse, "REPAIR", False)
    with pytest.raises(JSONParseError) as err:
        parse_json_object("Sure! The exchange is about User: My bank PIN is 4921 and my password is hunter2")
    assert "4921" not in str(err.value) and "characters" in str(err.value)
    assert _as_json(None) == "null" and _as_json("maybe") == '"maybe"'
    assert "4921" not in _as_json({"question": "My bank PIN is 4921"}) and "question" in _as_json({"question": "x"})
    assert "4921" not in _as_json("My bank PIN is 4921 and the rest of the sentence")


@pytest.mark.parametrize("text, expected", [
    ('<think>Maybe {"action": "new"}? No, it continues.</think>\n{"action": "continue"}', {"action": "continue"}),
    ('Maybe {"action": "new"}? No.\n</think>\n\n{"action": "continue"}', {"action": "continue"}),  # template-opened
    ('{"action": "continue"}', {"action": "continue"}),
])
def test_a_reasoning_models_thinking_is_never_its_answer(text, expected):
    """A reasoning model as the memory model (the chat model, by default) weighs an object
    in its thinking; the first object in the text was taken, the one it had rejected."""
    assert parse_json_object(text) == expected


def test_a_thought_cut_at_the_token_limit_is_no_answer():
    """Cut at the judge's 96 tokens mid-thought, the object it was weighing was taken."""
    with pytest.raises(JSONParseError, match="all reasoning"):
        parse_json_object('<think>The user talks about bees, so {"action": "new", "name": "Bees"} might')

"""Parse the JSON object a small model meant to write.

Models wrap JSON in code fences, add prose around it, use single quotes or leave
trailing commas; small ones also stop mid-object, drop quotes or forget a brace.
Strict parsing first, then our common repairs, then the maintained ``json-repair``
library; an object with no value in it is no answer.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass


class JSONParseError(ValueError):
    pass


@dataclass
class ParseStats:
    repaired: int = 0  # answers only json-repair could read


# process-wide: bench/add.py counts the answers json-repair rescued (and can turn it off)
REPAIR = True
stats = ParseStats()


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _first_object(text: str) -> str | None:
    """The first balanced {...} in ``text``, respecting quoted strings."""
    start = text.find("{")
    while start != -1:
        depth, quote, escaped = 0, "", False
        for i in range(start, len(text)):
            ch = text[i]
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = ""
            elif ch in "\"'":
                quote = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start : i + 1]
        start = text.find("{", start + 1)
    return None


def _repaired(text: str) -> dict | None:
    """``json-repair``'s reading of the first object in ``text`` (unbalanced ones included),
    if it holds at least one non-empty value."""
    try:
        import json_repair
    except ImportError:  # a dependency, but parsing still works without it
        return None
    start = text.find("{")
    if start == -1:
        return None
    try:
        value = json_repair.loads(text[start:])
    except Exception:  # the library's own failures are just "no answer"
        return None
    if isinstance(value, list):  # it may read trailing prose as further items
        value = next((v for v in value if isinstance(v, dict)), None)
    if isinstance(value, dict) and any(v not in ("", None, [], {}) for v in value.values()):
        return value
    return None


# a reasoning model's thinking: a <think> section (to the end if never closed), or all before a lone
# </think> (its chat template opened the section)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)


def without_reasoning(text: str) -> str:
    """``text`` without a reasoning model's thinking: an object it weighed there ("maybe
    {"action": "new"}") is no answer, and a thought cut at the answer's token limit held
    one that was taken for the decision."""
    end = text.find("</think>")
    if end >= 0 and "<think>" not in text[:end]:
        text = text[end + len("</think>"):]
    return _THINK.sub("", text)


def parse_json_object(text: str) -> dict:
    """Return the dict in ``text`` or raise ``JSONParseError`` saying why not."""
    if not isinstance(text, str) or not text.strip():
        raise JSONParseError("the model returned an empty answer")
    if "think>" in text:
        text = without_reasoning(text)
        if not text.strip():
            raise JSONParseError("the model's answer was all reasoning (<think>…), no JSON after it")
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    obj = _first_object(text)
    if obj:
        candidates.append(obj)
    for cand in candidates:
        for attempt in (cand, _TRAILING_COMMA.sub(r"\1", cand)):
            try:
                value = json.loads(attempt)
            except (json.JSONDecodeError, ValueError):
                value = None
            if value is None:
                # single quotes / Python literals: True, None, 'x'
                try:
                    value = ast.literal_eval(attempt)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    value = None
            if isinstance(value, dict):
                return value
    if REPAIR:
        repaired = _repaired(text)
        if repaired is not None:
            stats.repaired += 1
            return repaired
    # its size, never its words: a model restating the exchange put them in the log (a trial)
    raise JSONParseError(f"no JSON object in the model's answer ({len(text)} characters)")


def described(value) -> str:
    """A value the model answered, for an error that reaches the logs: as it wrote it
    (JSON: null, not Python's None) when it is a number, true/false, null or a short
    word; otherwise its shape only. A model that restates the exchange put the user's
    words ("my bank PIN is 4921…") into the log (a trial)."""
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value) if re.fullmatch(r"[\w -]{0,24}", value) else f"text of {len(value)} characters"
    if isinstance(value, dict):
        return "an object with " + (", ".join(map(str, list(value)[:6])) or "nothing in it")
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return type(value).__name__

"""Parse the JSON object a small model meant to write.

Models wrap JSON in code fences, add prose around it, use single quotes or leave
trailing commas. We try strict parsing first and repair only what is common.
"""

from __future__ import annotations

import ast
import json
import re


class JSONParseError(ValueError):
    pass


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


def parse_json_object(text: str) -> dict:
    """Return the dict in ``text`` or raise ``JSONParseError`` saying why not."""
    if not isinstance(text, str) or not text.strip():
        raise JSONParseError("the model returned an empty answer")
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
    raise JSONParseError(f"no JSON object in the model's answer: {text[:120]!r}")

"""Token counting: one estimate used everywhere (engine, reports, benchmarks).

``count_tokens`` is ceil(characters / 4). It is not any model's tokenizer, but it is
the same for every method we compare, which is what a fair budget needs, and it costs
nothing.
"""

from __future__ import annotations

import math


def count_tokens(text: str) -> int:
    return math.ceil(len(text) / 4) if text else 0


def truncate_to_tokens(text: str, tokens: int) -> str:
    """Cut ``text`` to at most ``tokens`` estimated tokens, at a word boundary when possible."""
    limit = tokens * 4
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut + "…"

"""How much of the model's context a turn's prompt may take, and what of the recent window fits."""

from __future__ import annotations

from trace_core.tokens import count_tokens

PROMPT_OVERHEAD = 32  # tokens of role markers and template around the two messages


def limits(context_tokens: int, configured_max: int, chosen_max: int | None = None) -> tuple[int, int]:
    """(context tokens, max reply tokens): the session's /set value, else ``models.max_tokens``;
    0 means a quarter of the context; never more than half of it."""
    max_tokens = int(chosen_max or configured_max) or max(64, context_tokens // 4)
    return context_tokens, min(max_tokens, max(16, context_tokens // 2))


def prompt_room(context_tokens: int, max_tokens: int, own_system: str = "") -> int:
    """Tokens the prompt may take: the context less the reply's share, the template and
    the session's own /system text (it goes before the memory prompt)."""
    own = own_system or ""
    return context_tokens - max_tokens - PROMPT_OVERHEAD - (count_tokens(own) + 1 if own.strip() else 0)


def recent_tokens(messages: list[dict]) -> int:
    return sum(count_tokens(f"{m.get('role', '')}: {m.get('content', '')}") + 1 for m in messages) + 8


def fit_recent(recent: list[dict], avail: int) -> tuple[list[dict], int]:
    """The recent window trimmed oldest first to ``avail`` tokens, and how many messages went."""
    kept = list(recent)
    dropped = 0
    while kept and recent_tokens(kept) > avail:
        kept.pop(0)
        dropped += 1
    return kept, dropped

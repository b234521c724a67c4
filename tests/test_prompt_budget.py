"""The prompt's share of the context (nexus/prompt_budget.py)."""

from __future__ import annotations

from nexus.prompt_budget import PROMPT_OVERHEAD, fit_recent, limits, prompt_room, recent_tokens
from trace_core.tokens import count_tokens


def test_reply_tokens_come_from_the_session_then_the_config_then_a_quarter_of_the_context():
    assert limits(8192, 0) == (8192, 2048)  # 0: a quarter of the context
    assert limits(8192, 500) == (8192, 500)
    assert limits(8192, 500, chosen_max=300) == (8192, 300)  # /set max_tokens wins
    assert limits(1024, 4000) == (1024, 512)  # never more than half the context
    assert limits(256, 0) == (256, 64)


def test_the_prompt_room_leaves_the_reply_the_template_and_the_own_system_text():
    assert prompt_room(4096, 1024) == 4096 - 1024 - PROMPT_OVERHEAD
    own = "You are a terse assistant who answers in French."
    assert prompt_room(4096, 1024, own) == 4096 - 1024 - PROMPT_OVERHEAD - count_tokens(own) - 1
    assert prompt_room(4096, 1024, "   ") == prompt_room(4096, 1024)


def test_the_recent_window_is_trimmed_oldest_first():
    recent = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} about the garden"}
              for i in range(8)]
    kept, dropped = fit_recent(recent, recent_tokens(recent))
    assert kept == recent and dropped == 0
    kept, dropped = fit_recent(recent, recent_tokens(recent[3:]))
    assert kept == recent[3:] and dropped == 3
    assert recent_tokens(kept) <= recent_tokens(recent[3:])
    assert fit_recent(recent, 0) == ([], 8)
    assert len(recent) == 8  # the session's own window is not changed

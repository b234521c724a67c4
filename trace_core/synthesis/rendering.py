"""Stage 4, rendering: the memory block's text, grouped by branch, each entry dated.

``BlockLayout`` is the one place the block's lines are written: the selection stage
prices entries with it, and ``render`` writes them, so what was paid for is what is
shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .. import prompts
from ..nodes import MessageNode, TopicNode
from ..textutil import PLACEHOLDERS, ROLE_WORDS, speaker_label, without_marks
from ..tokens import count_tokens
from .fusion import ROLE_ORDER, asks
from .report import InjectedPath

ARCHIVED = "archived"  # the branch id of entries whose exchange has no topic


_SENTENCE = re.compile(r"(?<=[.!?…])\s+")


def repeats_superseded(summary: str, status: dict[int, str], exchanges) -> bool:
    """A summary that quotes a fact the block marks [superseded] (an extractive summary is
    the topic's own sentences): in the branch header it stated the old fact as current,
    above the lines that say it was corrected (a trial)."""
    old = [exchanges[i].text for i, s in status.items() if s == "superseded"]
    return bool(old) and any(len(s) >= 16 and any(s in t for t in old)
                             for s in (p.strip() for p in _SENTENCE.split(summary)))


def clip_text(text: str, max_chars: int) -> str:
    """Collapse whitespace and cut to ``max_chars`` (memory and baselines alike)."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip() + "…"


def short_date(ts: str) -> str:
    """The day of an exchange: what questions about "when" need, in few tokens."""
    return ts[:10] if ts else "undated"


class BlockLayout:
    """How entries, date lines and branch headers read. Handed the exchanges and the
    tree's ancestry walk."""

    def __init__(self, exchanges: Sequence[MessageNode], ancestors: Callable[..., list[TopicNode]],
                 max_message_chars: int, group_depth: int | None) -> None:
        self.exchanges = exchanges
        self.ancestors = ancestors
        self.max_message_chars = max_message_chars
        self.group_depth = group_depth
        self._texts: dict[tuple[int, str], str] = {}  # selection prices a message at each budget
        self._groups: dict[str, TopicNode] = {}  # topic id -> the ancestor it is shown under

    def text(self, i: int, role: str) -> str:
        key = (i, role)
        if key not in self._texts:
            self._texts[key] = self._text(i, role)
        return self._texts[key]

    def _text(self, i: int, role: str) -> str:
        content = without_marks(self.exchanges[i].role_text(role))
        if not content or content in PLACEHOLDERS:
            return ""
        content = clip_text(content, self.max_message_chars)
        if self._transcript_label(i, role, content):
            return content  # a transcript line names its speaker: the role adds nothing
        return f"{role.capitalize()}: {content}"

    def _transcript_label(self, i: int, role: str, content: str) -> bool:
        """``content`` opens with its speaker's name, as a transcript's lines do: a name
        label that the same role's message of a neighbouring exchange opens with too. A
        lone "Important:" or "Noted:" is no speaker, nor is a role word (a small model's
        reply echoing "User: …" read as the user's words: a trial)."""
        label = speaker_label(content)
        if not label or label[:-2].lower() in ROLE_WORDS:
            return False
        for j in (i - 1, i + 1):
            if 0 <= j < len(self.exchanges) and self.exchanges[j].role_text(role).startswith(label):
                return True
        return False

    def partner(self, i: int, role: str) -> str | None:
        """The message that comes into the block with ``(i, role)``, in a chat (not a
        transcript, whose every line is a person's words): a reply brings what it answers
        — five lines of "That's good to know about your family." without the facts they
        answered made a block (a trial) — and a question its answer."""
        x = self.exchanges[i]
        if self._transcript_label(i, "user", x.user) or self._transcript_label(i, "assistant", x.assistant):
            return None
        if role == "assistant" and self.text(i, "user"):
            return "user"
        if role == "user" and asks(x.user) and self.text(i, "assistant"):
            return "assistant"
        return None

    def line(self, i: int, roles: list[str], status: str = "") -> str:
        """One entry. Its date is on the line above it, shared by the branch's entries of
        the same day."""
        parts = [t for t in (self.text(i, r) for r in sorted(roles, key=lambda r: ROLE_ORDER.get(r, 3))) if t]
        tag = f"[{status}] " if status else ""
        return f"- {tag}" + " | ".join(parts)

    def date_line(self, i: int) -> str:
        return f"[{short_date(self.exchanges[i].timestamp)}]"

    def day(self, i: int) -> str:
        return short_date(self.exchanges[i].timestamp)

    def branch(self, i: int) -> TopicNode | None:
        """The topic an exchange is shown under: its own, or its ancestor at
        ``group_depth`` (fewer, larger groups: fewer header tokens)."""
        topic = self.exchanges[i].parent
        if topic is None or not self.group_depth:
            return topic
        if topic.node_id not in self._groups:
            chain = self.ancestors(topic, exclude_root=True)
            self._groups[topic.node_id] = chain[min(self.group_depth, len(chain)) - 1] if chain else topic
        return self._groups[topic.node_id]

    def header(self, topic: TopicNode | None, summary: str = "") -> str:
        """A branch header. A matched topic (shown with its summary) gets its ancestry
        path, TRACE's multi-path view; other branches just their name, so tokens go to
        content."""
        if topic is None:
            return "## Archived"
        if not summary:
            return f"## {topic.topic_name}"
        path = " → ".join(t.topic_name for t in self.ancestors(topic, exclude_root=True))
        return f"## {path} — {clip_text(summary, 100)}"


def block_header_cost(any_status: bool) -> int:
    """Tokens of the block's first line (and the supersession note, when any entry has a status)."""
    used = count_tokens(prompts.MEMORY_HEADER) + 1
    if any_status:
        used += count_tokens(" " + prompts.SUPERSEDED_NOTE)
    return used


def render(chosen: list[tuple[int, str]], status: dict[int, str], budget: int, top_k_docs: int,
           topic_score: dict[str, float], topic_keyword: dict[str, float], layout: BlockLayout,
           is_frozen: Callable[[TopicNode], bool], thread_path: Callable[[TopicNode], str],
           topic_threshold: float) -> tuple[str, dict[tuple[int, str], int], list[InjectedPath]]:
    """Group chosen messages by branch (best branch first), chronological inside;
    summaries of matched topics are added last, only where tokens remain. Returns the
    text, the tokens each shown message took, and the paths shown."""
    groups: dict[str, dict[int, list[str]]] = {}
    best: dict[str, int] = {}
    topics: dict[str, TopicNode | None] = {}
    for rank, (i, role) in enumerate(chosen):
        topic = layout.branch(i)
        bid = topic.node_id if topic is not None else ARCHIVED
        groups.setdefault(bid, {}).setdefault(i, []).append(role)
        best.setdefault(bid, rank)
        topics[bid] = topic
    order = sorted(groups, key=lambda b: best[b])
    any_status = any(status.get(i) for i, _ in chosen)
    used = block_header_cost(any_status)
    blocks: dict[str, list[str]] = {}
    shown: dict[tuple[int, str], int] = {}
    for bid in order:
        head = layout.header(topics[bid])
        block, block_used = [head], count_tokens(head) + 1
        last_day = None
        for i in sorted(groups[bid]):
            roles = groups[bid][i]
            line = layout.line(i, roles, status.get(i, ""))
            c = count_tokens(line) + 1
            day = layout.date_line(i)
            dc = count_tokens(day) + 1 if day != last_day else 0
            if used + block_used + c + dc > budget:
                continue
            if dc:
                block.append(day)
                last_day = day
            block.append(line)
            block_used += c + dc
            for r in roles:
                shown[(i, r)] = c // len(roles)
        if len(block) > 1:
            blocks[bid] = block
            used += block_used
    summaries: dict[str, str] = {}
    for gi, bid in enumerate(b for b in order if b in blocks):
        topic = topics[bid]
        # TRACE's topic hits: a branch whose summary matched the query shows it
        if (gi >= top_k_docs or topic is None or not is_frozen(topic) or not topic.summary
                or topic_score.get(topic.node_id, 0.0) < topic_threshold
                or repeats_superseded(topic.summary, status, layout.exchanges)):
            continue
        head = layout.header(topic, topic.summary)
        extra = count_tokens(head) - count_tokens(blocks[bid][0])
        if used + extra <= budget:
            blocks[bid][0] = head
            summaries[bid] = topic.summary
            used += extra
    if not blocks:
        return "", {}, []
    lines = [prompts.MEMORY_HEADER]
    if any_status:
        lines[0] += " " + prompts.SUPERSEDED_NOTE
    paths: list[InjectedPath] = []
    for bid in order:
        if bid not in blocks:
            continue
        lines += blocks[bid]
        topic = topics[bid]
        entries = tuple(sorted(i for i in groups[bid] if any((i, r) in shown for r in groups[bid][i])))
        paths.append(InjectedPath(bid, thread_path(topic) if topic is not None else "",
                                  summaries.get(bid, ""), topic_score.get(bid, 0.0), topic_keyword.get(bid, 0.0),
                                  len(blocks[bid]) - 1, entries))
    return "\n".join(lines), shown, paths

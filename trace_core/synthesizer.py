"""PromptSynthesizer: the system prompt of each reply, with a compact memory block.

TRACE's flow — cosine over topic summaries, walk each hit's ancestry, dedupe shared
ancestors, rank, a multi-path block, recalled past messages, the recent window — plus:

- hybrid ranking: dense cosine over every past message and BM25 (FTS5) over message
  text, fused by reciprocal rank with the score of the exchange's branch (topic
  summaries by cosine and BM25), then smoothed to conversation neighbours;
- raw exchanges of the best branches, grouped under their thread path, each dated;
- a hard token budget for the memory block (``memory_token_budget``);
- newer-supersedes-older: a later, similar exchange that reads as an update marks the
  earlier one ``[superseded]`` and itself ``[current]``;
- archived exchanges never appear;
- a structured report of what was injected and why (``last_report``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import prompts
from .tokens import count_tokens

if TYPE_CHECKING:
    from .nodes import MessageNode
    from .store import VectorDatabase
    from .tree import CTree

RRF_K = 60
# words that mark a statement as an update of an earlier one
UPDATE_CUES = re.compile(
    r"\b(actually|anymore|any more|no longer|changed|update|updated|instead|turns out|correction|"
    r"from now on|can now|now can|not any ?more|no more)\b",
    re.I,
)


@dataclass
class InjectedExchange:
    index: int
    node_id: str
    thread_path: str
    timestamp: str
    vector: float  # best cosine of its messages to the query
    keyword: float  # best BM25 of its messages (0: no keyword match)
    branch: float  # best score of the topics above it
    fused: float
    status: str = ""  # "current" | "superseded" | ""
    pinned: bool = False  # a recalled past message (top_k_history) brought it in
    tokens: int = 0


@dataclass
class InjectedPath:
    node_id: str
    path: str
    summary: str
    similarity: float
    keyword: float
    exchanges: int


@dataclass
class RetrievalReport:
    query: str
    paths: list[InjectedPath] = field(default_factory=list)
    exchanges: list[InjectedExchange] = field(default_factory=list)
    supersessions: list[tuple[int, int]] = field(default_factory=list)  # (older, newer) exchange indices
    memory_tokens: int = 0
    memory_token_budget: int = 0
    full_history_tokens: int = 0
    recent_tokens: int = 0
    seconds: float = 0.0
    ranking: list[int] = field(default_factory=list)  # every candidate exchange, best first

    @property
    def saved_ratio(self) -> float:
        return self.memory_tokens / self.full_history_tokens if self.full_history_tokens else 0.0


def _rrf(order: list[int], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float64)
    for rank, i in enumerate(order):
        out[i] += 1.0 / (RRF_K + rank + 1)
    return out


def clip_text(text: str, max_chars: int) -> str:
    """Collapse whitespace and cut to ``max_chars`` (memory and baselines alike)."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip() + "…"


_ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2}


def _parse_id(message_id: str) -> tuple[int, str]:
    """"x12-user" -> (12, "user"): conversation vector ids name their exchange and role."""
    head, role = message_id[1:].split("-", 1)
    return int(head), role


def short_date(ts: str) -> str:
    """The day of an exchange: what questions about "when" need, in few tokens."""
    return ts[:10] if ts else "undated"


class PromptSynthesizer:
    """Builds the system prompt; ``synthesize_prompt(...)`` also sets ``last_report``."""

    def __init__(
        self,
        ctree: "CTree",
        vector_db: "VectorDatabase | None" = None,
        base_prompt: str = prompts.ASSISTANT_SYSTEM,
        memory_token_budget: int = 1000,
        topic_threshold: float = 0.40,
        max_message_chars: int = 480,
        weights: tuple[float, float, float] = (1.0, 1.0, 0.25),
        neighbour_weight: float = 0.5,
        supersede_similarity: float = 0.65,
        exchange_weight: float = 0.0,
        group_depth: int | None = 2,
        min_relevance: float = 0.20,
    ) -> None:
        self.tree = ctree
        self.vdb = vector_db if vector_db is not None else ctree.vdb
        self.base_prompt = base_prompt
        self.memory_token_budget = memory_token_budget
        self.topic_threshold = topic_threshold
        self.max_message_chars = max_message_chars
        self.weights = weights
        self.neighbour_weight = neighbour_weight
        self.supersede_similarity = supersede_similarity
        self.exchange_weight = exchange_weight
        self.group_depth = group_depth
        self.min_relevance = min_relevance
        self.last_report: RetrievalReport | None = None
        self._history_tokens: tuple[int, int] = (-1, 0)

    # --- scores ---------------------------------------------------------------------------

    def _full_history_tokens(self) -> int:
        n = len(self.tree.conversation)
        if self._history_tokens[0] != n:
            total = sum(count_tokens(f"{m['role']}: {m['content']}\n") for m in self.tree.conversation)
            self._history_tokens = (n, total)
        return self._history_tokens[1]

    def _topic_scores(self, query: str, qvec: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
        dense: dict[str, float] = {}
        keyword: dict[str, float] = {}
        if self.vdb is None:
            return dense, keyword
        ids, sims = self.vdb.topic_scores(qvec)
        dense = {i: float(s) for i, s in zip(ids, sims)}
        keyword = dict(self.vdb.keyword_search_topics(query, limit=50))
        return dense, keyword

    # --- the prompt -----------------------------------------------------------------------

    def synthesize_prompt(
        self,
        user_query: str,
        query_vector=None,
        active_node=None,
        recent_messages: list[dict] | None = None,
        top_k_docs: int = 3,
        top_k_history: int = 2,
        min_history_similarity: float = 0.50,
        memory_token_budget: int | None = None,
        extra_context: list[str] | None = None,
    ) -> str:
        started = time.perf_counter()
        budget = self.memory_token_budget if memory_token_budget is None else memory_token_budget
        report = RetrievalReport(query=user_query, memory_token_budget=budget)
        memory = self.memory_block(user_query, query_vector, recent_messages or [], top_k_docs, top_k_history,
                                   min_history_similarity, budget, report)
        parts = [self.base_prompt]
        if memory:
            parts.append(memory)
        if recent_messages:
            lines = [prompts.RECENT_HEADER]
            for m in recent_messages:
                lines.append(f"{m.get('role', 'user').capitalize()}: {m.get('content', '')}")
            recent = "\n".join(lines)
            report.recent_tokens = count_tokens(recent)
            parts.append(recent)
        for block in extra_context or []:
            parts.append(block)
        report.full_history_tokens = self._full_history_tokens()
        report.seconds = time.perf_counter() - started
        self.last_report = report
        return "\n\n".join(parts)

    def memory_block(self, query, query_vector, recent_messages, top_k_docs, top_k_history,
                     min_history_similarity, budget, report: RetrievalReport) -> str:
        """The memory block for ``query`` within ``budget`` tokens; fills ``report``."""
        tree = self.tree
        n = len(tree._exchanges)
        if n == 0 or budget <= 0 or not query.strip():
            return ""
        qvec = np.asarray(query_vector if query_vector is not None else tree.embed_fn.embed(query), dtype=np.float32)
        qvec = qvec / (np.linalg.norm(qvec) or 1.0)
        live = np.array([not x.archived for x in tree._exchanges])
        recent_texts = {m.get("content", "") for m in recent_messages}
        for i, x in enumerate(tree._exchanges):
            if x.user in recent_texts and x.assistant in recent_texts:
                live[i] = False  # already in the recent window

        units, dense = self._dense_units(qvec, n)  # units: (exchange, role)
        unit_pos = {u: k for k, u in enumerate(units)}
        keyword = np.zeros(len(units))
        if self.vdb is not None:
            for mid, score in self.vdb.keyword_search_messages(query, limit=200):
                k = unit_pos.get(_parse_id(mid))
                if k is not None:
                    keyword[k] = max(keyword[k], score)
        # relevant at all: close in meaning, or sharing a content word with the query
        keep = np.array([live[i] for i, _ in units], dtype=bool) & ((dense >= self.min_relevance) | (keyword > 0))
        if not keep.any():
            return ""

        # branch score: the best topic (by summary cosine, nudged by BM25) above each exchange
        t_dense, t_key = self._topic_scores(query, qvec)
        t_key_max = max(t_key.values(), default=0.0) or 1.0
        topic_score = {nid: s + 0.25 * t_key.get(nid, 0.0) / t_key_max for nid, s in t_dense.items()}
        ex_branch = np.zeros(n)
        if topic_score:
            for i, x in enumerate(tree._exchanges):
                if live[i] and x.parent is not None:
                    ex_branch[i] = max((topic_score.get(t.node_id, 0.0) for t in tree.get_ancestors(x.parent)),
                                       default=0.0)
        branch = np.array([ex_branch[i] for i, _ in units])

        m = len(units)
        cand = np.flatnonzero(keep)
        wd, wk, wb = self.weights
        fused = wd * _rrf([int(k) for k in cand[np.argsort(-dense[cand], kind="stable")]], m)
        fused += wk * _rrf([int(k) for k in cand[np.argsort(-keyword[cand], kind="stable")] if keyword[k] > 0], m)
        fused += wb * _rrf([int(k) for k in cand[np.argsort(-branch[cand], kind="stable")] if branch[k] > 0], m)
        if self.exchange_weight:
            # the whole exchange's meaning: a short reply ("Wow, what did you get?") is
            # found through the message it answers
            ex_dense = np.array([float(tree.exchange_vector(i) @ qvec) for i, _ in units])
            fused += self.exchange_weight * _rrf([int(k) for k in cand[np.argsort(-ex_dense[cand], kind="stable")]], m)
        if self.neighbour_weight:
            # conversation neighbours share context: a message next to a hit gains a little
            order_pos = sorted(range(m), key=lambda k: (units[k][0], _ROLE_ORDER.get(units[k][1], 3)))
            f = fused[order_pos]
            near = np.maximum(np.concatenate([[0.0], f[:-1]]), np.concatenate([f[1:], [0.0]]))
            fused[order_pos] = f + self.neighbour_weight * near
        fused[~keep] = -1.0
        ranking = [int(k) for k in np.argsort(-fused, kind="stable") if keep[k]]
        report.ranking = [units[k] for k in ranking]

        # recalled past messages (TRACE's top_k_history) are pinned first
        pinned = [int(k) for k in np.argsort(-dense) if keep[k] and dense[k] >= min_history_similarity]
        pinned = pinned[:top_k_history]
        queue = pinned + [k for k in ranking if k not in set(pinned)]

        newer, status = self._supersessions(live)
        chosen = self._select([units[k] for k in queue], budget, newer, status)
        if not chosen:
            return ""
        chosen_ex = {i for i, _ in chosen}
        report.supersessions = [(i, j) for i in sorted(chosen_ex) for j in newer.get(i, []) if j in chosen_ex]
        text, shown, paths = self._render(chosen, status, budget, top_k_docs, topic_score, t_key)
        report.memory_tokens = count_tokens(text)
        report.paths = paths
        best: dict[int, int] = {}
        for k in range(m):
            i = units[k][0]
            if (i, units[k][1]) in shown and (i not in best or fused[k] > fused[best[i]]):
                best[i] = k
        for i in sorted(best, key=lambda i: -fused[best[i]]):
            x = tree._exchanges[i]
            ks = [k for k in range(m) if units[k][0] == i]
            report.exchanges.append(InjectedExchange(
                i, x.node_id, tree.thread_path(x) if x.parent is not None else "", x.timestamp,
                float(max(dense[k] for k in ks)), float(max(keyword[k] for k in ks)), float(ex_branch[i]),
                float(fused[best[i]]), status.get(i, ""), any(k in pinned for k in ks),
                sum(shown[u] for u in shown if u[0] == i)))
        return text

    def _dense_units(self, qvec: np.ndarray, n: int) -> tuple[list[tuple[int, str]], np.ndarray]:
        if self.vdb is not None:
            ids, sims = self.vdb.conversation_scores(qvec)
            return [_parse_id(i) for i in ids], np.asarray(sims, dtype=np.float64)
        units, sims = [], []  # no store: each message scored by its exchange's vector
        for i, x in enumerate(self.tree._exchanges):
            s = float(self.tree.exchange_vector(i) @ qvec)
            for msg in x.messages:
                units.append((i, msg["role"]))
                sims.append(s)
        return units, np.array(sims)

    # --- selection, supersession, rendering ----------------------------------------------------

    def _text(self, i: int, role: str) -> str:
        x = self.tree._exchanges[i]
        content = x.role_text(role)
        if content in ("(no message)", "(no reply)"):
            return ""
        return f"{role.capitalize()}: {clip_text(content, self.max_message_chars)}"

    def _line(self, i: int, roles: list[str], status: str = "") -> str:
        x = self.tree._exchanges[i]
        parts = [t for t in (self._text(i, r) for r in sorted(roles, key=lambda r: _ROLE_ORDER.get(r, 3))) if t]
        tag = f" [{status}]" if status else ""
        return f"- [{short_date(x.timestamp)}]{tag} " + " | ".join(parts)

    def _branch(self, i: int):
        """The topic an exchange is shown under: its own, or its ancestor at
        ``group_depth`` (fewer, larger groups: fewer header tokens)."""
        topic = self.tree._exchanges[i].parent
        if topic is None or not self.group_depth:
            return topic
        chain = self.tree.get_ancestors(topic, exclude_root=True)
        return chain[min(self.group_depth, len(chain)) - 1] if chain else topic

    def _header(self, topic, summary: str = "") -> str:
        """A branch header. A matched topic (shown with its summary) gets its ancestry
        path, TRACE's multi-path view; other branches just their name, so tokens go to
        content."""
        if topic is None:
            return "## Archived"
        if not summary:
            return f"## {topic.topic_name}"
        path = " → ".join(t.topic_name for t in self.tree.get_ancestors(topic, exclude_root=True))
        return f"## {path} — {clip_text(summary, 100)}"

    def _select(self, queue: list[tuple[int, str]], budget: int, newer: dict[int, list[int]],
                status: dict[int, str]) -> list[tuple[int, str]]:
        """Greedy by rank: take messages while their line (and a new branch header) fit.
        An exchange that was updated later brings its update right after it."""
        used = count_tokens(prompts.MEMORY_HEADER) + 1
        branches: set[str] = set()
        chosen: list[tuple[int, str]] = []
        taken: set[tuple[int, str]] = set()
        noted = False  # the [current]/[superseded] note is paid for once
        queue = list(queue)
        pos = 0
        while pos < len(queue):
            i, role = queue[pos]
            pos += 1
            if (i, role) in taken or not self._text(i, role):
                continue
            cost = count_tokens(self._line(i, [role], status.get(i, ""))) + 1
            if status.get(i) and not noted:
                cost += count_tokens(" " + prompts.SUPERSEDED_NOTE)
            topic = self._branch(i)
            bid = topic.node_id if topic is not None else "archived"
            if bid not in branches:
                cost += count_tokens(self._header(topic)) + 1
            if used + cost > budget:
                continue  # a shorter message further down may still fit
            chosen.append((i, role))
            taken.add((i, role))
            noted = noted or bool(status.get(i))
            used += cost
            branches.add(bid)
            follow = [(j, m["role"]) for j in newer.get(i, []) for m in self.tree._exchanges[j].messages]
            queue[pos:pos] = [u for u in follow if u not in taken]
        return chosen

    def _supersessions(self, live: np.ndarray) -> tuple[dict[int, list[int]], dict[int, str]]:
        """Which exchanges were updated by a later one: a later exchange that reads as an
        update (an update cue such as "actually" or "no longer") and is similar
        (cosine ≥ supersede_similarity). Cached per conversation length."""
        key = (len(self.tree._exchanges), int(live.sum()))
        if getattr(self, "_sup_key", None) == key:
            return self._sup
        tree = self.tree
        newer: dict[int, list[int]] = {}
        cues = self._update_cues()
        updates = [int(j) for j in np.flatnonzero(cues) if live[j]]
        if updates:
            older = [i for i in range(len(tree._exchanges)) if live[i]]
            mat = np.array([tree.exchange_vector(i) for i in older])
            for j in updates:
                sims = mat @ tree.exchange_vector(j)
                for i, sim in zip(older, sims):
                    if i < j and sim >= self.supersede_similarity:
                        newer.setdefault(i, []).append(j)
        status: dict[int, str] = {}
        for i, js in newer.items():
            status[i] = "superseded"
        for js in newer.values():
            for j in js:
                status.setdefault(j, "current")  # an update that was itself updated stays superseded
        self._sup_key, self._sup = key, (newer, status)
        return newer, status

    def _update_cues(self) -> np.ndarray:
        """Which exchanges read as updates (cached; exchanges never change text)."""
        xs = self.tree._exchanges
        cache = getattr(self, "_cues", [])
        for x in xs[len(cache):]:
            cache.append(bool(UPDATE_CUES.search(f"{x.user} {x.assistant}")))
        self._cues = cache
        return np.array(cache[: len(xs)], dtype=bool)

    def _render(self, chosen, status, budget, top_k_docs, topic_score, t_key):
        """Group chosen messages by branch (best branch first), chronological inside;
        summaries of matched topics are added last, only where tokens remain."""
        tree = self.tree
        groups: dict[str, dict[int, list[str]]] = {}
        best: dict[str, int] = {}
        topics: dict[str, object] = {}
        for rank, (i, role) in enumerate(chosen):
            topic = self._branch(i)
            bid = topic.node_id if topic is not None else "archived"
            groups.setdefault(bid, {}).setdefault(i, []).append(role)
            best.setdefault(bid, rank)
            topics[bid] = topic
        order = sorted(groups, key=lambda b: best[b])
        used = count_tokens(prompts.MEMORY_HEADER) + 1
        if any(status.get(i) for i, _ in chosen):
            used += count_tokens(" " + prompts.SUPERSEDED_NOTE)
        blocks: dict[str, list[str]] = {}
        shown: dict[tuple[int, str], int] = {}
        for bid in order:
            head = self._header(topics[bid])
            block, block_used = [head], count_tokens(head) + 1
            for i in sorted(groups[bid]):
                roles = groups[bid][i]
                line = self._line(i, roles, status.get(i, ""))
                c = count_tokens(line) + 1
                if used + block_used + c > budget:
                    continue
                block.append(line)
                block_used += c
                for r in roles:
                    shown[(i, r)] = c // len(roles)
            if len(block) > 1:
                blocks[bid] = block
                used += block_used
        summaries: dict[str, str] = {}
        for gi, bid in enumerate(b for b in order if b in blocks):
            topic = topics[bid]
            # TRACE's topic hits: a branch whose summary matched the query shows it
            if (gi >= top_k_docs or topic is None or not tree.is_frozen(topic) or not topic.summary
                    or topic_score.get(topic.node_id, 0.0) < self.topic_threshold):
                continue
            head = self._header(topic, topic.summary)
            extra = count_tokens(head) - count_tokens(blocks[bid][0])
            if used + extra <= budget:
                blocks[bid][0] = head
                summaries[bid] = topic.summary
                used += extra
        if not blocks:
            return "", {}, []
        lines = [prompts.MEMORY_HEADER]
        if any(status.get(i) for i, _ in chosen):
            lines[0] += " " + prompts.SUPERSEDED_NOTE
        paths: list[InjectedPath] = []
        for bid in order:
            if bid not in blocks:
                continue
            lines += blocks[bid]
            topic = topics[bid]
            paths.append(InjectedPath(bid, tree.thread_path(topic) if topic is not None else "",
                                      summaries.get(bid, ""), topic_score.get(bid, 0.0), t_key.get(bid, 0.0),
                                      len(blocks[bid]) - 1))
        return "\n".join(lines), shown, paths

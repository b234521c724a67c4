"""PromptSynthesizer: the system prompt of each reply, with a compact memory block.

TRACE's flow — cosine over topic summaries, walk each hit's ancestry, dedupe shared
ancestors, rank, a multi-path block, recalled past messages, the recent window — plus:

- hybrid ranking: dense cosine over every past message and BM25 (FTS5) over message
  text, fused by score (z-scores) with the score of the exchange's branch (topic
  summaries by cosine and BM25), then smoothed to conversation neighbours;
- the best candidates are also scored by their parts (``CTree.index_pending``): each
  sentence of a longer message, and the message read after the one it answers;
- the query is read twice, as asked and without the words found in most exchanges
  (a transcript's speaker names, "the"), and a date it names lifts that day's exchanges;
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
from .dates import dates_in
from .store import parse_message_id
from .textutil import PLACEHOLDERS, SPEAKER_LABEL
from .tokens import count_tokens

if TYPE_CHECKING:
    from .store import VectorDatabase
    from .tree import CTree

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
    embed_seconds: float = 0.0  # of that, embedding the focused query (see _focused_query_vector)
    ranking: list[int] = field(default_factory=list)  # every candidate exchange, best first

    @property
    def saved_ratio(self) -> float:
        return self.memory_tokens / self.full_history_tokens if self.full_history_tokens else 0.0


def _z(x: np.ndarray) -> np.ndarray:
    """Standard scores (a constant array gives zeros)."""
    sd = float(x.std())
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def clip_text(text: str, max_chars: int) -> str:
    """Collapse whitespace and cut to ``max_chars`` (memory and baselines alike)."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip() + "…"


_ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2}


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
        weights: tuple[float, float, float] = (1.0, 4.0, 0.3),
        neighbour_weight: float = 0.5,
        supersede_similarity: float = 0.65,
        group_depth: int | None = 2,
        min_relevance: float = 0.20,
        candidates: int = 200,
        topic_candidates: int = 500,
        common_word_share: float = 0.05,
        date_weight: float = 1.0,  # in standard deviations of the cosine
        focus_query: bool = True,
        use_parts: bool = True,
        part_candidates: int = 400,
        neighbour_seeds: int = 150,
        keyword_candidates: int = 100,
        parallel_from: int = 20_000,
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
        self.group_depth = group_depth
        self.min_relevance = min_relevance
        self.candidates = candidates
        self.topic_candidates = topic_candidates
        self.common_word_share = common_word_share
        self.date_weight = date_weight
        self.focus_query = focus_query
        self.use_parts = use_parts
        self.part_candidates = part_candidates
        self.neighbour_seeds = neighbour_seeds
        self.keyword_candidates = keyword_candidates
        self.parallel_from = parallel_from  # stored messages from which BM25 runs in a thread
        self.last_report: RetrievalReport | None = None
        self._history_tokens: tuple[int, int] = (-1, 0)

    # --- scores ---------------------------------------------------------------------------

    def _full_history_tokens(self) -> int:
        n = len(self.tree.conversation)
        if self._history_tokens[0] != n:
            total = sum(count_tokens(f"{m['role']}: {m['content']}\n") for m in self.tree.conversation)
            self._history_tokens = (n, total)
        return self._history_tokens[1]

    def _topic_dense(self, index, qvec: np.ndarray) -> dict[str, float]:
        if index is None:
            return {}
        sims = index.similarities(qvec)
        ids = index.ids
        if len(sims) > self.topic_candidates:  # the rest score 0: far below the best
            top = np.argpartition(sims, len(sims) - self.topic_candidates)[len(sims) - self.topic_candidates:]
            return {ids[k]: float(sims[k]) for k in top}
        return {ids[k]: float(s) for k, s in enumerate(sims)}

    def _keyword_searches(self, query: str) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """BM25 over messages and over topic summaries (run beside the vector products:
        SQLite and numpy both release the GIL, and there are two cores to use)."""
        words = self._keyword_query(query)
        return (self.vdb.keyword_search_messages(words, limit=self.keyword_candidates),
                dict(self.vdb.keyword_search_topics(words, limit=50)))

    def _background(self):
        if getattr(self, "_pool", None) is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-bm25")
        return self._pool

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
        """The memory block for ``query`` within ``budget`` tokens; fills ``report``.

        Scoring runs on candidates only: the best messages by cosine and by BM25 (a
        candidate's conversation neighbours lend it score when they are candidates
        too). That keeps a query at 100,000 stored exchanges
        in milliseconds (``bench/scale.py``).
        """
        tree = self.tree
        n = len(tree._exchanges)
        if n == 0 or budget <= 0 or not query.strip():
            return ""
        qvec = np.asarray(query_vector if query_vector is not None else tree.embed_fn.embed(query), dtype=np.float32)
        qvec = qvec / (np.linalg.norm(qvec) or 1.0)
        recent_texts = {m.get("content", "") for m in recent_messages}

        def live(i: int) -> bool:
            x = tree._exchanges[i]
            if x.archived:
                return False
            return not (recent_texts and x.user in recent_texts and x.assistant in recent_texts)

        t_embed = time.perf_counter()
        qvec2 = self._focused_query_vector(query)
        report.embed_seconds = time.perf_counter() - t_embed
        # the indexes are taken before the keyword job holds the store's lock
        conv_index = self.vdb.conversation_index() if self.vdb is not None else None
        topic_index = self.vdb.topic_index() if self.vdb is not None else None
        # in a thread beside the vector products only where those take milliseconds: a
        # handoff can wait for the GIL's switch interval (5 ms), more than small sessions gain
        parallel = conv_index is not None and len(conv_index) >= self.parallel_from
        job = self._background().submit(self._keyword_searches, query) if parallel else None
        try:
            # both readings count, with the names (who said it) and without (what was said):
            # the mean of two cosines is the product with the mean vector, one pass
            ex_of, role_of, all_dense = self._dense_all(qvec if qvec2 is None else 0.5 * (qvec + qvec2), conv_index)
            t_dense = self._topic_dense(topic_index, qvec)
        finally:
            if job is not None:
                msg_hits, t_key = job.result()
        if job is None:
            msg_hits, t_key = self._keyword_searches(query) if self.vdb is not None else ([], {})
        m = len(ex_of)
        if m == 0:
            return ""
        top = min(self.candidates, m)
        cand_idx = np.argpartition(all_dense, m - top)[m - top:] if top < m else np.arange(m)
        keyword_hits: dict[int, float] = {}
        if self.vdb is not None:
            pos = self._unit_positions()
            for mid, score in msg_hits:
                k = pos.get(mid)
                if k is not None:
                    keyword_hits[k] = max(keyword_hits.get(k, 0.0), score)
        # relevant at all: close in meaning, or sharing a content word with the query
        seeds = {int(k) for k in cand_idx if all_dense[k] >= self.min_relevance} | set(keyword_hits)
        seeds = {k for k in seeds if live(int(ex_of[k]))}
        if not seeds:
            return ""
        units = {k: (int(ex_of[k]), role_of[k]) for k in seeds}
        if self.neighbour_weight:
            # relevant conversation neighbours of the candidates join them (a question's
            # answer is often the next message, below the candidate cut)
            by_unit = self._unit_lookup()
            # around the strongest seeds only (keyword hits, then by cosine): neighbours
            # of weak candidates rarely reach the block, and each costs time at scale
            strongest = sorted(seeds, key=lambda k: (k not in keyword_hits, -all_dense[k]))
            for k in strongest[: self.neighbour_seeds]:
                i = int(ex_of[k])
                for j in (i - 1, i, i + 1):
                    if 0 <= j < n and live(j):
                        for msg in tree._exchanges[j].messages:
                            kk = by_unit.get((j, msg["role"]))
                            if kk is not None and kk not in units and (
                                    all_dense[kk] >= self.min_relevance or kk in keyword_hits):
                                units[kk] = (j, msg["role"])
        keys = list(units)
        cand = [units[k] for k in keys]
        dense = self._with_parts(keys, all_dense[keys].astype(np.float64), qvec, qvec2)
        keyword = np.array([keyword_hits.get(k, 0.0) for k in keys])

        # branch score: the best topic (by summary cosine, nudged by BM25) above each exchange
        t_key_max = max(t_key.values(), default=0.0) or 1.0
        topic_score = {nid: s + 0.25 * t_key.get(nid, 0.0) / t_key_max for nid, s in t_dense.items()}
        ex_branch: dict[int, float] = {}
        by_parent: dict[str, float] = {}  # candidates share topics: walk each ancestry once
        for i, _ in cand:
            if i not in ex_branch:
                parent = tree._exchanges[i].parent
                if not topic_score or parent is None:
                    ex_branch[i] = 0.0
                    continue
                if parent.node_id not in by_parent:
                    by_parent[parent.node_id] = max(
                        (topic_score.get(t.node_id, 0.0) for t in tree.get_ancestors(parent)), default=0.0)
                ex_branch[i] = by_parent[parent.node_id]
        branch = np.array([ex_branch[i] for i, _ in cand])

        c = len(cand)
        wd, wk, wb = self.weights
        # score fusion: cosines and branch scores as z-scores among the candidates, BM25
        # relative to the best match (0 without a shared word); unlike ranks, scores keep
        # how far ahead a clear winner is
        fused = wd * _z(dense) + wk * keyword / (keyword.max() or 1.0) + wb * _z(branch)
        if self.date_weight:
            # the question names a date: what was said that day
            specs = dates_in(query)
            if specs:
                fused += self.date_weight * np.array(
                    [any(sp.matches(tree._exchanges[i].timestamp) for sp in specs) for i, _ in cand], dtype=float)
        fused -= fused.min()  # non-negative: neighbours below lend score, never take it
        if self.neighbour_weight:
            # conversation neighbours share context: a message next to a hit gains a little
            order_pos = sorted(range(c), key=lambda k: (cand[k][0], _ROLE_ORDER.get(cand[k][1], 3)))
            f = fused[order_pos]
            adjacent = [(cand[order_pos[q]][0], cand[order_pos[q + 1]][0]) for q in range(c - 1)]
            left = np.concatenate([[0.0], [f[q] if abs(a - b) <= 1 else 0.0 for q, (a, b) in enumerate(adjacent)]])
            right = np.concatenate([[f[q + 1] if abs(a - b) <= 1 else 0.0 for q, (a, b) in enumerate(adjacent)],
                                    [0.0]])
            fused[order_pos] = f + self.neighbour_weight * np.maximum(left, right)
        ranking = [int(k) for k in np.argsort(-fused, kind="stable")]
        report.ranking = [cand[k] for k in ranking]

        # recalled past messages (TRACE's top_k_history) are pinned first
        pinned = [int(k) for k in np.argsort(-dense, kind="stable") if dense[k] >= min_history_similarity]
        pinned = pinned[:top_k_history]
        pinned_set = set(pinned)
        queue = pinned + [k for k in ranking if k not in pinned_set]

        newer, status = self._supersessions([i for i, _ in cand])
        chosen = self._select([cand[k] for k in queue], budget, newer, status)
        if not chosen:
            return ""
        chosen_ex = {i for i, _ in chosen}
        report.supersessions = [(i, j) for i in sorted(chosen_ex) for j in newer.get(i, []) if j in chosen_ex]
        text, shown, paths = self._render(chosen, status, budget, top_k_docs, topic_score, t_key)
        report.memory_tokens = count_tokens(text)
        report.paths = paths
        best: dict[int, int] = {}
        for k in range(c):
            i = cand[k][0]
            if cand[k] in shown and (i not in best or fused[k] > fused[best[i]]):
                best[i] = k
        positions: dict[int, list[int]] = {}
        for k in range(c):
            positions.setdefault(cand[k][0], []).append(k)
        for i in sorted(best, key=lambda i: -fused[best[i]]):
            x = tree._exchanges[i]
            ks = positions[i]
            report.exchanges.append(InjectedExchange(
                i, x.node_id, tree.thread_path(x) if x.parent is not None else "", x.timestamp,
                float(max(max(dense[k] for k in ks), 0.0)), float(max(keyword[k] for k in ks)),
                float(ex_branch.get(i, 0.0)), float(fused[best[i]]), status.get(i, ""),
                any(k in pinned_set for k in ks), sum(shown[u] for u in shown if u[0] == i)))
        return text

    def _focused_query_vector(self, query: str) -> np.ndarray | None:
        """The query embedded again without the words found in most exchanges (in a
        transcript, the speakers' names, and the commonest words such as "the"): the
        names alone make every message by the person asked about look relevant.
        ``None`` when no such word is in the query."""
        df = self.tree.judges.embedding.doc_freq
        if not self.focus_query or df.docs < 20:
            return None
        words = query.split()
        kept = [w for w in words if not df.is_common(w.strip(".,!?;:\"()'").lower().removesuffix("'s"))]
        if len(kept) == len(words) or not kept:
            return None
        try:
            v = np.asarray(self.tree.embed_fn.embed(" ".join(kept)), dtype=np.float32)
        except Exception:  # an optional second reading: a failing embedder costs only it
            return None
        return v / (np.linalg.norm(v) or 1.0)

    def _with_parts(self, keys: list[int], dense: np.ndarray, qvec: np.ndarray, qvec2) -> np.ndarray:
        """The best ``part_candidates`` candidates scored by their best part too (their
        sentences, and each read after its cue: ``CTree.index_pending``). Part vectors
        are read from the store for those candidates only, so memory stays flat."""
        if self.vdb is None or not self.use_parts or not keys:
            return dense
        top = np.argsort(-dense, kind="stable")[: self.part_candidates]
        index = self.vdb.conversation_index()
        row_of = {index.ids[keys[p]]: r for r, p in enumerate(top)}  # message id -> row of ``best``
        owners, mat = self.vdb.message_part_vectors(list(row_of))
        if not owners:
            return dense
        qs = np.array([qvec] if qvec2 is None else [qvec, qvec2], dtype=np.float32)
        # each query's score of a message: its best vector, the message's own or a part's
        best = index.rows([keys[p] for p in top]) @ qs.T
        np.maximum.at(best, np.array([row_of[o] for o in owners]), mat @ qs.T)
        out = dense.copy()
        out[top] = best.mean(axis=1)
        return out

    def _keyword_query(self, query: str) -> str:
        """The query's rarer words for BM25. A word found in more than ``common_word_share``
        of all exchanges adds little to BM25 yet makes SQLite score every message holding
        it (60 ms a query at 100,000 exchanges); the rarest words are kept, at most 8."""
        from .store import _FTS_WORD, FUNCTION_WORDS

        df = self.tree.judges.embedding.doc_freq
        words = list(dict.fromkeys(w.lower() for w in _FTS_WORD.findall(query)
                                   if len(w) > 1 and w.lower() not in FUNCTION_WORDS))
        if df.docs < 200 or not words:
            return " ".join(words)
        limit = max(self.common_word_share * df.docs, 50)
        ranked = sorted(words, key=lambda w: df.counts.get(w, 0))
        kept = [w for w in ranked if df.counts.get(w, 0) <= limit] or ranked[:2]
        return " ".join(kept[:8])

    def _dense_all(self, qvec: np.ndarray, index=None) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Every live message: its exchange, its role, its cosine to the query."""
        if index is not None:
            key = (id(index), index.version)
            if getattr(self, "_units_key", None) != key:
                parsed = [parse_message_id(i) for i in index.ids]
                self._units_cache = (np.array([p[0] for p in parsed], dtype=np.int64), [p[1] for p in parsed])
                self._positions = {mid: k for k, mid in enumerate(index.ids)}
                self._by_unit = {p: k for k, p in enumerate(parsed)}
                self._units_key = key
            ex_of, role_of = self._units_cache
            return ex_of, role_of, index.similarities(qvec)  # float32: only candidates are widened
        # no store: each message scored by its exchange's vector
        ex, roles, sims = [], [], []
        for i, x in enumerate(self.tree._exchanges):
            if x.archived:
                continue
            s = float(self.tree.exchange_vector(i) @ qvec)
            for msg in x.messages:
                ex.append(i)
                roles.append(msg["role"])
                sims.append(s)
        self._by_unit = {(i, r): k for k, (i, r) in enumerate(zip(ex, roles))}
        self._positions = {}
        return np.array(ex, dtype=np.int64), roles, np.array(sims)

    def _unit_positions(self) -> dict[str, int]:
        return getattr(self, "_positions", {})

    def _unit_lookup(self) -> dict[tuple[int, str], int]:
        return getattr(self, "_by_unit", {})

    # --- selection, supersession, rendering ----------------------------------------------------

    def _text(self, i: int, role: str) -> str:
        x = self.tree._exchanges[i]
        content = x.role_text(role)
        if content in PLACEHOLDERS:
            return ""
        content = clip_text(content, self.max_message_chars)
        if SPEAKER_LABEL.match(content):
            return content  # a transcript line names its speaker: the role adds nothing
        return f"{role.capitalize()}: {content}"

    def _line(self, i: int, roles: list[str], status: str = "") -> str:
        """One entry. Its date is on the line above it, shared by the branch's entries
        of the same day."""
        parts = [t for t in (self._text(i, r) for r in sorted(roles, key=lambda r: _ROLE_ORDER.get(r, 3))) if t]
        tag = f"[{status}] " if status else ""
        return f"- {tag}" + " | ".join(parts)

    def _date_line(self, i: int) -> str:
        return f"[{short_date(self.tree._exchanges[i].timestamp)}]"

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
        days: set[tuple[str, str]] = set()  # (branch, date) lines already paid for
        chosen: list[tuple[int, str]] = []
        taken: set[tuple[int, str]] = set()
        noted = False  # the [current]/[superseded] note is paid for once
        queue = list(queue)
        pos = 0
        misses = 0
        while pos < len(queue) and budget - used >= 12 and misses < 40:
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
            day = (bid, short_date(self.tree._exchanges[i].timestamp))
            if day not in days:
                cost += count_tokens(self._date_line(i)) + 1
            if used + cost > budget:
                misses += 1
                continue  # a shorter message further down may still fit
            chosen.append((i, role))
            taken.add((i, role))
            noted = noted or bool(status.get(i))
            used += cost
            branches.add(bid)
            days.add(day)
            follow = [(j, m["role"]) for j in newer.get(i, []) for m in self.tree._exchanges[j].messages]
            queue[pos:pos] = [u for u in follow if u not in taken]
        return chosen

    def _supersessions(self, exchanges: list[int]) -> tuple[dict[int, list[int]], dict[int, str]]:
        """Which of ``exchanges`` were updated by a later exchange: one that reads as an
        update (a cue such as "actually" or "no longer"), is live, and is similar
        (cosine ≥ supersede_similarity). Updates are few; their vectors are cached."""
        tree = self.tree
        cues = self._update_cues()
        upd = [int(j) for j in np.flatnonzero(cues) if not tree._exchanges[j].archived]
        newer: dict[int, list[int]] = {}
        if upd and exchanges:
            key = (len(upd), upd[-1])
            if getattr(self, "_upd_key", None) != key:
                self._upd_mat = np.array([tree.exchange_vector(j) for j in upd])
                self._upd_key = key
            mat = self._upd_mat
            olds = sorted(set(exchanges))
            sims = np.array([tree.exchange_vector(i) for i in olds]) @ mat.T
            for a, i in enumerate(olds):
                for b, j in enumerate(upd):
                    if j > i and sims[a, b] >= self.supersede_similarity and not tree._exchanges[i].archived:
                        newer.setdefault(i, []).append(int(j))
        status: dict[int, str] = {}
        for i in newer:
            status[i] = "superseded"
        for js in newer.values():
            for j in js:
                status.setdefault(j, "current")  # an update that was itself updated stays superseded
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
            last_day = None
            for i in sorted(groups[bid]):
                roles = groups[bid][i]
                line = self._line(i, roles, status.get(i, ""))
                c = count_tokens(line) + 1
                day = self._date_line(i)
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

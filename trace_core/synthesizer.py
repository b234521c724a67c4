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

The work runs in stages (``trace_core.synthesis``): candidates → scoring/fusion →
budgeted selection → rendering. This class holds their parameters, their caches and
the BM25 thread, and runs them in order.
"""

from __future__ import annotations

import asyncio
import functools
import numbers
import re
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from . import prompts
from .synthesis.candidates import CandidateFinder, focused_query_vector, unit_query
from .synthesis.fusion import fuse, queue_order, z_scores
from .synthesis.params import SynthesisParams
from .synthesis.rendering import BlockLayout, clip_text, render, short_date
from .synthesis.report import InjectedExchange, InjectedPath, RetrievalReport
from .synthesis.selection import UPDATE_CUES, Supersessions, pair_status, select
from .textutil import DocumentFrequency, without_marks
from .tokens import count_tokens

if TYPE_CHECKING:
    from .nodes import MessageNode, TopicNode
    from .store import VectorDatabase
    from .synthesis.candidates import Candidates
    from .tree import CTree

__all__ = ["InjectedExchange", "InjectedPath", "PromptSynthesizer", "RetrievalReport", "SynthesisParams",
           "UPDATE_CUES", "clip_text", "short_date", "z_scores"]


# a given query vector, or None: the query is embedded
QueryVector: TypeAlias = "np.ndarray | Sequence[float] | None"


def plain_message(m: Mapping) -> dict:
    """A chat message with text content: parts joined (their text), None read as ""."""
    content = m.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return {**m, "role": str(m.get("role") or "user"), "content": content if isinstance(content, str) else ""}


# a question about what the memory holds as a whole ("What do you know about me?", "What
# have we talked about?"): English wording, as the web router's
_ABOUT_THE_MEMORY = re.compile(
    r"\b(?:you (?:know|remember)|(?:i|we)(?:'ve| have)? (?:told you|talked|discussed|spoken|chatted)"
    r"|(?:have|got) on me)\b", re.I)


def asks_about_the_memory(query: str) -> bool:
    return bool(_ABOUT_THE_MEMORY.search(query))


class PromptSynthesizer:
    """Builds the system prompt; ``synthesize_prompt(...)`` also sets ``last_report``.

    Keyword arguments after ``base_prompt`` are the fields of ``SynthesisParams`` (or
    pass ``params=``). ``word_stats`` is the conversation's word statistics (which words
    most exchanges use); by default the tree's. Close it (``close()``, or use it as a
    context manager) to stop its BM25 thread; closing the tree closes it too.
    """

    def __init__(
        self,
        ctree: "CTree",
        vector_db: "VectorDatabase | None" = None,
        base_prompt: str = prompts.ASSISTANT_SYSTEM,
        *,
        params: SynthesisParams | None = None,
        word_stats: DocumentFrequency | None = None,
        **settings: Any,
    ) -> None:
        # said in words: "'str' object has no attribute 'vdb'", "'dict' object has no
        # attribute 'fixed'", a base prompt of None failed at the first synthesis
        if not hasattr(ctree, "exchange_view"):
            raise TypeError(f"ctree must be a CTree, not {type(ctree).__name__}")
        if params is not None and not isinstance(params, SynthesisParams):
            raise TypeError(f"params must be a SynthesisParams, not {type(params).__name__}")
        if not isinstance(base_prompt, str):
            raise TypeError(f"base_prompt must be text, not {type(base_prompt).__name__}")
        self.tree = ctree
        self.vdb = vector_db if vector_db is not None else ctree.vdb
        self.base_prompt = base_prompt
        # settings named here are kept at every budget (SynthesisParams.fixed)
        self.params = (params or SynthesisParams()).fixed(**settings)
        self.word_stats = word_stats if word_stats is not None else ctree.word_stats
        self.last_report: RetrievalReport | None = None
        self._history_tokens: tuple[tuple[int, int], int] = ((-1, -1), 0)  # ((messages, text revision), tokens)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-bm25")
        self._closed = False
        self._finder = CandidateFinder(self.vdb, self.word_stats, self.params, self._pool)
        self._supersessions = Supersessions(self.params.supersede_similarity, self.params.supersede_shared_similarity)
        ctree.on_close(self.close)

    @property
    def memory_token_budget(self) -> int:
        return self.params.memory_token_budget

    # --- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the BM25 thread. A closed synthesizer still works, BM25 inline."""
        if not self._closed:
            self._closed = True
            self._finder.executor = None
            self._pool.shutdown(wait=True)

    def __enter__(self) -> "PromptSynthesizer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the prompt -----------------------------------------------------------------------

    def _text_revision(self) -> int:
        """Bumped by the tree when stored text changes (a replace, a forget): caches by
        exchange read again."""
        return getattr(getattr(self.tree, "structure", None), "text_revision", 0)

    def full_history_tokens(self) -> int:
        """Tokens of the whole conversation as plain lines (what the block saves against)."""
        conversation = self.tree.conversation
        key = (len(conversation), self._text_revision())  # replace, forget
        if self._history_tokens[0] != key:
            total = sum(count_tokens(f"{m['role']}: {m['content']}\n") for m in conversation)
            self._history_tokens = (key, total)
        return self._history_tokens[1]

    _full_history_tokens = full_history_tokens  # the old name, while callers move to the public one

    def synthesize_prompt(
        self,
        user_query: str,
        query_vector: QueryVector = None,
        active_node: TopicNode | None = None,
        recent_messages: Sequence[Mapping[str, Any]] | None = None,
        top_k_docs: int = 3,
        top_k_history: int = 2,
        min_history_similarity: float = 0.50,
        memory_token_budget: int | None = None,
        extra_context: list[str] | None = None,
        *,
        exclude: Collection[int] = (),
    ) -> str:
        """The system prompt for ``user_query``: the base prompt, the memory block, the
        recent messages, ``extra_context``. ``exclude``: exchange indices never injected
        (a regenerated reply is asked as if the exchange it replaces had not happened).
        ``active_node`` is not used (ChatIndex's signature): every branch is ranked by the
        query alone, the current one too."""
        started = time.perf_counter()
        # what an OpenAI client hands over: a tool call's content None, content as parts
        # (TypeErrors, a trial), a single context string (injected a character a paragraph)
        user_query = user_query if isinstance(user_query, str) else ""
        # a text or one message for the list was read a character (a key) at a time, and
        # dropped without a word; an exclude of 5 said "'int' object is not iterable"
        if isinstance(recent_messages, (str, bytes, Mapping)):
            raise TypeError(f"recent_messages is a list of messages, not a {type(recent_messages).__name__}")
        if isinstance(exclude, Iterator):  # (x.index for x in …) was taken before this check: read once, here
            exclude = list(exclude)
        if not isinstance(exclude, Collection) or isinstance(exclude, (str, bytes)) or \
                not all(isinstance(i, numbers.Integral) for i in exclude):  # numpy's ints too
            raise TypeError(f"exclude is a collection of exchange indices, not {exclude!r:.60}")
        # a tool call's None content, or an empty message, is no line of the recent window
        # ("User: " lines, a developer's trial)
        recent_messages = [pm for m in recent_messages or [] if isinstance(m, Mapping)
                           for pm in [plain_message(m)] if pm["content"].strip()]
        if isinstance(extra_context, str):
            extra_context = [extra_context]
        budget = self.params.memory_token_budget if memory_token_budget is None else memory_token_budget
        for name, value in (("memory_token_budget", budget), ("top_k_docs", top_k_docs),
                            ("top_k_history", top_k_history)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:  # -5 was taken silently
                raise ValueError(f"{name} must be a whole number ≥ 0, not {value!r}")
        report = RetrievalReport(query=user_query, memory_token_budget=budget)
        memory = self.memory_block(user_query, query_vector, recent_messages or [], top_k_docs, top_k_history,
                                   min_history_similarity, budget, report, exclude=exclude)
        parts = [self.base_prompt]
        if memory:
            parts.append(memory)
        if recent_messages:
            lines = [prompts.RECENT_HEADER]
            for m in recent_messages:
                lines.append(f"{m.get('role', 'user').capitalize()}: {without_marks(m.get('content', ''))}")
            recent = "\n".join(lines)
            report.recent_tokens = count_tokens(recent)
            parts.append(recent)
        for block in extra_context or []:
            parts.append(block)
        report.full_history_tokens = self.full_history_tokens()
        report.seconds = time.perf_counter() - started
        self.last_report = report
        return "\n\n".join(parts)

    async def asynthesize_prompt(self, user_query: str, *args: Any, **kwargs: Any) -> str:
        """``synthesize_prompt`` for async apps: runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(self.synthesize_prompt, user_query, *args, **kwargs)

    def memory_block(self, query: str, query_vector: QueryVector, recent_messages: Sequence[Mapping[str, Any]],
                     top_k_docs: int, top_k_history: int, min_history_similarity: float, budget: int,
                     report: RetrievalReport, *, exclude: Collection[int] = ()) -> str:
        """The memory block for ``query`` within ``budget`` tokens; fills ``report``."""
        return self.memory_blocks(query, query_vector, recent_messages, top_k_docs, top_k_history,
                                  min_history_similarity, [(budget, report)], exclude=exclude)[0]

    def memory_blocks(self, query: str, query_vector: QueryVector, recent_messages: Sequence[Mapping[str, Any]],
                      top_k_docs: int, top_k_history: int, min_history_similarity: float,
                      requests: list[tuple[int, RetrievalReport]], *,
                      exclude: Collection[int] = ()) -> list[str]:
        """The memory block for ``query`` at each ``(budget, report)`` of ``requests``:
        candidates and ranking are computed once for the budgets that share their settings
        (``SynthesisParams.at_budget``), selection and rendering per budget (a benchmark
        compares budgets)."""
        tree = self.tree
        tree.refuse_if_closed("read its memory")  # not sqlite's "Cannot operate on a closed database"
        exchanges = tree.exchange_view()
        # a query of punctuation or emoji only asks nothing: "?" injected 117 tokens of
        # messages near MiniLM's reading of a bare "?" (a trial)
        if len(exchanges) == 0 or not any(ch.isalnum() for ch in query) or all(b <= 0 for b, _ in requests):
            return [""] * len(requests)
        embedder = tree.embed_fn  # read per call: the tree's embedder may be replaced
        qvec = unit_query(query_vector, embedder.embed, query)
        # budgets of other settings find their own candidates: the focused reading of the
        # query is embedded once for all of them
        embed = functools.lru_cache(maxsize=2)(embedder.embed)
        by_params: dict[SynthesisParams, list[int]] = {}
        for k, (budget, _) in enumerate(requests):
            by_params.setdefault(self.params.at_budget(budget), []).append(k)
        out = [""] * len(requests)
        for params, ks in by_params.items():
            blocks = self._blocks(params, query, qvec, embed, exchanges, recent_messages, top_k_docs, top_k_history,
                                  min_history_similarity, [requests[k] for k in ks], frozenset(exclude))
            for k, block in zip(ks, blocks):
                out[k] = block
        return out

    def _blocks(self, params: SynthesisParams, query: str, qvec: np.ndarray, embed: Callable[[str], np.ndarray],
                exchanges: Sequence[MessageNode], recent_messages: Sequence[Mapping[str, Any]], top_k_docs: int,
                top_k_history: int, min_history_similarity: float, requests: list[tuple[int, RetrievalReport]],
                exclude: frozenset[int]) -> list[str]:
        """``memory_blocks`` for budgets that share ``params``: one ranking."""
        tree = self.tree
        recent_texts = {m.get("content", "") for m in recent_messages}
        timings: dict[str, float] = {}
        # stage 1: candidates
        cands = self._finder.find(query, qvec, exchanges, recent_texts, embed, tree.exchange_vector, timings,
                                  exclude=exclude, params=params)
        for _, report in requests:
            report.embed_seconds = timings.get("embed_seconds", 0.0)
        if cands is None:  # nothing relevant; a question about the memory itself gets its outline
            return [self.overview(budget, report) if asks_about_the_memory(query) else "" for budget, report in requests]
        # stage 2: scores and ranking
        scores = fuse(query, cands, exchanges, params)
        cand = cands.units
        ranking = [cand[k] for k in scores.ranking]
        queue, pinned = queue_order(cands.dense, scores.ranking, min_history_similarity, top_k_history)
        layout = BlockLayout(exchanges, tree.get_ancestors, params.max_message_chars, params.group_depth)
        cand_ex = [i for i, _ in cand]
        newer = self._supersessions.find(cand_ex, exchanges, tree.exchange_vector, updates=set(cand_ex),
                                         message_vector=self.message_vector_lookup(), revision=self._text_revision())
        out = []
        for budget, report in requests:
            report.ranking = list(ranking)
            # stage 3: what fits the budget
            chosen = select([cand[k] for k in queue], budget, newer, layout) if budget > 0 else []
            if not chosen:
                out.append("")
                continue
            chosen_ex = {i for i, _ in chosen}
            status = pair_status(chosen_ex, newer)
            report.supersessions = [(i, j) for i in sorted(chosen_ex) for j in newer.get(i, []) if j in chosen_ex]
            # stage 4: the text
            text, shown, paths = render(chosen, status, budget, top_k_docs, scores.topic_score, cands.topic_keyword,
                                        layout, tree.is_frozen, tree.thread_path, params.topic_threshold)
            report.memory_tokens = count_tokens(text)
            report.paths = paths
            report.exchanges = self._injected(cands, scores.fused, scores.branch_of, shown, status, pinned, exchanges)
            best = {x.index: x.vector for x in report.exchanges}
            for path in paths:  # a branch's own evidence: its best entry (its topic may have no summary yet)
                path.best_entry = max((best.get(i, 0.0) for i in path.entries), default=0.0)
            out.append(text)
        return out

    def overview(self, budget: int, report: RetrievalReport) -> str:
        """The conversation's topics, largest first, each with what the user said there
        (their first three messages) and then its summary, within ``budget``: "Tell me
        everything you know about me" reached no message's evidence floor and got an empty
        memory block in a session of a dozen facts (a trial). The user's words lead: a summary is the most informative
        sentences, and a small model's rambling replies made every line of a trial's outline
        ("I will not be able to pay you…"), the user's deadline in none."""
        topics = [t for t in self.tree.iter_topics() if not t.is_root and not t.is_group and t.message_children]
        topics.sort(key=lambda t: -t.message_count)
        lines = [prompts.OVERVIEW_HEADER]
        used = count_tokens(lines[0]) + 1
        for t in topics:
            said = [without_marks(x.user).strip() for x in t.message_children[:3] if x.user.strip()]
            about = clip_text(overview_line(said, t.summary or ""), 160)
            line = f"- {t.topic_name} ({t.message_count}): {about}" if about else f"- {t.topic_name} ({t.message_count})"
            cost = count_tokens(line) + 1
            if used + cost > budget:
                continue
            lines.append(line)
            used += cost
        if len(lines) == 1:
            return ""
        text = "\n".join(lines)
        report.memory_tokens = count_tokens(text)
        return text

    def corrections(self, indices: list[int]) -> dict[int, list[int]]:
        """Which of these exchanges a later one corrected, by the rule the memory block
        tags ``[superseded]`` with (any later exchange may be the correction): exchange ->
        the exchanges that corrected it."""
        self.tree.refuse_if_closed("look for corrections")
        exchanges = self.tree.exchange_view()
        with self.tree.lock:
            return self._supersessions.find(sorted(set(indices)), exchanges, self.tree.exchange_vector,
                                            message_vector=self.message_vector_lookup(),
                                            revision=self._text_revision())

    def message_vector_lookup(self) -> Callable[[int, str], np.ndarray | None] | None:
        """A function (exchange index, role) -> the stored message's unit vector (None for
        a message not stored), or None without a store."""
        index = self.vdb.conversation_index() if self.vdb is not None else None
        if index is None:
            return None
        table = self._finder.table
        table.follow(index)

        def vector(i: int, role: str) -> np.ndarray | None:
            row = table.row_of_unit.get((i, role))
            return None if row is None else index.rows([row])[0]

        return vector

    def _injected(self, cands: Candidates, fused: np.ndarray, branch_of: dict[int, float],
                  shown: dict[tuple[int, str], int], status: dict[int, str], pinned: set[int],
                  exchanges: Sequence[MessageNode]) -> list[InjectedExchange]:
        """The report's entries: each shown exchange with its best candidate's scores."""
        cand, dense, keyword = cands.units, cands.dense, cands.keyword
        best: dict[int, int] = {}
        positions: dict[int, list[int]] = {}
        for k, (i, _role) in enumerate(cand):
            if cand[k] in shown and (i not in best or fused[k] > fused[best[i]]):
                best[i] = k
            positions.setdefault(i, []).append(k)
        out = []
        for i in sorted(best, key=lambda i: -fused[best[i]]):
            x = exchanges[i]
            ks = positions[i]
            out.append(InjectedExchange(
                i, x.node_id, self.tree.thread_path(x) if x.parent is not None else "", x.timestamp,
                float(max(max(dense[k] for k in ks), 0.0)), float(max(keyword[k] for k in ks)),
                float(branch_of.get(i, 0.0)), float(fused[best[i]]), status.get(i, ""),
                any(k in pinned for k in ks), sum(shown[u] for u in shown if u[0] == i)))
        return out

    def _focused_query_vector(self, query: str) -> np.ndarray | None:
        """The focused second reading of ``query`` (``synthesis.candidates``)."""
        return focused_query_vector(query, self.word_stats, self.tree.embed_fn.embed, self.params.focus_query)


def overview_line(said: list[str], summary: str) -> str:
    """What an outline line says of a topic: what the user said there, then its summary
    without those words (a summary often holds the user's first sentence: it was said twice)."""
    rest = summary
    for text in said:
        rest = rest.replace(text, " ")
    rest, words = " ".join(rest.split()), " ".join(said)
    return f"{words} — {rest}" if words and rest else words or rest

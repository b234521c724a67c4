"""Stage 2, scoring and fusion: one score per candidate message, and their ranking.

Cosines enter in standard deviations of the query's cosines over the whole
conversation, branch scores as z-scores among the candidates, BM25 relative to the
best match, squared (0 without a shared word); unlike ranks, scores keep how far ahead a clear
winner is. A date named in the question lifts that day's messages; conversation
neighbours lend each other a share of their score, and a message that asks lends the
one right after it a share more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..dates import dates_in
from ..nodes import MessageNode, TopicNode
from .candidates import Candidates
from .params import SynthesisParams

ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2}


@dataclass
class Scores:
    topic_score: dict[str, float]  # topic id -> summary cosine nudged by BM25
    branch_of: dict[int, float]  # exchange index -> best topic score above it
    fused: np.ndarray  # per candidate
    ranking: list[int]  # candidate positions, best first


def z_scores(x: np.ndarray) -> np.ndarray:
    """Standard scores (a constant array gives zeros)."""
    sd = float(x.std())
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def dense_term(cands: Candidates) -> np.ndarray:
    """The candidates' cosines in standard deviations: of the query's cosines to every
    live message when known (how far a message stands out in the conversation for this
    query, whatever else became a candidate), else of the candidates' own. Only the
    scale matters: the fused scores are shifted to start at 0."""
    if cands.dense_spread > 0:
        return (cands.dense - cands.dense.mean()) / cands.dense_spread
    return z_scores(cands.dense)


def topic_scores(topic_dense: dict[str, float], topic_keyword: dict[str, float]) -> dict[str, float]:
    """Each topic's summary cosine, nudged by its BM25 relative to the best topic match."""
    best = max(topic_keyword.values(), default=0.0) or 1.0
    return {nid: s + 0.25 * topic_keyword.get(nid, 0.0) / best for nid, s in topic_dense.items()}


def branch_scores(units: list[tuple[int, str]], exchanges: Sequence[MessageNode],
                  topic_score: dict[str, float]) -> dict[int, float]:
    """The best topic score above each candidate's exchange (0 at least: the root scores
    0). Candidates share ancestors: each topic is climbed past once per query."""
    out: dict[int, float] = {}
    above: dict[str, float] = {}  # topic id -> best score of it and its ancestors
    for i, _ in units:
        if i in out:
            continue
        chain: list[TopicNode] = []
        cur = exchanges[i].parent
        while cur is not None and cur.node_id not in above:
            chain.append(cur)
            cur = cur.parent
        best = above[cur.node_id] if cur is not None else 0.0
        for t in reversed(chain):
            best = max(best, topic_score.get(t.node_id, 0.0))
            above[t.node_id] = best
        out[i] = best
    return out


def neighbour_smoothing(fused: np.ndarray, units: list[tuple[int, str]], weight: float) -> np.ndarray:
    """A message next to a hit in the conversation gains ``weight`` times the better of
    its two neighbours' scores (conversation neighbours share context)."""
    c = len(units)
    order = sorted(range(c), key=lambda k: (units[k][0], ROLE_ORDER.get(units[k][1], 3)))
    f = fused[order]
    adjacent = [(units[order[q]][0], units[order[q + 1]][0]) for q in range(c - 1)]
    left = np.concatenate([[0.0], [f[q] if abs(a - b) <= 1 else 0.0 for q, (a, b) in enumerate(adjacent)]])
    right = np.concatenate([[f[q + 1] if abs(a - b) <= 1 else 0.0 for q, (a, b) in enumerate(adjacent)], [0.0]])
    out = fused.copy()
    out[order] = f + weight * np.maximum(left, right)
    return out


# a message that asks: "?" and its full-width and Arabic forms
QUESTION_MARKS = ("?", "\uff1f", "\u061f")


def asks(text: str) -> bool:
    return any(mark in text for mark in QUESTION_MARKS)


def next_message(exchanges: Sequence[MessageNode], i: int, role: str) -> tuple[int, str] | None:
    """The message said right after ``(i, role)``: the exchange's next role, else the
    next exchange's first (None at the end)."""
    roles = [m["role"] for m in exchanges[i].messages]
    if role in roles and roles.index(role) + 1 < len(roles):
        return i, roles[roles.index(role) + 1]
    if i + 1 < len(exchanges) and exchanges[i + 1].messages:
        return i + 1, exchanges[i + 1].messages[0]["role"]
    return None


def answer_lift(base: np.ndarray, fused: np.ndarray, units: list[tuple[int, str]],
                exchanges: Sequence[MessageNode], weight: float) -> np.ndarray:
    """The message right after a question gains ``weight`` of the question's score
    (``base``: before neighbours lent theirs), on top of what neighbours lend: a message
    in the conversation that asks what the query asks is answered by what follows it,
    and seldom holds the answer itself."""
    pos = {u: k for k, u in enumerate(units)}
    out = fused.copy()
    for k, (i, role) in enumerate(units):
        if not asks(exchanges[i].role_text(role)):
            continue
        nxt = next_message(exchanges, i, role)
        if nxt is not None and nxt in pos:
            out[pos[nxt]] += weight * base[k]
    return out


def fuse(query: str, cands: Candidates, exchanges: Sequence[MessageNode], params: SynthesisParams) -> Scores:
    """Stage 2: the fused score of every candidate and the ranking."""
    units = cands.units
    topic_score = topic_scores(cands.topic_dense, cands.topic_keyword)
    branch_of = branch_scores(units, exchanges, topic_score)
    branch = np.array([branch_of[i] for i, _ in units])
    wd, wk, wb = params.weights
    keyword = cands.keyword
    relative = keyword / (keyword.max() or 1.0)
    fused = wd * dense_term(cands) + wk * relative ** params.keyword_power + wb * z_scores(branch)
    if params.date_weight:
        specs = dates_in(query)  # the question names a date: what was said that day
        if specs:
            fused += params.date_weight * np.array(
                [any(sp.matches(exchanges[i].timestamp) for sp in specs) for i, _ in units], dtype=float)
    fused -= fused.min()  # non-negative: neighbours below lend score, never take it
    base = fused
    if params.neighbour_weight:
        fused = neighbour_smoothing(fused, units, params.neighbour_weight)
    if params.answer_weight:
        fused = answer_lift(base, fused, units, exchanges, params.answer_weight)
    ranking = [int(k) for k in np.argsort(-fused, kind="stable")]
    if params.diversity and cands.vectors is not None:
        ranking = diversify(ranking, fused, cands.vectors, params.diversity, params.diversity_pool)
    return Scores(topic_score, branch_of, fused, ranking)


def diversify(ranking: list[int], fused: np.ndarray, vectors: np.ndarray, weight: float, pool: int) -> list[int]:
    """Maximal marginal relevance over the best ``pool``: each next message is the one
    whose score, less ``weight`` times its cosine to the closest message already ranked,
    is highest. A question about several things gets several things, not ten readings of
    one (scores are scaled to the best first, so ``weight`` is a share of it)."""
    head = np.array(ranking[:pool])
    if len(head) < 3:
        return ranking
    score = fused[head] / (fused[head[0]] or 1.0)
    vecs = vectors[head]
    closest = np.full(len(head), -1.0)
    left = np.ones(len(head), dtype=bool)
    order = []
    for _ in range(len(head)):
        gain = np.where(left, score - weight * np.maximum(closest, 0.0), -np.inf)
        q = int(np.argmax(gain))
        order.append(int(head[q]))
        left[q] = False
        closest = np.maximum(closest, vecs @ vecs[q])
    return order + ranking[pool:]


def queue_order(dense: np.ndarray, ranking: list[int], min_history_similarity: float, top_k_history: int) -> tuple[list[int], set[int]]:
    """The order selection tries candidates in: the recalled past messages (TRACE's
    ``top_k_history``: cosine at least ``min_history_similarity``) pinned first, then
    the ranking. Returns the order and the pinned positions."""
    pinned = [int(k) for k in np.argsort(-dense, kind="stable") if dense[k] >= min_history_similarity]
    pinned = pinned[:top_k_history]
    pinned_set = set(pinned)
    return pinned + [k for k in ranking if k not in pinned_set], pinned_set

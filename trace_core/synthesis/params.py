"""The synthesizer's parameters, in one frozen dataclass. Defaults: the settings of
``bench.locomo``'s grid with the best recall on the four LoCoMo development
conversations, per budget (each fold of its leave-one-conversation-out figure chooses on
three). The settings near the top differ by less than 0.005: the weights are not sharp."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Literal

import numpy as np

# What suits a block's size, chosen per budget by ``bench.locomo``'s grid (the setting best
# at that budget on the four development conversations): a small block wants the few
# messages that stand out, a large one more of what a question touches (a diverse
# ranking, a wider neighbour share). Each entry: (budget, fields); a block takes the
# entry measured nearest to its budget, on a log scale.
BudgetSettings = tuple[tuple[int, tuple[tuple[str, object], ...]], ...]
BUDGET_SETTINGS: BudgetSettings = (
    (500, (("weights", (1.0, 2.0, 0.3)), ("dense_scale", "candidates"), ("date_weight", 2.0))),
    (1000, (("date_weight", 2.0),)),
    (2000, (("neighbour_weight", 0.5), ("diversity", 0.15))),
)


@dataclass(frozen=True)
class SynthesisParams:
    memory_token_budget: int = 1000  # hard cap of the memory block, in estimated tokens
    topic_threshold: float = 0.40  # a branch shows its summary when its topic scored this
    max_message_chars: int = 480  # each injected message is clipped to this
    weights: tuple[float, float, float] = (1.0, 5.0, 0.3)  # fusion: dense, keyword, branch
    # the cosine enters the fusion in standard deviations of the query's cosines to every
    # stored message ("conversation") or to the candidates only ("candidates"): the first
    # says how far a message stands out for this query whatever else became a candidate
    dense_scale: Literal["conversation", "candidates"] = "conversation"
    # BM25 enters the fusion as (score / best score) ** keyword_power: a message sharing
    # the question's rarer words as well as the best match does gains the keyword weight,
    # one sharing a word or two of them little of it
    keyword_power: float = 2.0
    neighbour_weight: float = 0.3  # share of a conversation neighbour's score a message gains
    # share of a question's score the message said right after it gains (a message that
    # asks what the query asks is answered by the next one), beside the neighbour share
    answer_weight: float = 0.2
    supersede_similarity: float = 0.65  # cosine from which a later update supersedes
    # ... or from this one when the correction names a rarer word of the fact it corrects
    supersede_shared_similarity: float = 0.45
    group_depth: int | None = 1  # entries are grouped under their ancestor at this depth
    # evidence of relevance: a message is a candidate only from this cosine (MiniLM puts
    # unrelated sentences at 0.0-0.27) or with a shared content word (BM25)
    min_relevance: float = 0.30
    candidates: int = 200  # messages kept by cosine
    topic_candidates: int = 500  # topics scored by summary cosine
    common_word_share: float = 0.05  # BM25 drops words in more than this share of exchanges
    date_weight: float = 1.0  # lift for a date named in the question, in standard deviations
    focus_query: bool = True  # also read the query without the words found in most exchanges
    use_parts: bool = True  # score the best candidates by their sentence parts too
    part_candidates: int = 400
    neighbour_seeds: int = 150  # strongest candidates whose neighbours join the candidates
    keyword_candidates: int = 100  # BM25 hits over messages
    # pseudo-relevance feedback (Rocchio on the vectors): each candidate's cosine is mixed
    # with its cosine to the centroid of the ``prf_docs`` best candidates (0: off)
    prf_weight: float = 0.0
    prf_docs: int = 5
    # cosine a conversation neighbour of a strong candidate needs to join (None: min_relevance);
    # being next to a strong hit is the evidence
    neighbour_relevance: float | None = 0.2  # below 0.1, unrelated neighbours get in
    # diversity of the ranking (maximal marginal relevance over the best ``diversity_pool``):
    # a message close to one ranked above it loses this share of that cosine (0: off)
    diversity: float = 0.0
    diversity_pool: int = 120
    parallel_from: int = 20_000  # stored messages from which BM25 runs in a thread
    # stored messages from which the cosine pass reads them projected onto their leading
    # axes and rescores a shortlist exactly (``VectorIndex.top``); below it, every row
    # exactly (LoCoMo's conversations hold 2,000 messages)
    approximate_from: int = 20_000
    # fields set by the block's budget (``at_budget``); () keeps every field as it is
    by_budget: BudgetSettings = BUDGET_SETTINGS

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            problem = _field_problem(f.name, getattr(self, f.name))
            if problem:  # diversity="x" was taken, and failed in the middle of a synthesis
                raise ValueError(f"SynthesisParams: {problem}")
            # numpy's scalars (a float32 cosine, an int64 from a grid) as Python's own
            object.__setattr__(self, f.name, _plain(f.name, getattr(self, f.name)))
        names = {f.name for f in dataclasses.fields(self)} - {"by_budget"}
        for entry in self.by_budget:  # a zero budget divided by zero, a misspelt field failed late (a trial)
            budget, fields = entry
            if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
                raise ValueError(f"by_budget: a budget must be a whole number of tokens above 0, not {budget!r}")
            unknown = [name for name, _ in fields if name not in names]
            if unknown:
                raise ValueError(f"by_budget: no such setting: {', '.join(map(repr, unknown))}")
            for name, value in fields:  # checked here too: at_budget met diversity="x" mid-synthesis
                problem = _field_problem(name, value)
                if problem:
                    raise ValueError(f"SynthesisParams: by_budget's entry for {budget} tokens: {problem}")

    def fixed(self, **changes: object) -> "SynthesisParams":
        """These fields set, and kept at every budget: ``by_budget`` no longer sets them
        (``SynthesisParams(date_weight=1.0)`` alone is the default value, which the budget's
        entry still changes)."""
        kept = tuple((b, tuple((k, v) for k, v in fields if k not in changes)) for b, fields in self.by_budget)
        return dataclasses.replace(self, by_budget=kept, **changes)  # type: ignore[arg-type]

    def at_budget(self, budget: int) -> "SynthesisParams":
        """The settings a block of ``budget`` tokens is made with: the ``by_budget`` entry
        measured nearest to it sets the fields still at their default values (a field set
        to another value keeps it; ``fixed`` keeps any value)."""
        if not self.by_budget:
            return self
        _, fields = min(self.by_budget, key=lambda e: abs(math.log(max(budget, 1) / e[0])))
        changes = {name: value for name, value in fields if getattr(self, name) == _DEFAULTS[name]}
        return dataclasses.replace(self, by_budget=(), **changes)  # type: ignore[arg-type]


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SynthesisParams)}
_NONE_ALLOWED = {"group_depth", "neighbour_relevance"}


def _is_number(value: object) -> bool:
    """A finite real number (numpy's too), not True or False."""
    return isinstance(value, numbers.Real) and not _is_bool(value) and math.isfinite(value)


def _is_whole(value: object) -> bool:
    """A whole number (numpy's too), not True or False."""
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def _is_bool(value: object) -> bool:
    return isinstance(value, (bool, np.bool_))


def _plain(name: str, value: object) -> object:
    """A checked field's value as the Python type of its default."""
    default = _DEFAULTS.get(name)
    if name == "weights" and isinstance(value, tuple):
        return tuple(float(v) for v in value)
    if isinstance(default, bool):
        return bool(value)
    if value is None or not isinstance(value, numbers.Real):
        return value
    if isinstance(default, int):
        return int(value)
    return float(value) if isinstance(default, float) else value


def _field_problem(name: str, value: object) -> str:
    """What is wrong with one field's value, by the kind of its default ("" when nothing)."""
    default = _DEFAULTS.get(name)
    if name == "by_budget" or (value is None and name in _NONE_ALLOWED):
        return ""
    if name == "dense_scale":
        return "" if value in ("conversation", "candidates") else \
            f"dense_scale must be 'conversation' or 'candidates', not {value!r}"
    if name == "weights":
        ok = isinstance(value, tuple) and len(value) == 3 and all(_is_number(v) for v in value)
        return "" if ok else f"weights must be three numbers (dense, keyword, branch), not {value!r}"
    if isinstance(default, bool):
        return "" if _is_bool(value) else f"{name} must be True or False, not {value!r}"
    if isinstance(default, int):
        ok = _is_whole(value) and value >= 0
        return "" if ok else f"{name} must be a whole number ≥ 0, not {value!r}"
    if isinstance(default, float):
        return "" if _is_number(value) else f"{name} must be a number, not {value!r}"
    return ""

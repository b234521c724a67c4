"""Who decides: every structural decision goes through one small interface.

- ``EmbeddingJudge`` needs no LLM: cosine of the exchange to the current topic and
  its ancestors, extractive names and summaries, a strict merge rule.
- ``LLMJudge`` asks an OpenAI-compatible model for JSON and validates the answer.
- ``Judges`` combines them by mode: ``"embedding"``, ``"llm"`` or ``"auto"`` (the
  embedding judge answers when its cosine is clearly above or below the threshold;
  only the doubtful middle goes to the LLM). Any LLM failure falls back to the
  embedding judge, and the placement says which judge decided and why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import prompts
from .abandon import Abandoned, call_abandonable
from .jsonparse import described
from .llm import JSONLLM, LLMError
from .textutil import DocumentFrequency, clean_name, exchange_sides, extractive_name, extractive_summary


@dataclass
class PlacementContext:
    path_names: list[str]  # ROOT ... current topic
    user: str
    assistant: str
    vector: np.ndarray  # the exchange, unit length
    recent_vector: np.ndarray | None  # the current topic's last exchanges
    path_vectors: list[np.ndarray | None]  # centroid of each path node (None: empty/ROOT)


@dataclass
class Placement:
    action: str  # "continue" | "new"
    parent_level: int = 0  # for "new": index into the path (0 = ROOT)
    name: str = ""
    judge: str = "embedding"
    reason: str = ""
    confident: bool = True


@dataclass
class TopicDigest:
    """What a merge decision sees of a topic."""

    name: str
    summary: str
    vector: np.ndarray
    text: str = ""  # the topic's raw text (first exchanges), for the embedding veto
    said: str = ""  # the user's side of that text: more of its words are subject words
    _salient: set[str] | None = field(default=None, repr=False)
    _forms: dict[str, str] = field(default_factory=dict, repr=False)  # normalised word -> as written


def cosine(a: np.ndarray | None, b: np.ndarray | None) -> float:
    if a is None or b is None:
        return 0.0
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


GROUP_SEPARATOR = " · "


def _heaviest_first(texts: list[tuple[str, str]], weights: Sequence[float] | None) -> list[tuple[str, str]]:
    """What the LLM reads to name a topic: the heaviest parts first."""
    return texts if weights is None else [t for _, t in sorted(zip(weights, texts), key=lambda p: -p[0])]


def group_name(names: Sequence[str], weights: Sequence[float], words: int = 2) -> str:
    """The two heaviest of ``names`` (a tie goes to the earlier), in their order, ``words``
    words of each; a word the first already shows is not repeated ("Tomato Seedlings ·
    Leaves Yellow")."""
    names = [" ".join(n.split()) for n in names]
    if len(names) == 1:
        return names[0]
    by_weight = sorted(range(len(names)), key=lambda k: (-weights[k], k))
    sep = GROUP_SEPARATOR.strip()

    def compose(parts: list[int], avoid: frozenset[str] = frozenset()) -> str:
        """Each part's first subject (a group's name holds several, split by the separator)
        with words not shown yet; the lighter parts also skip the words in ``avoid``."""
        shown: list[str] = []
        seen: set[str] = set()
        for k in sorted(parts):
            subjects = [s.split() for s in names[k].split(f" {sep} ")]
            skip = seen | (avoid if k != parts[0] else set())
            for subject in subjects:
                fresh = [w for w in subject if w != sep and w.lower() not in skip][:words]
                if fresh:
                    shown.append(" ".join(fresh))
                    seen |= {w.lower() for w in fresh}
                    break
        return GROUP_SEPARATOR.join(shown)

    name = compose(by_weight[:2])
    # a copy of a part's name (a group over a group that holds its other part's subject)
    # nested into "A · B → A · B → A · B": the next part's subject, or the lighter part's
    # other one, tells them apart
    if name in names and len(names) > 2:
        name = compose(by_weight[:3])
    if name in names:  # the lighter part's words that the copied name does not show
        other = compose(by_weight[:2], frozenset(w.lower() for w in name.split()))
        name = other if GROUP_SEPARATOR in other else name  # never one part's subject alone
    return name



def _vs(sim: float, threshold: float) -> str:
    """``sim`` as the reason shows it beside ``threshold``: four decimals where two would
    read as the threshold itself ("cosine 0.30 < 0.30")."""
    return f"{sim:.4f}" if f"{sim:.2f}" == f"{threshold:.2f}" else f"{sim:.2f}"

@dataclass
class EmbeddingJudge:
    """Placement by cosine. Thresholds are for all-MiniLM-L6-v2 (tuned on LoCoMo dev)."""

    continue_threshold: float = 0.30  # recent-topic cosine at or above: same topic
    branch_threshold: float = 0.40  # ancestor cosine at or above: new topic under it
    doubt_margin: float = 0.05  # auto mode: within this of the threshold is doubtful
    adapt_quantile: float = 0.25  # the threshold follows this quantile of recent cosines...
    adapt_window: int = 50  # ...over this many exchanges (after adapt_min of them)
    adapt_min: int = 10
    merge_threshold: float = 0.65  # the stricter veto rule (see ``approve_merge``)
    same_threshold: float = 0.85  # near-duplicates: no further check
    masked_threshold: float = 0.18  # snake vs language: 0.01-0.11 masked; one car's parts: 0.20-0.33
    doc_freq: DocumentFrequency = field(default_factory=DocumentFrequency)
    name = "embedding"

    _recent_sims: list[float] = field(default_factory=list, repr=False)
    _weights: dict[str, float] = field(default_factory=dict, repr=False)  # sentence -> summary weight
    _weights_at: int = field(default=-1, repr=False)  # doc_freq.docs the weights were computed at

    def threshold(self) -> float:
        """The continue threshold in force. Conversations differ in how alike their
        exchanges are (two friends chatting share names and tone in every line); a
        fixed cosine would call everything one topic there. So the threshold rises to
        the lower quartile of the recent cosines, never below ``continue_threshold``."""
        if len(self._recent_sims) < self.adapt_min:
            return self.continue_threshold
        q = float(np.quantile(self._recent_sims, self.adapt_quantile))
        return min(max(self.continue_threshold, q - 0.02), 0.9)

    def observe(self, user: str, assistant: str) -> None:
        """Learn word rarity from every exchange (for names)."""
        self.doc_freq.observe(f"{user}\n{assistant}")

    def place(self, ctx: PlacementContext) -> Placement:
        if len(ctx.path_names) == 1:
            return Placement("new", 0, self.name_for(ctx), "embedding", "the first exchange opens a topic")
        sim = cosine(ctx.vector, ctx.recent_vector)
        threshold = self.threshold()
        self._recent_sims.append(sim)
        del self._recent_sims[: -self.adapt_window]
        confident = abs(sim - threshold) >= self.doubt_margin
        if sim >= threshold:
            return Placement(
                "continue", len(ctx.path_names) - 1, "", "embedding",
                f"cosine {_vs(sim, threshold)} to the current topic ≥ {threshold:.2f}", confident,
            )
        # a new topic: a sibling of the current one, or higher up if it resembles the
        # parent less than branch_threshold (never a child of the topic it left, so
        # depth only grows through fan-out, as in a B+tree)
        level, best = 0, 0.0
        for i in range(len(ctx.path_names) - 2, 0, -1):
            s = cosine(ctx.vector, ctx.path_vectors[i])
            if s >= self.branch_threshold:
                level, best = i, s
                break
        where = f"under {ctx.path_names[level]} (cosine {best:.2f})" if level else "under ROOT"
        return Placement(
            "new", level, self.name_for(ctx), "embedding",
            f"cosine {_vs(sim, threshold)} to the current topic < {threshold:.2f}; new topic {where}", confident,
        )

    def name_for(self, ctx: PlacementContext) -> str:
        return extractive_name(exchange_sides([(ctx.user, ctx.assistant)]), df=self.doc_freq)

    def name_topic(self, texts: list[tuple[str, str]], weights: Sequence[float] | None = None) -> str:
        sides = exchange_sides(texts)
        if weights is not None:  # each exchange gives two sides
            sides = [s._replace(weight=s.weight * weights[k // 2]) for k, s in enumerate(sides)]
        return extractive_name(sides, df=self.doc_freq)

    def name_group(self, names: Sequence[str], weights: Sequence[float]) -> str:
        """A group's name from its largest parts' names (in conversation order, with how
        much of the group each is): the two heaviest, two words of each, side by side
        ("Sourdough Starter · Training Marathon"). The three best words across parts
        read as a third subject ("Weights Training October")."""
        return group_name(names, weights)

    def summarize(self, texts: list[tuple[str, str]]) -> str:
        # sentence weights hold while the word counts do (no exchange added meanwhile)
        if self._weights_at != self.doc_freq.docs or len(self._weights) > 100_000:
            self._weights, self._weights_at = {}, self.doc_freq.docs
        return extractive_summary(texts, df=self.doc_freq, cache=self._weights, boilerplate=prompts.SYSTEM_BOILERPLATE)

    def approve_merge(self, a: TopicDigest, b: TopicDigest, embed: Callable[[list[str]], np.ndarray]) -> tuple[bool, str]:
        """The stricter rule used without an LLM.

        Two topics that share salient words (their names, their most salient words)
        merge only if they stay alike once those words are hidden: topics alike only
        through a shared word ("Python" the snake and "Python" the language) fall
        apart (cosine < ``masked_threshold``), while topics about one thing ("Eleanor,
        my Mustang": its brakes, its paint) stay close. Topics that share no salient
        word need cosine ≥ ``merge_threshold``, above the merge threshold itself.
        """
        sim = cosine(a.vector, b.vector)
        if sim >= self.same_threshold:
            return True, f"cosine {sim:.2f} ≥ {self.same_threshold:.2f}: the same subject"
        if _named_alike(a.name, b.name):  # the same three words of what the user said: one subject,
            # however unlike a small model's replies make the rest ("Sourdough Starter Bubbles"
            # twice was kept apart, "alike only through bubbles, sourdough, starter": a trial)
            return True, f"cosine {sim:.2f}; both named {a.name}"
        shared = _salient_set(a) & _salient_set(b)
        if not shared:
            if sim >= self.merge_threshold:
                return True, f"cosine {sim:.2f} ≥ {self.merge_threshold:.2f}"
            return False, f"cosine {sim:.2f} < {self.merge_threshold:.2f} and no shared subject words (embedding veto)"
        ta, tb = _mask(a.text or a.summary, shared), _mask(b.text or b.summary, shared)
        va, vb = embed([ta, tb])
        masked = cosine(va, vb)
        words = _as_written(shared, a, b)
        if masked < self.masked_threshold:
            return False, f"alike only through {words}: cosine {masked:.2f} without them < {self.masked_threshold:.2f}"
        return True, f"cosine {sim:.2f}; still {masked:.2f} without the shared {words}"


def _named_alike(a: str, b: str) -> bool:
    """Two names made of the same three salient words or more (not a name padded for want
    of words, "X Conversation Notes")."""
    words = a.split()
    return a.casefold() == b.casefold() and len(words) >= 3 and not {"Conversation", "Notes"} & set(words)


def _norm_word(w: str) -> str:
    w = w.lower().strip("'-")
    for suffix in ("'s", "s"):
        if w.endswith(suffix) and len(w) > 4:
            return w[: -len(suffix)]
    return w


def _salient_set(d: TopicDigest) -> set[str]:
    """The topic's subject words (name and most salient words), normalised; cached."""
    if d._salient is None:
        from .textutil import salient_words

        # and the user's: a small model's replies ("You are using a computer for your
        # business.") outweighed "knee" in two knee topics of a trial, and a short word
        # ranks low among four
        words = d.name.split() + salient_words(d.text or d.summary, 4) + salient_words(d.said, 8)
        for w in (w for w in words if len(w) > 2):
            d._forms.setdefault(_norm_word(w), w.lower().strip("'-"))
        d._salient = set(d._forms)
    return d._salient


def _as_written(words: set[str], *digests: TopicDigest) -> str:
    """Shared subject words as the topics wrote them ("kubernetes", not the matching form
    "kubernete" a reason showed in a trial)."""
    return ", ".join(sorted(next((d._forms[w] for d in digests if w in d._forms), w) for w in words))


def _mask(text: str, words: set[str]) -> str:
    """Hide ``words`` (normalised forms) and their plurals/possessives."""
    import re

    for w in words:
        text = re.sub(rf"\b{re.escape(w)}(?:'?s)?\b", " ", text, flags=re.I)
    return text


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


class LLMJudge:
    """Decisions by an OpenAI-compatible chat model. Raises ``LLMError`` on any failure."""

    name = "llm"

    def __init__(self, llm: JSONLLM, max_chars: int = 400) -> None:
        self.llm = llm
        self.max_chars = max_chars  # keep prompts short: small local models are slow on long ones

    @property
    def model(self) -> str:
        return self.llm.model

    @model.setter
    def model(self, name: str) -> None:
        self.llm.model = name

    def place(self, ctx: PlacementContext) -> Placement:
        path = "\n".join(f"{i}. {n}" for i, n in enumerate(ctx.path_names))
        ans = self.llm.ask(
            prompts.CLASSIFY_SYSTEM,
            prompts.CLASSIFY_USER.format(
                path=path, user=_clip(ctx.user, self.max_chars), assistant=_clip(ctx.assistant, self.max_chars),
                current_level=len(ctx.path_names) - 1,
            ),
            prompts.CLASSIFY_SCHEMA,
            "placement",
        )
        action = str(ans.get("action", "")).strip().lower()
        if action not in ("continue", "new"):
            raise LLMError(f"the model answered an unknown action {described(ans.get('action'))}")
        if action == "continue" and len(ctx.path_names) == 1:
            action = "new"  # nothing to continue yet
        if action == "continue":
            return Placement("continue", len(ctx.path_names) - 1, "", "llm", "the model kept the current topic")
        try:
            level = int(ans.get("parent", len(ctx.path_names) - 1 if len(ctx.path_names) > 1 else 0))
        except (TypeError, ValueError):
            raise LLMError(f"the model answered a parent that is not a number: {described(ans.get('parent'))}") from None
        if not 0 <= level < len(ctx.path_names):
            raise LLMError(f"the model answered parent level {level}, outside 0..{len(ctx.path_names) - 1}")
        name = clean_name(ans.get("name", ""))
        if not name or not any(ch.isalnum() for ch in name):
            raise LLMError("the model gave no topic name")
        return Placement("new", level, name, "llm", f"the model opened a new topic under {ctx.path_names[level]}")

    def name_topic(self, texts: list[tuple[str, str]]) -> str:
        body = "\n".join(f"- {_clip(u, 150)} / {_clip(a, 150)}" for u, a in texts[:5])
        ans = self.llm.ask(prompts.NAME_SYSTEM, prompts.NAME_USER.format(text=body), prompts.NAME_SCHEMA, "name")
        name = clean_name(ans.get("name", ""))
        if not name:
            raise LLMError("the model gave no topic name")
        return name

    def summarize(self, texts: list[tuple[str, str]]) -> str:
        body = "\n".join(f"User: {_clip(u, 200)}\nAssistant: {_clip(a, 200)}" for u, a in texts[:6])
        ans = self.llm.ask(prompts.SUMMARY_SYSTEM, prompts.SUMMARY_USER.format(text=body), prompts.SUMMARY_SCHEMA,
                           "summary")
        summary = " ".join(str(ans.get("summary", "")).split())
        if not summary:
            raise LLMError("the model gave an empty summary")
        return summary[:600]

    def approve_merge(self, a: TopicDigest, b: TopicDigest) -> tuple[bool, str]:
        ans = self.llm.ask(
            prompts.MERGE_SYSTEM,
            prompts.MERGE_USER.format(name_a=a.name, summary_a=_clip(a.summary, 300), name_b=b.name,
                                      summary_b=_clip(b.summary, 300)),
            prompts.MERGE_SCHEMA,
            "merge",
        )
        merge = ans.get("merge")
        if isinstance(merge, str):
            merge = {"true": True, "yes": True, "false": False, "no": False}.get(merge.strip().lower())
        if not isinstance(merge, bool):
            raise LLMError(f"the model answered {described(ans)} instead of true/false")
        return merge, "the model " + ("agreed" if merge else "vetoed")


@dataclass
class Judges:
    """The judge panel of a tree: mode, the two judges, and the fallback rule."""

    mode: str  # "embedding" | "llm" | "auto"
    embedding: EmbeddingJudge = field(default_factory=EmbeddingJudge)
    llm: LLMJudge | None = None
    on_llm_failure: Callable[[str, str], None] = lambda task, problem: None

    given_up: threading.Event = field(default_factory=threading.Event)  # give_up_llm(): no more waiting

    def __post_init__(self) -> None:
        if self.mode not in ("embedding", "llm", "auto"):
            raise ValueError(f"judge must be 'llm', 'embedding' or 'auto', not {self.mode!r}")

    GIVEN_UP = "not waited for: the memory model was given up (the app is closing)"

    def _asked(self, call: Callable):
        """``call()`` (an LLM request), unless the LLM was given up before or during it:
        then ``LLMError`` at once and the caller falls back to the embedding judge. An app
        closing stored nothing while add() waited up to the LLM's timeout (30 s) for a
        placement; the process ended first, and the reply was lost (a trial)."""
        try:  # a given-up request runs on, and its answer is dropped
            return call_abandonable(call, give_up=self.given_up.is_set, name="llm-judge")
        except Abandoned:
            raise LLMError(self.GIVEN_UP) from None

    @property
    def uses_llm(self) -> bool:
        return self.mode != "embedding" and self.llm is not None

    def place(self, ctx: PlacementContext) -> Placement:
        fallback = self.embedding.place(ctx)
        if not self.uses_llm:
            return fallback
        if self.mode == "auto" and fallback.confident:
            fallback.reason += " (clear-cut: no LLM call)"
            return fallback
        try:
            return self._asked(lambda: self.llm.place(ctx))
        except LLMError as exc:
            self.on_llm_failure("placement", exc.problem)
            fallback.reason = f"LLM failed ({exc.problem}); {fallback.reason}"
            return fallback

    def _llm_or(self, task: str, llm_call: Callable, fallback: Callable):
        # names and summaries go to the LLM only in "llm" mode: "auto" keeps LLM calls
        # for the doubtful placements, where they change the tree
        if self.mode == "llm" and self.llm is not None:
            try:
                return self._asked(llm_call)
            except LLMError as exc:
                self.on_llm_failure(task, exc.problem)
        return fallback()

    def name_topic(self, texts: list[tuple[str, str]], weights: Sequence[float] | None = None) -> str:
        """A name for these texts; ``weights`` (one per text, e.g. a subtopic's exchange
        count) say how much of the topic each is. The LLM reads the heaviest first."""
        return self._llm_or("name", lambda: self.llm.name_topic(_heaviest_first(texts, weights)),
                            lambda: self.embedding.name_topic(texts, weights))

    def name_group(self, names: Sequence[str], weights: Sequence[float]) -> str:
        """A group's name: the LLM names it from its parts' names (heaviest first) in
        "llm" mode; otherwise the parts' names side by side."""
        return self._llm_or("name", lambda: self.llm.name_topic(_heaviest_first([(n, "") for n in names], weights)),
                            lambda: self.embedding.name_group(names, weights))

    def summarize(self, texts: list[tuple[str, str]]) -> str:
        return self._llm_or("summary", lambda: self.llm.summarize(texts), lambda: self.embedding.summarize(texts))

    def approve_merge(self, a: TopicDigest, b: TopicDigest, embed) -> tuple[bool, str, str]:
        """``(approve, reason, judge)``."""
        if self.uses_llm:
            try:
                ok, why = self._asked(lambda: self.llm.approve_merge(a, b))
                return ok, why, "llm"
            except LLMError as exc:
                self.on_llm_failure("merge veto", exc.problem)
        ok, why = self.embedding.approve_merge(a, b, embed)
        return ok, why, "embedding"

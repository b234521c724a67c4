"""Stage 3, budgeted selection: which candidate messages fit the token budget, and which
earlier exchanges a later one updated (newer supersedes older)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence

import numpy as np

from .. import prompts
from ..nodes import MessageNode
from ..textutil import STOPWORDS, words
from ..tokens import count_tokens
from .rendering import ARCHIVED, BlockLayout

# words that mark a statement as a correction of an earlier one. Only strong ones: in
# chat "actually", "any more paintings?", "keep you updated" and "not much has changed"
# are everywhere, and a wrong [superseded] tells the model to disregard a true fact
# (the dates on the block's lines still say which of two facts is newer)
UPDATE_CUES = re.compile(
    r"\b(?:no longer|no more|changed my mind|correction|from now on|actually,|postponed|rescheduled|pushed back)"
    r"|\bmoved\b[^.!?]{0,30}?\b(?:to|until)\b"
    r"|(?:\bnot|n't)\b[^.!?]{0,40}?\bany ?more\b"
    r"|\bturn(?:s|ed) out (?:that|i|we|he|she|they|it|my|the)\b"
    # the same corrections in German, French and Spanish ("Eigentlich wurde meine Frist auf
    # den 2. April verschoben" was tagged neither way: a trial)
    r"|\bkein\w*\s+(?:\w+\s+){0,2}mehr\b|\b(?:nicht mehr|verschoben|verlegt|korrektur|ab sofort|ab jetzt|anders entschieden"
    r"|umentschieden|eigentlich doch)\b"
    r"|\b(?:en fait,|finalement,|reporté\w*|repoussé\w*|décalé\w*|désormais|dorénavant|changé d'avis)"
    r"|\bn(?:e |')\w+ (?:plus|pas plus)\b"
    r"|\b(?:ya no|en realidad,|pospuest\w*|aplazad\w*|cambi\w* de opinión|a partir de ahora|corrección)",
    re.I,
)


# cosines within this of a correction's closest earlier exchange are corrected with it (a
# fact said twice); farther ones are other facts of the same subject
CLOSEST_MARGIN = 0.1


def subject_words(text: str) -> frozenset[str]:
    """The words a correction and the fact it corrects can share: no stop words, four
    letters at least."""
    return frozenset(w for w in words(text) if len(w) >= 4 and w not in STOPWORDS)


class Supersessions:
    """Which exchanges were corrected by a later one: an exchange that reads as a
    correction (a cue such as "no longer" or "Actually,"), is live, and is similar
    (cosine ≥ ``similarity``). Which exchanges read as updates is cached by exchange, and
    read again when the tree's text changed (``revision``: a replace or a forget)."""

    def __init__(self, similarity: float, shared_similarity: float | None = None) -> None:
        self.similarity = similarity
        # from this cosine when the correction names a subject word of the older exchange
        # ("Actually, my deadline moved to Friday" and "My project deadline is Wednesday":
        # 0.52, under 0.65, in a trial); None: the one threshold
        self.shared_similarity = similarity if shared_similarity is None else min(shared_similarity, similarity)
        self.cues = np.zeros(0, dtype=bool)  # by exchange index: reads as an update
        self._words: list[frozenset[str]] = []  # by exchange index: its subject words
        self._where: dict[str, list[int]] = {}  # word -> the exchanges that use it, in order
        self._cue_words: dict[int, frozenset[str]] = {}  # update -> the subject words of its cue messages
        self._revision = 0  # the tree's text revision the caches were read at

    def update_cues(self, exchanges: Sequence[MessageNode], revision: int = 0) -> np.ndarray:
        """Which exchanges read as updates (a view: new exchanges are read once, all again
        at a new ``revision``: an exchange edited into "Actually, …" corrected nothing)."""
        if revision != self._revision:
            self.cues = np.zeros(0, dtype=bool)
            self._words, self._where, self._cue_words = [], {}, {}
            self._revision = revision
        n = len(exchanges)
        if n > len(self.cues):
            new = [bool(UPDATE_CUES.search(f"{x.user} {x.assistant}")) for x in exchanges[len(self.cues):n]]
            self.cues = np.concatenate([self.cues, np.array(new, dtype=bool)])
        if self.shared_similarity < self.similarity and n > len(self._words):
            for k in range(len(self._words), n):
                x = exchanges[k]
                words_k = subject_words(f"{x.user} {x.assistant}")
                self._words.append(words_k)
                for w in words_k:
                    self._where.setdefault(w, []).append(k)
        return self.cues[:n]

    def _shares_a_subject(self, old: MessageNode, update: MessageNode) -> bool:
        """The correction names a word of the older exchange that few exchanges used up to
        it (the speakers' names, in a transcript, are in every one). Counted up to the
        correction, not to now: asking about the deadline since must not undo it (a trial)."""
        j = update.index
        cue = self._cue_words.get(j)
        if cue is None:
            cue = self._cue_words[j] = subject_words(" ".join(
                m.get("content") or "" for m in update.messages if UPDATE_CUES.search(m.get("content") or "")))
        rare = max(3, (j + 1) // 20)
        return any(bisect.bisect_right(self._where[w], j) <= rare for w in cue & self._words[old.index])

    def find(self, candidates: list[int], exchanges: Sequence[MessageNode],
             vector_of: Callable[[int], np.ndarray], updates: set[int] | None = None,
             message_vector: Callable[[int, str], np.ndarray | None] | None = None,
             revision: int = 0) -> dict[int, list[int]]:
        """``newer``: exchange -> the later exchanges that updated it, for ``candidates``
        (``pair_status`` tags the pairs a block shows). With ``updates``, only those can
        be the update: retrieval passes its candidates, since chat is full of "actually"
        and "keep you updated", and an update about something else only spends the budget.
        With ``message_vector`` ((exchange, role) -> unit vector or None), the message
        that holds the cue must itself be close to a message of the older exchange: an
        exchange's vector mixes two speakers, and one's "actually" updates nothing the
        other said on another subject."""
        cues = self.update_cues(exchanges, revision)
        among = np.flatnonzero(cues) if updates is None else [j for j in sorted(updates) if cues[j]]
        upd = [int(j) for j in among if not exchanges[j].archived]
        newer: dict[int, list[int]] = {}
        if not upd or not candidates:
            return newer
        olds = [i for i in sorted(set(candidates)) if not exchanges[i].archived]
        if not olds:
            return newer
        sims = np.array([vector_of(i) for i in olds]) @ np.array([vector_of(j) for j in upd]).T
        if message_vector is not None:
            sims = np.minimum(sims, self._message_sims(olds, upd, exchanges, message_vector, sims))
        # a later update, similar enough: one comparison over the whole matrix
        later = np.array(upd)[None, :] > np.array(olds)[:, None]
        pairs = [(int(a), int(b)) for a, b in zip(*np.nonzero(later & (sims >= self.similarity)))]
        if self.shared_similarity < self.similarity:  # closer pairs that share a subject word
            for a, b in zip(*np.nonzero(later & (sims >= self.shared_similarity) & (sims < self.similarity))):
                if self._shares_a_subject(exchanges[olds[int(a)]], exchanges[upd[int(b)]]):
                    pairs.append((int(a), int(b)))
        # a correction corrects what it is closest to: "Actually, my flight to Lisbon moved to
        # Friday" also marked the trip's plan ("a trip to Lisbon with Jonas in March", 0.60
        # against the flight's 0.79) superseded, and the model was told to disregard it (a trial)
        best: dict[int, float] = {}
        for a, b in pairs:
            best[b] = max(best.get(b, -1.0), float(sims[a, b]))
        for a, b in sorted(pairs):
            if sims[a, b] >= best[b] - CLOSEST_MARGIN:
                newer.setdefault(olds[a], []).append(upd[b])
        return newer

    @staticmethod
    def _message_sims(olds: list[int], upd: list[int], exchanges: Sequence[MessageNode],
                      message_vector: Callable[[int, str], np.ndarray | None], fallback: np.ndarray) -> np.ndarray:
        """For each (older, update) pair, the best cosine of a cue message of the update to
        a message of the older exchange (the exchange-level cosine where a vector is missing)."""
        out = fallback.copy()
        rows, owner = [], []
        for a, i in enumerate(olds):
            for m in exchanges[i].messages:
                v = message_vector(i, m["role"])
                if v is not None:
                    rows.append(v)
                    owner.append(a)
        if not rows:
            return out
        old_mat, owner_arr = np.array(rows), np.array(owner)
        for b, j in enumerate(upd):
            cue_vecs = [v for m in exchanges[j].messages if UPDATE_CUES.search(m.get("content") or "")
                        for v in [message_vector(j, m["role"])] if v is not None]
            if not cue_vecs:
                continue
            best = (old_mat @ np.array(cue_vecs).T).max(axis=1)
            col = np.full(len(olds), -1.0)
            np.maximum.at(col, owner_arr, best)
            have = np.zeros(len(olds), dtype=bool)
            have[owner_arr] = True
            out[have, b] = col[have]
        return out


def pair_status(taken: set[int], newer: dict[int, list[int]]) -> dict[int, str]:
    """The tags of ``taken`` exchanges: ``"superseded"`` for one whose update is also
    taken, ``"current"`` for that update (a tag with no partner shown says nothing)."""
    status: dict[int, str] = {}
    for i, js in newer.items():
        if i in taken and any(j in taken for j in js):
            status[i] = "superseded"
    for i, js in newer.items():
        if i in taken:
            for j in js:
                if j in taken:
                    status.setdefault(j, "current")  # an update that was itself updated stays superseded
    return status


def select(queue: list[tuple[int, str]], budget: int, newer: dict[int, list[int]],
           layout: BlockLayout) -> list[tuple[int, str]]:
    """Greedy by rank: take messages while their line (and a new branch header, a new
    date line) fit. An exchange that was corrected later brings its correction right
    after it (``newer``: corrections that are candidates of the question); when both of
    a pair are taken, their tags are paid for."""
    used = count_tokens(prompts.MEMORY_HEADER) + 1
    branches: set[str] = set()
    days: set[tuple[str, str]] = set()  # (branch, date) lines already paid for
    chosen: list[tuple[int, str]] = []
    taken: set[tuple[int, str]] = set()
    tagged: set[int] = set()  # exchanges whose tag is paid for
    partners = {i: set(js) for i, js in newer.items()}
    for i, js in newer.items():
        for j in js:
            partners.setdefault(j, set()).add(i)
    tag_cost = count_tokens("[superseded] ")
    queue = list(queue)
    pos = 0
    misses = 0
    while pos < len(queue) and budget - used >= 12 and misses < 40:
        i, role = queue[pos]
        pos += 1
        if (i, role) in taken or not layout.text(i, role):
            continue
        cost = count_tokens(layout.line(i, [role])) + 1
        topic = layout.branch(i)
        bid = topic.node_id if topic is not None else ARCHIVED
        if bid not in branches:
            cost += count_tokens(layout.header(topic)) + 1
        day = (bid, layout.day(i))
        if day not in days:
            cost += count_tokens(layout.date_line(i)) + 1
        # tags are paid for once both of a pair are in: this line's, and the lines already
        # taken of each exchange the pair tags now; the note once, with the first pair
        newly: set[int] = set()
        if i not in tagged and i in partners:
            shown = {x for x, _ in taken}
            if partners[i] & shown:
                newly = ({i} | (partners[i] & shown)) - tagged
        if i in tagged or newly:
            cost += tag_cost * (1 + sum(1 for x, _ in taken if x in newly))
        if newly and not tagged:
            cost += count_tokens(" " + prompts.SUPERSEDED_NOTE)
        if used + cost > budget:
            misses += 1
            continue  # a shorter message further down may still fit
        chosen.append((i, role))
        taken.add((i, role))
        tagged |= newly
        used += cost
        branches.add(bid)
        days.add(day)
        follow = [(j, m["role"]) for j in newer.get(i, []) for m in layout.exchanges[j].messages]
        partner = layout.partner(i, role)
        if partner is not None:
            follow.insert(0, (i, partner))
        queue[pos:pos] = [u for u in follow if u not in taken]
    return chosen

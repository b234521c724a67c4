"""Stage 3, budgeted selection: which candidate messages fit the token budget, and which
earlier exchanges a later one updated (newer supersedes older)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from .. import prompts
from ..nodes import MessageNode
from ..tokens import count_tokens
from .rendering import ARCHIVED, BlockLayout

# words that mark a statement as an update of an earlier one
UPDATE_CUES = re.compile(
    r"\b(actually|anymore|any more|no longer|changed|update|updated|instead|turns out|correction|"
    r"from now on|can now|now can|not any ?more|no more)\b",
    re.I,
)


class Supersessions:
    """Which exchanges were updated by a later one: an exchange that reads as an update
    (a cue such as "actually" or "no longer"), is live, and is similar (cosine ≥
    ``similarity``). Updates are few; which exchanges are updates, and their vectors,
    are cached (exchanges never change text)."""

    def __init__(self, similarity: float) -> None:
        self.similarity = similarity
        self.cues: list[bool] = []  # by exchange index: reads as an update
        self.matrix_key: tuple[int, int] | None = None
        self.matrix = np.zeros((0, 0), dtype=np.float32)

    def update_cues(self, exchanges: Sequence[MessageNode]) -> np.ndarray:
        for x in exchanges[len(self.cues):]:
            self.cues.append(bool(UPDATE_CUES.search(f"{x.user} {x.assistant}")))
        return np.array(self.cues[: len(exchanges)], dtype=bool)

    def find(self, candidates: list[int], exchanges: Sequence[MessageNode],
             vector_of: Callable[[int], np.ndarray]) -> tuple[dict[int, list[int]], dict[int, str]]:
        """``newer`` (exchange -> the later exchanges that updated it) among ``candidates``,
        and each one's status: ``"superseded"`` or ``"current"``."""
        upd = [int(j) for j in np.flatnonzero(self.update_cues(exchanges)) if not exchanges[j].archived]
        newer: dict[int, list[int]] = {}
        if upd and candidates:
            key = (len(upd), upd[-1])
            if self.matrix_key != key:
                self.matrix = np.array([vector_of(j) for j in upd])
                self.matrix_key = key
            olds = sorted(set(candidates))
            sims = np.array([vector_of(i) for i in olds]) @ self.matrix.T
            # a later update, similar enough: one comparison over the whole matrix
            later = np.array(upd)[None, :] > np.array(olds)[:, None]
            for a, b in zip(*np.nonzero(later & (sims >= self.similarity))):
                i = olds[int(a)]
                if not exchanges[i].archived:
                    newer.setdefault(i, []).append(upd[int(b)])
        status: dict[int, str] = {}
        for i in newer:
            status[i] = "superseded"
        for js in newer.values():
            for j in js:
                status.setdefault(j, "current")  # an update that was itself updated stays superseded
        return newer, status


def select(queue: list[tuple[int, str]], budget: int, newer: dict[int, list[int]], status: dict[int, str],
           layout: BlockLayout) -> list[tuple[int, str]]:
    """Greedy by rank: take messages while their line (and a new branch header, a new
    date line) fit. An exchange that was updated later brings its update right after it."""
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
        if (i, role) in taken or not layout.text(i, role):
            continue
        cost = count_tokens(layout.line(i, [role], status.get(i, ""))) + 1
        if status.get(i) and not noted:
            cost += count_tokens(" " + prompts.SUPERSEDED_NOTE)
        topic = layout.branch(i)
        bid = topic.node_id if topic is not None else ARCHIVED
        if bid not in branches:
            cost += count_tokens(layout.header(topic)) + 1
        day = (bid, layout.day(i))
        if day not in days:
            cost += count_tokens(layout.date_line(i)) + 1
        if used + cost > budget:
            misses += 1
            continue  # a shorter message further down may still fit
        chosen.append((i, role))
        taken.add((i, role))
        noted = noted or bool(status.get(i))
        used += cost
        branches.add(bid)
        days.add(day)
        follow = [(j, m["role"]) for j in newer.get(i, []) for m in layout.exchanges[j].messages]
        queue[pos:pos] = [u for u in follow if u not in taken]
    return chosen

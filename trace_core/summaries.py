"""Topic summaries: written when a topic leaves the active path (it freezes), refreshed
when its content changed, and the vectors topics are indexed under."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .embedders import Embedder, normalise
from .judges import Judges
from .model import TreeModel
from .nodes import TopicNode


class Summaries:
    """Handed the tree model, the judges (who write names and summaries) and the embedder.
    ``llm_summaries``: summaries are written by an LLM (judge ``"llm"``), not extracted."""

    def __init__(self, model: TreeModel, judges: Judges, embedder: Callable[[], Embedder], llm_summaries: bool) -> None:
        self.model = model
        self.judges = judges
        self.embedder = embedder
        self.llm_summaries = llm_summaries

    def summarize(self, topics: Iterable[TopicNode]) -> None:
        for t in topics:
            t.summary = self.judges.summarize(self.model.texts(t))
            self.model.stale.discard(t)

    def freeze(self, old_path, new_path, new_topics) -> list[TopicNode]:
        """Summarise topics that just left the active path (or were created off it)."""
        on_path = set(new_path)
        root, stale = self.model.root, self.model.stale
        candidates = [t for t in list(old_path) + list(new_topics) if t not in on_path and t is not root]
        frozen = [t for t in dict.fromkeys(candidates) if t.parent is not None and (t in stale or not t.summary)]
        self.summarize(frozen)
        return frozen

    def refresh_frozen(self) -> list[TopicNode]:
        """Summarise, in memory, frozen topics whose content changed (new topics too)."""
        path = set(self.model.active_path())
        root, stale = self.model.root, self.model.stale
        todo = [t for t in root.iter_topics() if t is not root and t not in path and (t in stale or not t.summary)]
        self.summarize(todo)
        return todo

    def refresh_all(self) -> list[TopicNode]:
        """Summarise every topic whose summary is missing or out of date."""
        root, stale = self.model.root, self.model.stale
        todo = [t for t in root.iter_topics() if t is not root and (t in stale or not t.summary)]
        self.summarize(todo)
        return todo

    def vectors(self, topics: list[TopicNode]) -> np.ndarray:
        """The vectors topics are indexed under in ``topic_summaries``.

        With LLM-written summaries: the summary's embedding blended with the centroid of
        the topic's exchanges. With extractive summaries (embedding and auto judges) the
        summary is a few of those exchanges' own sentences, so the centroid alone
        represents the topic better, and costs no embedding call inside ``add()``.
        """
        centroids = np.array([self.model.vectors.node(t) for t in topics], dtype=np.float32)
        if not self.llm_summaries:
            return centroids
        texts = self.embedder().embed_batch([f"{t.topic_name}. {t.summary}" for t in topics])
        return normalise(texts + centroids)

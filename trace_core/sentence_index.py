"""The idle-time sentence index: each longer message's sentences, and each message read
after the one it answers (``textutil.message_parts``), embedded and stored for retrieval."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from .embedders import Embedder, normalise
from .model import TreeModel
from .nodes import MessageNode
from .store import VectorDatabase, message_id
from .textutil import message_parts


def previous_text(model: TreeModel, x: MessageNode, m: dict) -> str:
    """What a message answers: the message before it in the conversation."""
    if m["role"] == "assistant":
        return x.user
    if m["role"] == "user" and x.index > 0:
        return model.exchanges[x.index - 1].assistant
    return ""


class SentenceIndex:
    """Handed the tree model, the store, the embedder and the tree's lock."""

    def __init__(self, model: TreeModel, db: VectorDatabase, embedder: Callable[[], Embedder],
                 lock: threading.RLock) -> None:
        self.model = model
        self.db = db
        self.embedder = embedder
        self.lock = lock

    def indexed(self) -> int:
        """How many exchanges, from the first, have their parts in the store."""
        return int(self.db.get_meta("parts_indexed") or 0)

    def pending(self) -> int:
        return len(self.model.exchanges) - self.indexed()

    def run(self, max_exchanges: int | None = None, batch: int = 32) -> int:
        """Embed the parts of exchanges not done yet, ``batch`` at a time (embedding outside
        the lock); returns how many exchanges were done."""
        model = self.model
        done = 0
        while max_exchanges is None or done < max_exchanges:
            with self.lock:
                start = self.indexed()
                stop = min(len(model.exchanges), start + batch)
                if max_exchanges is not None:
                    stop = min(stop, start + max_exchanges - done)
                todo = [(message_id(x.index, m["role"]), message_parts(m["content"], previous_text(model, x, m)))
                        for x in model.exchanges[start:stop] for m in x.messages]
            if stop <= start:
                break
            rows = self._embedded(todo)  # outside the lock
            with self.lock, self.db.transaction():
                if self.indexed() != start:
                    continue  # another thread did this batch meanwhile
                self.db.add_message_parts(rows)
                self.db.set_meta("parts_indexed", str(stop))
            done += stop - start
        return done

    def _embedded(self, todo: list[tuple[str, list[str]]]) -> list[tuple[str, int, str, np.ndarray]]:
        """``(message id, parts)`` as the store's rows, each part embedded."""
        texts = [t for _, parts in todo for t in parts]
        vecs = self.embedder().embed_batch(texts) if texts else []
        rows, k = [], 0
        for mid, parts in todo:
            for p, t in enumerate(parts):
                rows.append((mid, p, t, normalise(vecs[k])))
                k += 1
        return rows

    def redo(self, units: list[tuple[MessageNode, str]]) -> None:
        """The parts of these messages (exchange, role) made again, for those indexed
        already (the message they answer was forgotten); the rest wait for ``run``."""
        with self.lock:
            done = self.indexed()
            todo = [(message_id(x.index, role), message_parts(x.role_text(role), previous_text(self.model, x, {"role": role})))
                    for x, role in units if x.index < done and not x.archived]
        rows = self._embedded(todo)
        with self.lock, self.db.transaction():
            self.db.add_message_parts(rows)

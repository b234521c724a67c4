"""An in-memory matrix of unit vectors for cosine search (the database is the truth)."""

from __future__ import annotations

import threading

import numpy as np

PROJECTED_DIM = 96  # principal axes of the first pass (MiniLM: 90% of the rows' energy)
SHORTLIST_FACTOR = 10  # rows rescored exactly per row asked for
BASIS_SAMPLE = 20_000  # rows the principal axes are fitted on


def principal_axes(rows: np.ndarray, r: int) -> np.ndarray:
    """The ``r`` leading axes of the rows' second moment (uncentred: inner products are
    what is kept), as columns (dim × r)."""
    step = max(1, len(rows) // BASIS_SAMPLE)
    sample = np.asarray(rows[::step], dtype=np.float64)
    _, vecs = np.linalg.eigh(sample.T @ sample)
    return np.ascontiguousarray(vecs[:, ::-1][:, :r], dtype=np.float32)


class VectorIndex:
    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self.version = 0  # bumped on every change: callers cache what they derive from ids
        # the rows projected onto their principal axes, made on the first approximate
        # search and kept up to date after it
        self._basis: np.ndarray | None = None
        self._low = np.zeros((0, 0), dtype=np.float32)
        # a writer's add() must not fall between the projection's basis and its rows
        self._write = threading.Lock()

    @property
    def ids(self) -> list[str]:
        return self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, key: str) -> bool:
        return key in self._pos

    def _grow(self, need: int) -> None:
        cap = self._matrix.shape[0]
        if need <= cap:
            return
        new = np.zeros((max(need, cap * 2, 64), self.dim), dtype=np.float32)
        new[: len(self._ids)] = self._matrix[: len(self._ids)]
        self._matrix = new
        if self._basis is not None:
            low = np.zeros((new.shape[0], self._basis.shape[1]), dtype=np.float32)
            low[: len(self._ids)] = self._low[: len(self._ids)]
            self._low = low

    def add(self, key: str, vector: np.ndarray) -> None:
        with self._write:
            self._add(key, vector)

    def _add(self, key: str, vector: np.ndarray) -> None:
        vector = np.asarray(vector, dtype=np.float32).ravel()
        if self.dim is None or (self.dim == 0 and not self._ids):
            self.dim = vector.shape[0]
            self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        if vector.shape[0] != self.dim:
            raise ValueError(f"vector has dimension {vector.shape[0]}, the index holds {self.dim}")
        if key in self._pos:
            self._set_row(self._pos[key], vector)
            return
        self.version += 1
        self._grow(len(self._ids) + 1)
        self._set_row(len(self._ids), vector)
        self._pos[key] = len(self._ids)
        self._ids.append(key)

    def _set_row(self, i: int, vector: np.ndarray) -> None:
        self._matrix[i] = vector
        if self._basis is not None:
            self._low[i] = vector @ self._basis

    def remove(self, key: str) -> None:
        with self._write:
            self._remove(key)

    def _remove(self, key: str) -> None:
        i = self._pos.pop(key, None)
        if i is None:
            return
        self.version += 1
        last = len(self._ids) - 1
        if i != last:  # move the last row into the hole
            self._matrix[i] = self._matrix[last]
            if self._basis is not None:
                self._low[i] = self._low[last]
            self._ids[i] = self._ids[last]
            self._pos[self._ids[i]] = i
        self._ids.pop()

    def get(self, key: str) -> np.ndarray | None:
        i = self._pos.get(key)
        return None if i is None else self._matrix[i]

    def scores(self, query: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Cosine of ``query`` (unit) with every row."""
        return list(self._ids), self.similarities(query)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine of ``query`` with every row, in ``ids`` order (no copy of the ids)."""
        n = len(self._ids)
        if n == 0 or self.dim is None:
            return np.zeros(0, dtype=np.float32)
        q = np.asarray(query, dtype=np.float32).ravel()
        if q.shape[0] != self.dim:
            raise ValueError(f"query has dimension {q.shape[0]}, the index holds {self.dim}")
        norm = float(np.linalg.norm(q))
        if norm > 0:
            q = q / norm
        return self._matrix[:n] @ q

    def top(self, query: np.ndarray, k: int, approximate_from: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the ``k`` rows closest to ``query`` (unit) and their cosines,
        in no order. From ``approximate_from`` rows the pass over every row reads them
        projected onto their leading axes (a quarter of the memory: at 200,000 rows the
        exact pass is bound by reading 300 MB), and a shortlist of ``SHORTLIST_FACTOR``
        × ``k`` rows is rescored exactly; on MiniLM vectors the true best rows are in it
        (``bench.scale`` measures how many)."""
        n = len(self._ids)
        k = min(k, n)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = np.asarray(query, dtype=np.float32).ravel()
        q = q / (np.linalg.norm(q) or 1.0)
        short = k * SHORTLIST_FACTOR
        if approximate_from is None or n < max(approximate_from, short) or self.dim is None \
                or self.dim <= PROJECTED_DIM:
            sims = self.similarities(q)
            pos = np.argpartition(sims, n - k)[n - k:] if k < n else np.arange(n)
            return pos, sims[pos]
        basis = self._projection()
        rough = self._low[:n] @ (basis.T @ q)
        shortlist = np.argpartition(rough, n - short)[n - short:]
        exact = self._matrix[shortlist] @ q
        best = np.argpartition(exact, short - k)[short - k:]
        return shortlist[best], exact[best]

    def _projection(self) -> np.ndarray:
        """The principal axes, made once (0.1-0.5 s at 20,000-200,000 rows); the rows'
        projection is complete before any add() sees the basis."""
        with self._write:
            if self._basis is None:
                basis = principal_axes(self._matrix[: len(self._ids)], PROJECTED_DIM)
                self._low = np.ascontiguousarray(self._matrix @ basis)
                self._basis = basis
            return self._basis

    def spread(self, query: np.ndarray, sample: int) -> float:
        """The standard deviation of ``query``'s (unit) cosine with the rows, read on an
        even sample of about ``sample`` of them (a strided view: no copy)."""
        n = len(self._ids)
        if n == 0:
            return 0.0
        rows = self._matrix[:n:max(1, n // sample)]
        return float((rows @ np.asarray(query, dtype=np.float32).ravel()).std())

    def rows(self, positions) -> np.ndarray:
        """The vectors at these positions (in ``ids`` order)."""
        return self._matrix[np.asarray(positions, dtype=np.int64)]

    def search(self, query: np.ndarray, top_k: int, min_similarity: float) -> list[tuple[str, float]]:
        ids, sims = self.scores(query)
        if not ids:
            return []
        k = min(top_k, len(ids))
        idx = np.argpartition(-sims, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
        idx = idx[np.argsort(-sims[idx])]
        return [(ids[i], float(sims[i])) for i in idx if sims[i] >= min_similarity]

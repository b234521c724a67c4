"""Similar pairs among topic vectors, blockwise (the pair phase of a reorganisation)."""

from __future__ import annotations

import numpy as np


def similar_pairs(vectors: np.ndarray, threshold: float, block: int = 1024,
                  max_per_row: int | None = None) -> list[tuple[int, int, float]]:
    """All ``i < j`` with cosine ≥ threshold, best first; blockwise so 10,000 topics never
    need a 10,000 × 10,000 matrix at once. With ``max_per_row``, only each topic's
    nearest ``max_per_row`` neighbours are kept: merges chain through them, and a
    history of near-duplicates no longer yields millions of pairs."""
    n = len(vectors)
    out_i, out_j, out_s = [], [], []
    for start in range(0, n, block):
        sims = vectors[start : start + block] @ vectors.T
        rows_n = sims.shape[0]
        sims[np.arange(rows_n), np.arange(start, start + rows_n)] = -np.inf  # not with itself
        if max_per_row is not None and max_per_row < n - 1:
            top = np.argpartition(-sims, max_per_row - 1, axis=1)[:, :max_per_row]
            rows = np.repeat(np.arange(rows_n), max_per_row)
            cols = top.ravel()
            keep = sims[rows, cols] >= threshold
            rows, cols = rows[keep], cols[keep]
        else:
            rows, cols = np.nonzero(sims >= threshold)
        s = sims[rows, cols]
        i, j = rows + start, cols
        lo, hi = np.minimum(i, j), np.maximum(i, j)
        out_i.append(lo)
        out_j.append(hi)
        out_s.append(s)
    if not out_i:
        return []
    i, j, s = np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s)
    if len(i) == 0:
        return []
    # each pair once (it may come from both of its rows)
    key = i.astype(np.int64) * n + j
    _, first = np.unique(key, return_index=True)
    i, j, s = i[first], j[first], s[first]
    order = np.lexsort((j, i, -s))
    return [(int(i[k]), int(j[k]), float(s[k])) for k in order]

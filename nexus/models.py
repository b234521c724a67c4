"""Loading and unloading models, one backend per server kind.

- LM Studio: native REST ``GET /api/v1/models`` (loaded instances, vision capability),
  ``POST /api/v1/models/load``, ``POST /api/v1/models/unload`` (by instance id).
- Ollama: ``GET /api/ps``; load with an empty ``/api/generate``; unload with ``keep_alive: 0``.
- Any other OpenAI-compatible server: no load control; the vision model is simply named
  in the request.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from . import events as ev
from .abandon import Abandoned, call_abandonable, start_detached


class ModelError(RuntimeError):
    pass


@dataclass
class Loaded:
    key: str
    instance: str
    vision: bool = False


def _root(base_url: str) -> str:
    u = urlsplit(base_url)
    return f"{u.scheme}://{u.netloc}"


def _http(method: str, url: str, body: dict | None = None, timeout: float = 30.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:200]
        raise ModelError(f"{method} {url} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise ModelError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        raise ModelError(f"{url} answered something that is not JSON") from None


class NoLoadControl:
    kind = "openai"

    def __init__(self, base_url: str, timeout: float = 180) -> None:
        self.base_url = base_url

    def loaded(self) -> list[Loaded]:
        return []

    def load(self, key: str) -> str:
        return key

    def unload(self, item: Loaded) -> None:
        pass


class LMStudioBackend:
    kind = "lmstudio"

    def __init__(self, base_url: str, timeout: float = 180) -> None:
        self.root = _root(base_url)
        self.timeout = timeout

    def catalogue(self) -> list[dict]:
        return _http("GET", f"{self.root}/api/v1/models", timeout=10).get("models", [])

    def loaded(self) -> list[Loaded]:
        out = []
        for m in self.catalogue():
            for inst in m.get("loaded_instances", []) or []:
                out.append(Loaded(m.get("key", ""), inst.get("id", m.get("key", "")),
                                  bool((m.get("capabilities") or {}).get("vision"))))
        return out

    def load(self, key: str) -> str:
        ans = _http("POST", f"{self.root}/api/v1/models/load", {"model": key}, timeout=self.timeout)
        return ans.get("instance_id") or key

    def unload(self, item: Loaded) -> None:
        _http("POST", f"{self.root}/api/v1/models/unload", {"instance_id": item.instance}, timeout=self.timeout)


class OllamaBackend:
    kind = "ollama"

    def __init__(self, base_url: str, timeout: float = 180) -> None:
        self.root = _root(base_url)
        self.timeout = timeout

    def loaded(self) -> list[Loaded]:
        models = _http("GET", f"{self.root}/api/ps", timeout=10).get("models", [])
        return [Loaded(m.get("name") or m.get("model", ""), m.get("name") or m.get("model", "")) for m in models]

    def load(self, key: str) -> str:
        _http("POST", f"{self.root}/api/generate", {"model": key}, timeout=self.timeout)
        return key

    def names(self) -> list[str]:
        """The models it has (``GET /api/tags``), loaded or not."""
        return [m.get("name") or m.get("model", "") for m in _http("GET", f"{self.root}/api/tags", timeout=10)
                .get("models", []) if isinstance(m, dict)]

    def unload(self, item: Loaded) -> None:
        _http("POST", f"{self.root}/api/generate", {"model": item.key, "keep_alive": 0}, timeout=self.timeout)


BACKENDS = {"lmstudio": LMStudioBackend, "ollama": OllamaBackend, "openai": NoLoadControl}


def detect(base_url: str, kind: str = "auto", timeout: float = 180):
    """The backend for ``base_url``: configured, or probed (LM Studio's REST API, then Ollama's)."""
    if kind and kind != "auto":
        if kind not in BACKENDS:
            raise ModelError(f"server kind must be auto, lmstudio, ollama or openai, not {kind!r}")
        return BACKENDS[kind](base_url, timeout)
    root = _root(base_url)
    for probe, cls in ((f"{root}/api/v1/models", LMStudioBackend), (f"{root}/api/ps", OllamaBackend)):
        try:
            ans = _http("GET", probe, timeout=3)
        except ModelError:
            continue
        if isinstance(ans.get("models"), list):
            return cls(base_url, timeout)
    return NoLoadControl(base_url, timeout)


def same_model(listed: str, named: str) -> bool:
    """Whether the server's ``listed`` name is the model ``named``: Ollama lists
    "llama3.2:latest" for "llama3.2" (the README's own example), so the text model was
    never unloaded for the vision model, both held in memory at once (a trial)."""
    return listed == named or (":" not in named and listed == f"{named}:latest")


class ModelManager:
    def __init__(self, backend, emit: Callable[[object], None] = lambda e: None) -> None:
        self.backend = backend
        self.emit = emit
        # why the last swap back left the text model unloaded ("" when it is back): the
        # caller's summary said "loaded again" beside the log's "could not restore" (a trial)
        self.not_restored = ""

    def _step(self, name: str, fn, *args, give_up=lambda: False, emit=None):
        emit = emit or self.emit
        started = time.perf_counter()
        try:
            result = call_abandonable(fn, *args, give_up=give_up, name=f"model: {name}")
        except Abandoned:
            emit(ev.ModelStep(name, time.perf_counter() - started, False, "given up: Nexus is closing"))
            raise
        except ModelError as exc:
            emit(ev.ModelStep(name, time.perf_counter() - started, False, str(exc)))
            raise
        emit(ev.ModelStep(name, time.perf_counter() - started))
        return result

    @contextmanager
    def vision(self, text_model: str, vision_model: str, give_up=lambda: False):
        """Unload the text model, load the vision model, yield, then swap back. The text
        model is loaded again whatever happened inside. ``give_up()`` true (Nexus is
        closing): no step is waited for, and the swap back runs on in a daemon thread."""
        b = self.backend
        self.not_restored = ""
        if isinstance(b, NoLoadControl):
            self.emit(ev.ModelStep(f"no load control on this server: asking {vision_model} directly"))
            yield
            return
        loaded = self._step("list loaded models", b.loaded, give_up=give_up)
        text_instances = [m for m in loaded if same_model(m.key, text_model)]
        vision_loaded = [m for m in loaded if same_model(m.key, vision_model)]
        if text_model == vision_model or vision_loaded:
            # nothing to swap: a vision model as the chat model was unloaded, asked unloaded
            # and unloaded again ("no instance"); one the user loaded was unloaded after
            self.emit(ev.ModelStep(f"{vision_model} is " + ("the chat model" if text_model == vision_model
                                                            else "loaded already") + ": no swap"))
            yield
            return
        try:
            for m in text_instances:
                self._step(f"unload {m.key}", b.unload, m, give_up=give_up)
            if not vision_loaded:  # listed first: never a second instance
                inst = self._step(f"load {vision_model}", b.load, vision_model, give_up=give_up)
                vision_loaded = [Loaded(vision_model, inst, True)]
            yield
        finally:
            if give_up():  # closing: the app (and its event pane) may be gone by the time it ends
                self.emit(ev.ModelStep(f"load {text_model} again: left to finish in the background (Nexus is "
                                       "closing)"))
                start_detached(lambda: self._swap_back(text_model, text_instances, vision_loaded, lambda e: None),
                               name="model: swap back")
            else:  # closing while it runs (a slow load): it goes on alone, its events dropped
                quiet_when_closing = lambda e: None if give_up() else self.emit(e)  # noqa: E731
                try:
                    call_abandonable(self._swap_back, text_model, text_instances, vision_loaded, quiet_when_closing,
                                     give_up=give_up, name="model: swap back")
                except Abandoned:
                    pass

    def _swap_back(self, text_model: str, text_instances: list[Loaded], vision_loaded: list[Loaded], emit) -> None:
        b = self.backend
        errors = []
        for m in vision_loaded:
            try:
                self._step(f"unload {m.key}", b.unload, m, emit=emit)
            except ModelError as exc:
                errors.append(str(exc))
        if text_instances or text_model:
            try:
                now = [m.key for m in self._step("list loaded models", b.loaded, emit=emit)]
                if text_model and not any(same_model(k, text_model) for k in now):
                    self._step(f"load {text_model}", b.load, text_model, emit=emit)
            except ModelError as exc:
                self.not_restored = str(exc)
                errors.append(str(exc))
        if errors:
            what = "restore the text model" if self.not_restored else "unload the vision model"
            emit(ev.Notice(f"could not {what}: " + "; ".join(errors), "error"))

"""A small JSON-answering client for OpenAI-compatible servers.

Structured output differs by server: LM Studio refuses ``json_object`` (400) and
wants ``json_schema``; llama-cpp-python's server refuses ``json_schema`` and wants
``json_object``; others ignore both. We try the strictest mode first, remember per
endpoint what worked, and fall back to plain instructions. One call, no retries: a
failure is reported to the caller, who lets the embedding judge decide.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from .jsonparse import JSONParseError, parse_json_object

DEFAULT_BASE_URL = "http://127.0.0.1:1234/v1"
DEFAULT_API_KEY = "lm-studio"

MODES = ("json_schema", "json_object", "plain")

# endpoint -> first mode that worked there (shared by every client in the process)
_MODE_MEMORY: dict[str, str] = {}
_MODE_LOCK = threading.Lock()


class LLMError(RuntimeError):
    """An LLM call failed. ``problem`` is a sentence a user understands."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


def resolve_endpoint(api_key: str | None, base_url: str | None) -> tuple[str, str]:
    """The TRACE README's fallbacks: argument, then environment, then LM Studio.

    A library leaves its host's environment alone: no ``.env`` is loaded here (Nexus
    reads one in its configuration; a host application loads its own)."""
    key = api_key or os.environ.get("OPENAI_API_KEY") or DEFAULT_API_KEY
    url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    return key, url.rstrip("/")


def api_at_v1(base_url: str, authorization: str | None = None, timeout: float = 2.0) -> str | None:
    """``{base_url}/v1`` when the OpenAI API answers there (``GET /v1/models`` lists a
    model) though ``base_url`` was given without its ``/v1``; else None.

    Asked only after a 404, so a base URL missing its ``/v1`` is said as such rather than
    as "does not know that model or path". The standard library's HTTP (no httpx import:
    see ``nexus.lifecycle.server_models``), one request, ``timeout`` seconds at most."""
    import urllib.request

    base = base_url.rstrip("/")
    if not base or base.endswith("/v1"):
        return None
    headers = {"Authorization": authorization} if authorization else {}
    try:
        req = urllib.request.Request(base + "/v1/models", headers=headers)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if r.status != 200:
                return None
            models = json.loads(r.read(4_000_000)).get("data")
    except Exception:  # a hint only: any failure means no hint
        return None
    return base + "/v1" if isinstance(models, list) and models else None


def without_credentials(url: str) -> tuple[str, str | None]:
    """The URL without a "user:password@" in it, and a Basic ``Authorization`` header for
    them (None without): urllib reads "http://me:pw@host" as a host named "me" (a
    "Name or service not known" at start)."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    pair = ":".join(unquote(p) for p in userinfo.split(":", 1))
    return urlunsplit(parts._replace(netloc=host)), "Basic " + base64.b64encode(pair.encode()).decode()


def shown_url(url: str) -> str:
    """A server address to show or log: never its password (a base URL with "user:pw@"
    showed it in the title bar)."""
    return without_credentials(url)[0]


def client_for(openai_class: Any, api_key: str, base_url: str, timeout: float) -> Any:
    """An OpenAI client for ``base_url``; a "user:password@" in it goes as a Basic
    ``Authorization`` header, never in the URL: httpx logs each request's URL at INFO
    ("HTTP Request: POST http://me:pw@host/…"), and an app that logs INFO got the password."""
    url, basic = without_credentials(base_url)
    return openai_class(api_key=api_key, base_url=url, timeout=timeout, max_retries=0,
                        default_headers={"Authorization": basic} if basic else None)


def describe_error(exc: BaseException, base_url: str) -> str:
    """Turn an openai/httpx exception into words."""
    import openai

    base_url = shown_url(base_url)

    if isinstance(exc, openai.APITimeoutError):
        return f"the model server at {base_url} did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach the model server at {base_url} (is it running?)"
    if isinstance(exc, openai.AuthenticationError):
        return f"the model server at {base_url} refused the API key"
    if isinstance(exc, openai.NotFoundError):
        request = getattr(exc, "request", None)
        v1 = api_at_v1(base_url, request.headers.get("authorization") if request is not None else None)
        if v1:
            return f"the model server at {base_url} answered HTTP 404 — the API is at {v1}: use the base URL {v1}"
        return f"the model server at {base_url} does not know that model or path"
    if isinstance(exc, openai.APIStatusError):
        return f"the model server at {base_url} answered HTTP {exc.status_code}"
    if isinstance(exc, openai.APIError):  # an error event in the middle of a stream ("APIError: …" said)
        return f"the model server at {base_url} reported an error during the reply: {getattr(exc, 'message', exc)}"
    if isinstance(exc, json.JSONDecodeError):  # a streamed chunk that is not JSON
        # the message alone stopped mid-phrase ("Unterminated string starting at": a trial)
        where = f"{'' if exc.msg.endswith(' at') else ' at'} character {exc.pos}"
        # what came, when it is no JSON at all (a page, a server's "error …" line): "expecting value at
        # character 0" said nothing of it; a broken JSON chunk may hold the reply's words: not quoted
        line = " ".join(str(exc.doc).split())
        line = f": “{line[:80]}{'…' if len(line) > 80 else ''}”" if line and not line.startswith(("{", "[")) else ""
        return f"the model server at {base_url} sent a broken reply (not valid JSON: {exc.msg.lower()}{where}{line})"
    return f"{type(exc).__name__}: {exc}"


def completion_content(resp: Any, base_url: str) -> str | None:
    """The text of a non-streamed chat completion. A server that answered something
    else with HTTP 200 (a proxy's web page, an event stream; the openai client then hands
    back the body as a string) raises ``LLMError`` saying so, with the page's words."""
    if not hasattr(resp, "choices"):
        raw = resp.decode("utf-8", "replace") if isinstance(resp, bytes) else str(resp)
        kind = "an event stream" if raw.lstrip().startswith("data:") else "a web page" if "<" in raw else "text"
        words = " ".join(re.sub(r"<[^>]+>", " ", raw).split())[:200]
        raise LLMError(f"the model server at {base_url} answered {kind}, not a completion"
                       + (f": {words}" if words else ""))
    return resp.choices[0].message.content if resp.choices else None


def _refuses_format(exc: Any) -> bool:
    """Did the server reject the ``response_format`` (rather than fail)?

    LM Studio answers 400; llama-cpp-python's server answers 500 with a validation
    error naming ``response_format`` (seen with 0.3.36, whatever its docs say).
    """
    if exc.status_code in (400, 422):
        return True
    text = str(getattr(exc, "body", "") or "") + str(exc)
    return exc.status_code == 500 and "response_format" in text


@dataclass
class LLMStats:
    calls: int = 0
    failures: int = 0
    seconds: float = 0.0


class JSONLLM:
    """Ask a chat model for a JSON object."""

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 30.0,
        max_tokens: int = 96,
    ) -> None:
        from openai import OpenAI  # deferred: importing openai costs ~0.3 s

        self.api_key, self.base_url = resolve_endpoint(api_key, base_url)
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.stats = LLMStats()
        self._client = client_for(OpenAI, self.api_key, self.base_url, timeout)

    def _modes(self) -> list[str]:
        with _MODE_LOCK:
            known = _MODE_MEMORY.get(self.base_url)
        if known:
            return [known] + [m for m in MODES if MODES.index(m) > MODES.index(known)]
        return list(MODES)

    def ask(self, system: str, user: str, schema: dict, name: str = "answer") -> dict:
        """Return the parsed JSON object, or raise ``LLMError``."""
        import openai

        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        last_problem = "no answer"
        for mode in self._modes():
            kwargs: dict = {}
            if mode == "json_schema":
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": schema, "strict": False},
                }
            elif mode == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            started = time.perf_counter()
            self.stats.calls += 1
            try:
                resp = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,
                    max_tokens=self.max_tokens,
                    temperature=0,
                    **kwargs,
                )
            except openai.APIStatusError as exc:
                if kwargs and _refuses_format(exc):
                    # this server does not take this response_format: try the next mode
                    last_problem = describe_error(exc, self.base_url)
                    continue
                self.stats.failures += 1
                raise LLMError(describe_error(exc, self.base_url)) from exc
            except Exception as exc:
                self.stats.failures += 1
                raise LLMError(describe_error(exc, self.base_url)) from exc
            finally:
                self.stats.seconds += time.perf_counter() - started
            with _MODE_LOCK:
                _MODE_MEMORY.setdefault(self.base_url, mode)
            try:
                content = completion_content(resp, self.base_url)
            except LLMError:
                self.stats.failures += 1
                raise
            try:
                return parse_json_object(content or "")
            except JSONParseError as exc:
                self.stats.failures += 1
                raise LLMError(str(exc)) from exc
        # every mode refused: remember the last so we do not repeat three calls each time
        with _MODE_LOCK:
            _MODE_MEMORY.setdefault(self.base_url, MODES[-1])
        self.stats.failures += 1
        raise LLMError(last_problem)

"""The server's own count of a message's tokens, where it can give one.

Budgets use ``trace_core.tokens.count_tokens`` (characters / 4): close for English, half
the truth for Japanese on gemma (0.57 tokens a character) and for long made-up words. A
message the estimate let through was more than the model's context, and the bundled
server answered it with an empty stream (a trial). llama-cpp-python's server, the bundled
one, counts with the model's tokenizer at ``/extras/tokenize/count``; other servers have no
such route and are not asked again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit


class ServerTokenCounter:
    def __init__(self, base_url: str, api_key: str = "", timeout: float = 3.0) -> None:
        u = urlsplit(base_url)
        self.url = f"{u.scheme}://{u.netloc}/extras/tokenize/count"
        self.api_key = api_key
        self.timeout = timeout
        self.available = True  # until the server says it has no such route

    def count(self, text: str, model: str = "") -> int | None:
        """The message's tokens by the model's tokenizer, or None (no such route, a slow
        or unreachable server: the estimate stands)."""
        if not self.available:
            return None
        body = {"input": text, **({"model": model} if model else {})}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                got = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 405, 501):  # LM Studio, Ollama, OpenAI: no tokenizer route
                self.available = False
            return None
        except (urllib.error.URLError, TimeoutError, OSError, ValueError):
            return None
        count = got.get("count") if isinstance(got, dict) else None
        return count if isinstance(count, int) and count >= 0 else None

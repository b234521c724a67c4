"""Web routing before a reply: does the question need current information? If so,
search DuckDuckGo (``ddgs``) and hand the results to the prompt as untrusted data."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from trace_core import prompts

BEGIN, END = "<<<WEB RESULTS (untrusted)>>>", "<<<END WEB RESULTS>>>"

# fast rules: words that mean "now" or things that change
NEEDS_WEB = re.compile(
    r"\b(latest|newest|today|tonight|yesterday|tomorrow|this (?:week|month|year)|right now|current|currently|"
    r"at the moment|news|headlines?|weather|forecast|temperature outside|price|prices|cost of|stock|"
    r"exchange rate|score|who won|election|release[sd]?|version|changelog|announced|breaking|"
    r"20[2-3]\d)\b",
    re.I,
)
# things a web search cannot help with
NO_WEB = re.compile(
    r"(^\s*(hi|hello|hey|thanks|thank you|ok|okay|cool|great)\b|\b(remember|earlier|i told you|i said|"
    r"my name|you said|we discussed|summari[sz]e (?:our|this)|rewrite|translate|refactor|this code)\b|```)",
    re.I,
)


@dataclass
class RouteDecision:
    search: bool
    reason: str
    query: str = ""
    by: str = "rules"  # rules | llm | command | off


@dataclass
class WebResult:
    title: str
    url: str
    snippet: str


class WebSearchError(RuntimeError):
    pass


class WebRouter:
    """Rules first; the memory model answers only the doubtful cases."""

    def __init__(self, ask_llm: Callable[[str], bool] | None = None) -> None:
        self.ask_llm = ask_llm  # question -> bool; raises on failure

    def decide(self, text: str) -> RouteDecision:
        q = text.strip()
        if NO_WEB.search(q):
            return RouteDecision(False, "about the conversation or a greeting")
        m = NEEDS_WEB.search(q)
        if m:
            return RouteDecision(True, f"mentions '{m.group(0)}'", q)
        if len(q.split()) < 4 or not q.endswith("?"):
            return RouteDecision(False, "not a question about the world")
        if self.ask_llm is None:
            return RouteDecision(False, "doubtful; no memory model to ask")
        try:
            yes = self.ask_llm(q)
        except Exception as exc:  # unreachable model: no search, say why
            return RouteDecision(False, f"doubtful; the memory model could not answer ({exc})", by="llm")
        return RouteDecision(bool(yes), "the memory model said " + ("yes" if yes else "no"), q if yes else "", by="llm")


def ddgs_search(query: str, max_results: int, timeout: float, backend: str) -> list[dict]:
    """The real adapter. "No results" is an empty list (ddgs raises on it); any other
    failure (no network, rate limit) raises ``WebSearchError``."""
    try:
        from ddgs import DDGS
        from ddgs.exceptions import DDGSException
    except ImportError as exc:
        raise WebSearchError("the ddgs package is not installed") from exc
    try:
        return list(DDGS(timeout=timeout).text(query, max_results=max_results, backend=backend) or [])
    except DDGSException as exc:
        if "no results" in str(exc).lower():
            return []
        raise WebSearchError(f"web search failed: {exc}") from exc
    except Exception as exc:  # network errors of the HTTP layer
        raise WebSearchError(f"web search failed: {type(exc).__name__}: {exc}") from exc


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x1b]")


def _clean(text: str, limit: int) -> str:
    text = _CONTROL.sub(" ", str(text or ""))
    text = text.replace(BEGIN, "").replace(END, "").replace("<<<", "‹‹‹").replace(">>>", "›››")
    text = " ".join(text.split())
    return text[:limit]


class WebSearch:
    """ddgs behind a time budget and a per-session cache. ``search_fn`` is the adapter
    boundary: tests inject a stub there."""

    def __init__(self, search_fn: Callable[..., list[dict]] = ddgs_search, max_results: int = 5,
                 timeout: float = 8.0, backend: str = "auto") -> None:
        self.search_fn = search_fn
        self.max_results = max_results
        self.timeout = timeout
        self.backend = backend
        self.cache: dict[str, list[WebResult]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="web")

    def search(self, query: str) -> tuple[list[WebResult], float, bool]:
        """``(results, seconds, cached)``; raises ``WebSearchError``."""
        key = " ".join(query.lower().split())
        if key in self.cache:
            return self.cache[key], 0.0, True
        started = time.perf_counter()
        fut = self._pool.submit(self.search_fn, query, self.max_results, self.timeout, self.backend)
        try:
            raw = fut.result(timeout=self.timeout + 1)
        except FutureTimeout:
            raise WebSearchError(f"web search took longer than {self.timeout:.0f} s") from None
        except WebSearchError:
            raise
        except Exception as exc:
            raise WebSearchError(f"web search failed: {exc}") from exc
        results = [WebResult(_clean(r.get("title", ""), 200), _clean(r.get("href") or r.get("url", ""), 300),
                             _clean(r.get("body") or r.get("snippet", ""), 500)) for r in raw if isinstance(r, dict)]
        self.cache[key] = results
        return results, time.perf_counter() - started, False


def results_block(results: list[WebResult]) -> str:
    """The untrusted, delimited block for the system prompt."""
    lines = [prompts.WEB_RESULTS_HEADER, BEGIN]
    for i, r in enumerate(results, 1):
        lines.append(f"[{i}] {r.title}\nURL: {r.url}\n{r.snippet}")
    lines.append(END)
    return "\n".join(lines)

"""Web routing before a reply: does the question need current information? If so,
search DuckDuckGo (``ddgs``) and hand the results to the prompt as untrusted data."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from trace_core import prompts
from trace_core.jsonparse import described

from .abandon import Abandoned, call_abandonable

BEGIN, END = "<<<WEB RESULTS (untrusted)>>>", "<<<END WEB RESULTS>>>"

# ddgs logs one line per engine tried, each with the full URL and its query string, and
# its HTTP (primp) and DNS (hickory) layers log through Python too: the app's one line per
# search (query, result count, time) is what the log needs
LIBRARY_LOGGERS = ("ddgs", "primp", "hickory_net", "hickory_resolver", "hickory_proto", "rustls", "h2",
                   "hyper", "hyper_util", "reqwest", "cookie_store", "httpx", "httpcore")
for _name in LIBRARY_LOGGERS:
    logging.getLogger(_name).setLevel(logging.WARNING)

_URL = re.compile(r"\b(https?://[^/\s'\")]+)[^\s'\")]*")


def _without_urls(text: str, limit: int = 200) -> str:
    """An error message with each URL cut to its host (no path, no query), and without
    the library's debug structures (``Query { name: …, query_type: A, … }``): one line a
    user can read."""
    text = _URL.sub(lambda m: m.group(1), " ".join(str(text).split()))
    text = text.split(" {", 1)[0].rstrip(" :,(")
    return text if len(text) <= limit else text[: limit - 1] + "…"

# fast rules: words that mean "now", and things of the world that change
_NOW = (r"latest|newest|today|tonight|yesterday|tomorrow|this (?:week|weekend|month|year)|right now|current|currently|"
        r"at the moment|these days|nowadays|recent|recently|upcoming|20[2-3]\d")
_CHANGING = (r"com(?:e|ing) out|news|headlines?|weather|forecast|temperature outside|price|prices|cost of|costs? now|"
             r"stock|exchange rate|score|who won|election|release[sd]?|version|changelog|announced|breaking|"
             r"delayed|cancell?ed")
NEEDS_WEB = re.compile(rf"\b({_NOW}|{_CHANGING})\b", re.I)
WORLD_NEWS = re.compile(rf"\b({_CHANGING})\b", re.I)
# things a web search cannot help with
NO_WEB = re.compile(
    r"(^\s*(hi|hello|hey|thanks|thank you|ok|okay|cool|great)\b|\b(summari[sz]e|recap) (?:our|this|what we)|"
    r"\b(rewrite|translate|refactor|this code)\b|```)",
    re.I,
)
# the question is about the conversation itself: memory answers it, whatever else it mentions
# ("Remind me, which city am I travelling to next month?")
_SAID = "say|said|tell|told|suggest|suggested|recommend|recommended|mention|mentioned|answer|answered|reply|replied|" \
        "write|wrote|explain|explained|propose|proposed|list|listed"
ABOUT_US = re.compile(
    r"\b(remind me|remember|(?:do|can) you recall|earlier|last time|as i said|i (?:told|asked|showed|gave) you|"
    r"i (?:said|mentioned|wrote)|(?:questions?|messages?) i (?:asked|sent|wrote)|"
    rf"you (?:{_SAID}|gave me)|(?:did|have|had) you (?:{_SAID})|"
    r"your (?:(?:last|previous|earlier|latest|most recent|first) )?(?:answer|reply|response|suggestion|advice|message)|"
    r"(?:did|have|had|was|were) i\b|(?:did|have) we\b|we (?:talked|discussed|spoke|chatted|decided|agreed|compared)|"
    r"(?:are|were) we (?:\w+ )?(?:talking|discussing|chatting)|"
    r"(?:our|this|today['’]s|yesterday['’]s|(?:the )?(?:last|previous)) (?:conversation|chat|discussion|talk)|"
    r"my name)\b",
    re.I,
)
# the user's own things ("my dog", "am I"): memory first, unless the question also asks for news
ABOUT_ME = re.compile(r"\b(my|mine|am i|do i have)\b", re.I)
# the user telling about themselves, not asking ("I'm currently running 30 km a week"): a
# now-word there describes their life, and searching would send it to the web word for word
FIRST_PERSON = re.compile(r"\b(i|i'm|i’m|i've|i’ve|my|we|we're|we’re|our)\b", re.I)


_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\s*\n\s*")
QUERY_CHARS = 200


# a message of this many lines or more holds pasted material (a log, a statement, a
# document): its years and "latest"s are the material's, not what the user asks
PASTE_LINES = 6


def own_words(text: str) -> str | None:
    """The lines around a paste, where a user writes what they want of it (first and
    last); None when ``text`` is no paste."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < PASTE_LINES:
        return None
    return "\n".join(dict.fromkeys((lines[0], lines[-1])))


def _asks(sentence: str) -> bool:
    return sentence.rstrip().endswith(("?", "？"))


def search_query(text: str) -> str:
    """What is sent to the search engine: one sentence of the message, never all of it —
    its other sentences may be private ("My PIN is 1234. What is the weather…?" sent
    both, to the web and the log). The question that holds a now-word; else the last
    question (the now-word may sit in a statement: "I changed my PIN today. Will it rain
    tomorrow?"); else the sentence with the now-word. Lines end sentences too. At most
    ``QUERY_CHARS``."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    sentences = [text[a:b] for a, b in spans if text[a:b].strip()] or [text]
    now = [s for s in sentences if NEEDS_WEB.search(s)]
    questions = [s for s in sentences if _asks(s)]
    chosen = next((s for s in reversed(now) if _asks(s)), None) or (questions[-1] if questions else None) \
        or (now[-1] if now else sentences[-1])
    query = " ".join(chosen.split())
    if len(query) > QUERY_CHARS:
        query = query[:QUERY_CHARS].rsplit(" ", 1)[0]
    return query


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

    def __init__(self, ask_llm: Callable[[str], bool] | None = None,
                 recalls: Callable[[str], bool] | None = None) -> None:
        self.ask_llm = ask_llm  # question -> bool; raises on failure
        self.recalls = recalls  # question -> "memory holds the answer"; optional

    def decide(self, text: str) -> RouteDecision:
        q = text.strip()
        around = own_words(q)
        if around is not None:
            # a paste: searched only for a question of the user's that holds a now-word; a
            # year in a pasted log sent "Can you summarise it?" to the search engine (a trial)
            asked = search_query(around)
            if not (_asks(asked) and NEEDS_WEB.search(asked)) or ABOUT_ME.search(asked) or ABOUT_US.search(asked):
                return RouteDecision(False, "a paste, and no question of yours about the world around it")
            return RouteDecision(True, f"a paste; you ask '{asked[:80]}'", asked)
        m = ABOUT_US.search(q)
        if m:
            return RouteDecision(False, f"about the conversation ('{m.group(0)}'): memory answers it")
        if NO_WEB.search(q):
            return RouteDecision(False, "a greeting or work on our own text")
        told = FIRST_PERSON.search(q)
        if told and "?" not in q:
            return RouteDecision(False, f"a statement about you ('{told.group(0)}'), not a question")
        web = NEEDS_WEB.search(q)
        me = ABOUT_ME.search(q)
        if me and not web:
            return RouteDecision(False, f"about you ('{me.group(0)}'): memory answers it")
        asked = search_query(q)  # the sentence that asks: another may tell of the user ("I changed my PIN today.")
        mine = ABOUT_ME.search(asked)
        if mine and not WORLD_NEWS.search(asked):  # "What is my current job?": a time word, nothing
            # of the world's; searched, the private question went to the search engine (a trial)
            now = web.group(0) if web else "a time word"
            return RouteDecision(False, f"about you ('{mine.group(0)}'; '{now}' is no news): memory answers it")
        if self.recalls is not None and not web:
            try:
                if self.recalls(q):
                    return RouteDecision(False, "memory holds the answer")
            except Exception:  # a failing memory probe never blocks routing
                pass
        if web:
            return RouteDecision(True, f"mentions '{web.group(0)}'", search_query(q))
        if len(q.split()) < 4 or not q.endswith("?"):
            return RouteDecision(False, "not a question about the world")
        if self.ask_llm is None:
            return RouteDecision(False, "doubtful; no memory model to ask")
        try:
            yes = self.ask_llm(q)
        except Exception as exc:  # unreachable model: no search, say why
            return RouteDecision(False, f"doubtful; the memory model could not answer ({exc})", by="llm")
        return RouteDecision(bool(yes), "the memory model said " + ("yes" if yes else "no"),
                             search_query(q) if yes else "", by="llm")


def ask_memory_model(llm, question: str) -> bool:
    """The memory model's yes/no for a doubtful question (``llm`` is a ``trace_core.llm.JSONLLM``)."""
    ans = llm.ask(prompts.WEB_ROUTER_SYSTEM, prompts.WEB_ROUTER_USER.format(question=question[:500]),
                  prompts.WEB_ROUTER_SCHEMA, "route")
    search = ans.get("search")
    if isinstance(search, str):
        search = {"true": True, "yes": True, "false": False, "no": False}.get(search.strip().lower())
    if not isinstance(search, bool):
        raise ValueError(f"the memory model answered {described(ans)} instead of true/false")  # never its words
    return search


def load_ddgs():
    """Import ddgs (and the HTTP stack under it). Done before a search's thread starts: a
    thread given up on mid-import would leave half-imported modules that other threads
    then find (``partially initialized module 'httpx'``)."""
    try:
        from ddgs import DDGS
        from ddgs.exceptions import DDGSException
    except ImportError as exc:
        raise WebSearchError("the ddgs package is not installed") from exc
    return DDGS, DDGSException


def ddgs_search(query: str, max_results: int, timeout: float, backend: str) -> list[dict]:
    """The real adapter. "No results" is an empty list (ddgs raises on it); any other
    failure (no network, rate limit) raises ``WebSearchError``."""
    DDGS, DDGSException = load_ddgs()
    try:
        return list(DDGS(timeout=timeout).text(query, max_results=max_results, backend=backend) or [])
    except DDGSException as exc:
        if "no results" in str(exc).lower():
            return []
        raise WebSearchError(f"web search failed: {network_problem(exc)}") from exc
    except Exception as exc:  # network errors of the HTTP layer
        raise WebSearchError(f"web search failed: {network_problem(exc)}") from exc


def network_problem(exc: BaseException) -> str:
    """A network failure of the search in words (the HTTP layer's own message chains
    its internals: "error sending request > error resolving DNS > … Query { … }")."""
    name, text = type(exc).__name__, str(exc)
    if "DNS" in name or "resolv" in text.lower() or "name or service not known" in text.lower():
        return "no network: the search engine's address could not be looked up (DNS)"
    if "timeout" in name.lower() or "timed out" in text.lower():
        return "the search engine did not answer in time"
    if "connect" in name.lower() or "connection refused" in text.lower():
        return "could not connect to the search engine"
    return f"{name}: {_without_urls(exc)}"


ddgs_search.prepare = load_ddgs  # type: ignore[attr-defined]


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x1b]")


def _clean(text: str, limit: int) -> str:
    text = _CONTROL.sub(" ", str(text or ""))
    text = text.replace(BEGIN, "").replace(END, "").replace("<<<", "‹‹‹").replace(">>>", "›››")
    text = " ".join(text.split())
    return text[:limit]


RETRY_AFTER = 60.0  # seconds after a failed search before routing tries another
NOT_TRIED = "not tried: "  # how a search skipped for that reason begins


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
        self.clock = time.monotonic
        self._failed: tuple[float, str] | None = None  # when the last search failed, and why

    def search(self, query: str, retry: bool = False) -> tuple[list[WebResult], float, bool]:
        """``(results, seconds, cached)``; raises ``WebSearchError``. Within ``RETRY_AFTER``
        seconds of a failed search none is tried (offline, each question with a now-word
        waited its 9 s again: a trial) unless ``retry`` (``/web <query>``)."""
        key = " ".join(query.lower().split())
        if key in self.cache:
            return self.cache[key], 0.0, True
        if self._failed is not None and not retry:
            when, why = self._failed
            ago = self.clock() - when
            if ago < RETRY_AFTER:
                raise WebSearchError(f"{NOT_TRIED}the search {ago:.0f} s ago failed ({why}); the next is tried "
                                     f"in {RETRY_AFTER - ago:.0f} s, or now with /web <query>")
        try:
            found = self._search(key, query)
        except WebSearchError as exc:
            self._failed = (self.clock(), str(exc).removeprefix("web search failed: "))
            raise
        self._failed = None
        return found

    def _search(self, key: str, query: str) -> tuple[list[WebResult], float, bool]:
        started = time.perf_counter()
        prepare = getattr(self.search_fn, "prepare", None)
        if prepare is not None:
            prepare()  # imports, in this thread: never abandoned half-done
        deadline = time.monotonic() + self.timeout + 1
        try:
            # a daemon thread: a search that hangs past its time is left behind, and never
            # holds the process open at exit (a pool's idle worker did, after any search)
            raw = call_abandonable(self.search_fn, query, self.max_results, self.timeout, self.backend,
                                   give_up=lambda: time.monotonic() > deadline, name="web search")
        except Abandoned:
            raise WebSearchError(f"web search took longer than {self.timeout:.0f} s") from None
        except WebSearchError:
            raise
        except Exception as exc:
            raise WebSearchError(f"web search failed: {network_problem(exc)}") from exc
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

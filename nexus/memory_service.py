"""MemoryService: one session's TRACE memory as a service for other clients.

One process owns a session file (the engine's write lock keeps a second writer out);
inside the process every write goes through one lock, so any number of MCP calls or
proxy requests at once store each exchange exactly once, in order. Reads (recall,
search) take the tree's lock, so they never see a half-added exchange. Other sessions
are only read, opened read-only, so searching them never blocks the process writing
them. No Textual here: ``nexus mcp`` and ``nexus proxy`` run headless.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from trace_core import ConversationVector, CTree, PromptSynthesizer, VectorDatabase
from trace_core.exchange_input import storable
from trace_core.synthesis.params import SynthesisParams
from trace_core.synthesizer import RetrievalReport

from . import sessions

log = logging.getLogger("nexus.memory")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_SESSION = "default"
# a client's "regenerate" asks the newest question again soon after its answer; later, the
# same words are a question asked anew, and the earlier exchange stays memory
REGENERATE_WINDOW_SECONDS = 900.0


def context_key(messages: list[dict]) -> str:
    """A digest of the messages a question was asked after (roles and texts)."""
    import hashlib
    import json

    shown = [[str(m.get("role")), str(m.get("content") or "")] for m in messages if isinstance(m, dict)]
    return hashlib.sha256(json.dumps(shown, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()


class NothingToRemember(ValueError):
    """An answer with nothing in it to keep (reasoning only, a bare role label, the system
    prompt said back): refused, nothing stored."""


class SessionNameError(ValueError):
    """A session name that could reach outside the sessions folder, or is not a name."""


# a search hit needs the cosine the memory block needs (SynthesisParams.min_relevance):
# MiniLM puts unrelated sentences at 0.0-0.27, and /search listed them at 0.24-0.28
SEARCH_FLOOR = SynthesisParams().min_relevance


def bare_session_name(name: str) -> str:
    """``name`` without its file endings: "family.db" and "family.db.db" are "family" (the
    second was made in the current folder, outside the sessions folder: a trial)."""
    bare = name.strip()
    while bare.endswith(".db") and len(bare) > 3:
        bare = bare[:-3]
    return bare


def session_path(name: str) -> Path:
    """The file of session ``name`` in the sessions folder. Only plain names: no paths,
    no ``..``, no separators (a client picks sessions by name over the network)."""
    if not isinstance(name, str):
        raise SessionNameError("a session name must be text")
    bare = bare_session_name(name)
    if not _NAME.fullmatch(bare) or ".." in bare:
        raise SessionNameError(
            f"{name[:80]!r} is not a session name: use 1-64 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit (no paths, no '..')")
    return sessions.resolve(bare)  # the same folder and naming as `nexus --session NAME`


def served_problem(name: str, exc) -> str:
    """Why a session cannot be served (``nexus proxy``, ``nexus mcp``), in words that
    name it and suggest what those can do: they have no read-only mode (a trial was told
    to "open it read-only")."""
    from trace_core import SessionLockedError

    if isinstance(exc, SessionLockedError):
        return (f"session {name!r} is open for writing in {exc.holder}: quit that Nexus, proxy or MCP server, "
                "or use another session")
    return f"session {name!r} cannot be opened: {exc.problem}"


def session_name(path: Path) -> str:
    return Path(path).stem


# --- results (typed, and plain dicts for JSON) ---------------------------------------------


@dataclass
class RecalledBranch:
    node_id: str
    path: str
    summary: str
    score: float
    exchanges: int


@dataclass
class RecalledExchange:
    index: int
    branch: str
    timestamp: str
    score: float  # the fused score that ranked it
    similarity: float  # best cosine of its messages to the query
    keyword: float  # BM25 (0: no shared word)
    status: str = ""  # "current" | "superseded" | ""


@dataclass
class Recall:
    session: str
    query: str
    block: str  # the memory block, ready for a system message ("" when nothing is relevant)
    tokens: int
    budget: int
    branches: list[RecalledBranch] = field(default_factory=list)
    exchanges: list[RecalledExchange] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Remembered:
    session: str
    exchange: int
    branch: str
    replaced: bool = False  # it took the place of the newest exchange (a regenerated answer)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchHit:
    session: str
    exchange: int
    role: str
    text: str  # cut at HIT_CHARS with "…" (the exchange resource has it whole)
    branch: str
    timestamp: str
    score: float  # the cosine
    chars: int = 0  # the message's whole length
    words: bool = False  # it holds the query's words (BM25): lifted in ``rank``
    rank: float = 0.0  # what hits are ordered by: the cosine, lifted for the words

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SearchResult:
    query: str
    hits: list[SearchHit] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # other sessions not searched, and why

    def as_dict(self) -> dict:
        return asdict(self)


# --- read-only access to other sessions ----------------------------------------------------


def open_read_only(path: Path) -> VectorDatabase:
    """A session's store opened without the write lock and never written."""
    return VectorDatabase(str(path), read_only=True)


# /search by the words themselves too: a message holding the query's rarer words as the
# best keyword match does gains this on its cosine ("Lübeck", "TSSOP": in memory, word for
# word, and "Nothing in memory matches" by meaning alone: a trial)
KEYWORD_LIFT = 0.5


def holds_words(lift: float) -> bool:
    """A hit shown as holding the query's words (≡): a keyword match near the best one, not
    any message sharing a stemmed word ("living" for "where does my sister live" marked
    nearly every hit: a trial)."""
    return lift >= KEYWORD_LIFT / 2


def score_text(x: float) -> str:
    return f"{x:.2f}".replace("-0.00", "0.00")  # a cosine of -0.001 read "-0.00" (a trial)


def inside_terms(query: str) -> list[str]:
    """The query's CJK words: the keyword index reads an unspaced run as one word, so they
    are looked for inside the text as written."""
    from trace_core.textutil import ideographic, query_terms

    return [t for t in query_terms(query) if ideographic(t)]


def with_words_inside(db, query: str, words: list[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    """``words`` (keyword hits, BM25) with the messages holding the query's CJK words inside
    a longer run: `/search ポチ` found "ポチは毎朝公園を散歩します。" by cosine alone, unmarked,
    and below a message without the word (a trial). Such a message scores as the best keyword
    hit does, in the share of those words it holds."""
    terms = inside_terms(query)
    if not terms:
        return words
    top = max((score for _, score in words), default=1.0)
    scores = dict(words)
    for m, held in db.messages_containing(terms, k):
        scores[m] = max(scores.get(m, 0.0), top * held / len(terms))
    return sorted(scores.items(), key=lambda ms: -ms[1])


def search_messages(db, qvec, query: str, k: int, min_similarity: float) -> list[tuple[ConversationVector, float]]:
    """The best ``k`` messages for ``query``: by meaning (cosine from ``min_similarity``) and
    by its words (BM25, from any cosine), the cosine lifted by ``KEYWORD_LIFT`` × the
    message's share of the best keyword score, squared. Each with its lift (0: by meaning only)."""
    if not any(ch.isalnum() for ch in query):  # "😀" found a Japanese reply at 0.46 (a trial), as the block does not
        return []
    q = np.asarray(qvec, dtype=np.float32)
    q = q / (np.linalg.norm(q) or 1.0)
    hits = {h.message_id: h for h in db.search_conversation(q, top_k=k, min_similarity=min_similarity)}
    words = db.keyword_search_messages(query, k)
    if words:
        live = set(db.conversation_index().ids)  # archived messages are out of the index
        words = [(m, score) for m, score in words if m in live]
    words = with_words_inside(db, query, words, k)
    best = max((score for _, score in words), default=0.0)
    lift = {m: KEYWORD_LIFT * (score / best) ** 2 for m, score in words} if best > 0 else {}
    for m, cv in db.get_conversation_messages([m for m in lift if m not in hits]).items():
        v = np.asarray(cv.embedding, dtype=np.float32)
        cv.similarity = float(v @ q / (np.linalg.norm(v) or 1.0))
        hits[m] = cv
    ranked = sorted(hits.values(), key=lambda h: -(h.similarity + lift.get(h.message_id, 0.0)))
    return [(h, lift.get(h.message_id, 0.0)) for h in ranked[:k]]


HIT_CHARS = 2000  # a hit's text: a pasted megabyte in every hit broke MCP clients' 1 MiB event limit


def _hit(session: str, h, lift: float = 0.0) -> SearchHit:
    text = h.text if len(h.text) <= HIT_CHARS else h.text[: HIT_CHARS - 1] + "…"
    return SearchHit(session, int(h.exchange_index), h.role, text, h.thread_path or "", h.timestamp or "",
                     round(float(h.similarity), 4), len(h.text), holds_words(lift), round(float(h.similarity) + lift, 4))


def _search_other(path: Path, qvec, query: str, embedder, k: int, min_similarity: float,
                  skipped: list[str]) -> list[tuple[SearchHit, int]]:
    name = session_name(path)
    try:
        if path.stat().st_size == 0:  # an empty file holds nothing to search ("no such table: meta": a trial)
            return []
        db = open_read_only(path)
    except Exception as exc:  # a damaged, foreign or newer file is named, never fatal
        skipped.append(f"{name}: {exc}")
        return []
    try:
        stored = db.get_meta("embed_model")
        if stored is None:
            return []  # an empty session
        if stored != embedder.name or int(db.get_meta("embed_dim") or 0) != embedder.dim:
            skipped.append(f"{name}: embedded with {stored}, not {embedder.name}")
            return []
        return _hits(name, search_messages(db, qvec, query, k, min_similarity), query)
    except Exception as exc:
        skipped.append(f"{name}: {exc}")
        return []
    finally:
        db.close()


def _terms_held(texts: list[str], query: str) -> list[int]:
    """How many of the query's search terms each text holds, matched as the keyword index
    matches them (FTS5, porter stems: "vets" holds "vet")."""
    import sqlite3

    from trace_core.textutil import query_terms

    terms = query_terms(query)
    held = [0] * len(texts)
    if not terms or not texts:
        return held
    inside = set(inside_terms(query))  # held as written, inside a longer run of CJK
    for i, x in enumerate(texts):
        held[i] += sum(t in x for t in inside)
    terms = [t for t in terms if t not in inside]
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
        db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", [(i + 1, x) for i, x in enumerate(texts)])
        for term in terms:
            phrase = '"' + term.replace('"', '""') + '"'
            for (row,) in db.execute("SELECT rowid FROM t WHERE t MATCH ?", (phrase,)):
                held[row - 1] += 1
    finally:
        db.close()
    return held


def _hits(session: str, found: list[tuple[ConversationVector, float]], query: str) -> list[tuple[SearchHit, int]]:
    """``search_messages``'s hits, each with how many of the query's terms its whole text
    holds when it was lifted for them (0 otherwise): counted before the text is cut at
    ``HIT_CHARS``, where a long message's later words are gone."""
    lifted = [h.text for h, lift in found if lift > 0]
    held = iter(_terms_held(lifted, query))
    return [(_hit(session, h, lift), next(held) if lift > 0 else 0) for h, lift in found]


def _lifts_across_sessions(hits: list[tuple[SearchHit, int]]) -> list[SearchHit]:
    """Each session weighs the words against its own best keyword match; across sessions a
    hit keeps that lift only as far as it holds as many of the query's terms (``hits``:
    each with that count) as the best hit anywhere (squared, as within a session). "Miso
    vet": a session holding "Miso" alone had its Miso hits marked ≡ "holds its words" and
    ranked over the other session's (a trial)."""
    best = max((held for _, held in hits), default=0)
    if not best:
        return [h for h, _ in hits]
    out = []
    for h, held in hits:
        lift = h.rank - h.score
        if lift > 0:
            lift *= (held / best) ** 2
            h = SearchHit(**{**asdict(h), "words": holds_words(lift), "rank": round(h.score + lift, 4)})
        out.append(h)
    return out


def search_sessions(tree: CTree, path: Path, query: str, k: int = 10, all_sessions: bool = True,
                    min_similarity: float = SEARCH_FLOOR) -> SearchResult:
    """Search ``tree`` (the session at ``path``, open in this process) and, with
    ``all_sessions``, every other session in the sessions folder, opened read-only."""
    query = (query or "").strip()
    k = max(1, min(int(k), 100))
    result = SearchResult(query)
    if not query:
        return result
    qvec = tree.embed_fn.embed(query)
    with tree.lock:  # the tree's own lock: add() holds it while it writes
        hits = search_messages(tree.vdb, qvec, query, k, min_similarity)
    own = Path(path).resolve()
    if all_sessions:
        found = _hits(session_name(own), hits, query)
        for other in sorted(sessions.sessions_dir().glob("*.db")):
            if other.resolve() != own:
                found += _search_other(other, qvec, query, tree.embed_fn, k, min_similarity, result.skipped)
        result.hits = _lifts_across_sessions(found)
    else:
        result.hits = [_hit(session_name(own), h, lift) for h, lift in hits]
    result.hits.sort(key=lambda h: -h.rank)
    result.hits = result.hits[:k]
    return result


# --- the service ------------------------------------------------------------------------------


class MemoryService:
    """Recall, remember, search, outline and statistics of one open session.

    ``tree`` is the session's ``CTree`` (opened for writing by this process); the
    service closes it on ``close()``."""

    def __init__(self, tree: CTree, path: Path, memory_token_budget: int = 1000, min_similarity: float = SEARCH_FLOOR) -> None:
        self.tree = tree
        self.path = Path(path)
        self.name = session_name(self.path)
        self.budget = memory_token_budget
        self.min_similarity = min_similarity
        self.synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb, memory_token_budget=memory_token_budget)
        self._write = threading.Lock()  # one writer: each add() whole, in order
        self._indexer: threading.Thread | None = None
        self._index_wanted = threading.Event()
        self._last_request = 0.0  # monotonic time of the last recall/remember/search
        self.index_after_idle = 2.0  # seconds without requests before the sentence index runs
        self._closed = False
        self._newest_context: tuple[int, str] | None = None  # (exchange, context_key) of the last remember

    @classmethod
    def open(cls, path: Path, *, embed_fn=None, judge: str = "embedding", base_url: str | None = None,
             api_key: str | None = None, memory_model: str = "local-model", max_children: int = 5,
             memory_token_budget: int = 1000) -> "MemoryService":
        """Open (or create) the session file for writing. Raises ``SessionFileError``
        (``SessionLockedError`` when another process writes it)."""
        tree = CTree.open(str(path), base_url=base_url, api_key=api_key, model=memory_model or "local-model",
                          embed_fn=embed_fn, judge=judge, max_children=max_children, llm_timeout=30)
        return cls(tree, Path(path), memory_token_budget)

    def close(self) -> None:
        """Wait for the write in progress, stop the indexer, close the file (releases the lock)."""
        with self._write:
            self._closed = True
        self._index_wanted.set()
        if self._indexer is not None:
            self._indexer.join(timeout=30)
        with self._write:
            self.tree.close()  # the synthesizer's thread, then the file and its writer lock

    # --- reads ---------------------------------------------------------------------------

    def recall(self, query: str, budget_tokens: int | None = None, recent: list[dict] | None = None) -> Recall:
        """The memory block for ``query`` within ``budget_tokens``, with where each part
        came from. ``recent``: messages the caller already has in its context (not
        recalled again)."""
        self._last_request = time.monotonic()
        query = storable(query or "").strip()  # a lone surrogate reads as U+FFFD, as add() stores it
        budget = self.budget if budget_tokens is None else int(budget_tokens)
        if budget < 0:
            raise ValueError("budget_tokens must be 0 or more")
        if not query:
            return Recall(self.name, query, "", 0, budget)
        qvec = self.tree.embed_fn.embed(query)  # outside the lock: embedding is the slow part
        report = RetrievalReport(query=query, memory_token_budget=budget)
        with self.tree.lock:  # the tree's own lock: add() holds it while it changes the tree
            block = self.synth.memory_block(query, qvec, recent or [], 3, 2, 0.50, budget, report)
            self.synth.last_report = report
        return Recall(
            self.name, query, block, report.memory_tokens, budget,
            # exchanges, as Nexus counts them: the block's lines also hold its date lines (one too many, a trial)
            [RecalledBranch(p.node_id, p.path, p.summary, round(p.similarity, 4), len(p.entries))
             for p in report.paths],
            [RecalledExchange(x.index, x.thread_path, x.timestamp, round(x.fused, 4), round(x.vector, 4),
                              round(x.keyword, 4), x.status) for x in report.exchanges],
        )

    def search(self, query: str, k: int = 10, all_sessions: bool = False) -> SearchResult:
        """Messages closest to ``query`` (cosine), best first; each hit names its session.
        ``all_sessions``: every session in the sessions folder, the others read-only."""
        self._last_request = time.monotonic()
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k is how many hits to return: 1 or more (it was {k!r})")
        return search_sessions(self.tree, self.path, query, k, all_sessions, self.min_similarity)

    def outline(self, show_messages: bool = False) -> str:
        """The topic tree as text (names, exchange ranges, summaries; ``*`` marks the
        active branch)."""
        with self.tree.lock:
            return self.tree.render_tree(show_messages=show_messages, count_exchanges=True)  # as Nexus counts

    def exchange(self, index: int) -> dict:
        """One stored exchange by number. ``IndexError`` naming the range if absent."""
        with self.tree.lock:
            xs = self.tree.exchange_view()
            if not 0 <= index < len(xs):
                raise IndexError(f"no exchange #{index} in session {self.name!r} (it has {len(xs)}: "
                                 f"#0..#{len(xs) - 1})" if xs else f"session {self.name!r} has no exchanges yet")
            x = xs[index]
            return {"session": self.name, "exchange": x.index, "timestamp": x.timestamp,
                    "branch": self.tree.thread_path(x) if x.parent is not None else "", "archived": x.archived,
                    "messages": [dict(m) for m in x.messages]}

    def stats(self) -> dict:
        with self.tree.lock:
            tree = self.tree
            topics = sum(1 for t in tree.iter_topics() if t is not tree.root)
            r = self.synth.last_report
            return {
                "session": self.name,
                "path": str(self.path),
                "exchanges": len(tree.exchange_view()),
                "archived": len(tree.archived),
                "topics": topics,
                "judge": tree.judge,
                "embedder": getattr(tree.embed_fn, "name", "?"),
                "sentence_index_pending": tree.pending_parts(),
                "memory_token_budget": self.budget,
                "last_memory_tokens": r.memory_tokens if r else 0,
            }

    # --- the one writer -------------------------------------------------------------------

    def regenerating(self, user: str, earlier: list[dict]) -> int | None:
        """The newest exchange's number when a request asks its question again after the
        very messages it was asked after (``earlier``: the request's messages before the
        question, system included), soon: a client's "regenerate", which rejected that answer.
        None otherwise: the same words after other messages (another chat, a one-shot request
        with other notes, the question asked again after its answer) are a new exchange
        (matching the question alone replaced another chat's exchange: a trial)."""
        from datetime import UTC, datetime

        user = storable(user or "").strip()
        key = context_key(earlier)
        with self.tree.lock:
            xs = self.tree.exchange_view()
            newest = xs[-1] if xs else None
            if (newest is None or self._newest_context != (newest.index, key) or newest.archived
                    or newest.forgotten or newest.user.strip() != user):
                return None
            stamp = newest.timestamp
        try:
            when = datetime.fromisoformat(stamp)
            age = (datetime.now(UTC) - (when if when.tzinfo else when.replace(tzinfo=UTC))).total_seconds()
        except (TypeError, ValueError):
            return None
        return newest.index if 0 <= age <= REGENERATE_WINDOW_SECONDS else None

    def remember(self, user: str, assistant: str, system: str | None = None,
                 replaces: int | None = None, earlier: list[dict] | None = None,
                 own_system: str = "") -> Remembered:
        """Store one completed exchange; on disk when it returns. Bad input →
        ``ValueError`` in words (nothing stored); an answer that says nothing →
        ``NothingToRemember``. ``replaces``: the number ``regenerating`` gave; when it is
        still the newest exchange, with the same question, the new answer takes its place
        (memory never holds the rejected answer beside the new one). ``earlier``: the
        messages the question was asked after, for ``regenerating``. ``own_system``: the
        caller's system prompt, which an answer that only says it back does not count as."""
        from .turn import says_something, strip_think

        self._last_request = time.monotonic()
        # reasoning is never memory, whoever stores (MCP's remember kept "<think>…</think>": a trial)
        if assistant.strip():  # an empty answer is refused as such below
            assistant = strip_think(assistant)
            if not assistant:
                raise NothingToRemember("the answer holds nothing but reasoning (<think>…</think>): nothing was stored")
            # what Nexus does not store, no other client does (a bare "User:", a date line, the
            # client's system prompt said back were kept through the proxy: a trial)
            if not says_something(assistant, own_system):
                raise NothingToRemember("the answer says nothing (a bare role label, a date line, or the system "
                                        "prompt said back): nothing was stored")
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        if system:
            msgs.insert(0, {"role": "system", "content": system})
        with self._write:
            if self._closed:
                raise RuntimeError(f"session {self.name!r} is closed")
            xs = self.tree.exchange_view()
            newest = xs[-1] if xs else None
            replace = (replaces is not None and newest is not None and newest.index == replaces
                       and not newest.archived and not newest.forgotten
                       and newest.user.strip() == storable(user).strip())
            node = self.tree.replace_last(msgs) if replace else self.tree.add(msgs)
            self._newest_context = None if earlier is None else (node.index, context_key(earlier))
            branch = self.tree.thread_path(node)
            self._schedule_index()
        return Remembered(self.name, node.index, branch, replace)

    def _schedule_index(self) -> None:
        """The sentence index (idle work) in one background thread, after writes."""
        self._index_wanted.set()
        if self._indexer is None:  # one thread for the service's life (called under the writer lock)
            self._indexer = threading.Thread(target=self._index_loop, name="nexus-memory-index", daemon=True)
            self._indexer.start()

    def _index_loop(self) -> None:
        # idle work: it waits for a pause in requests (its embeddings would slow the next
        # recall on a small machine), and it runs outside the writer lock: index_pending
        # embeds outside the tree's lock and writes its batch under it
        while not self._closed:
            if not self._index_wanted.wait(timeout=1.0):
                continue
            while time.monotonic() - self._last_request < self.index_after_idle and not self._closed:
                time.sleep(0.1)
            self._index_wanted.clear()
            if self._closed:
                return
            try:
                self.tree.index_pending(max_exchanges=64)
                if self.tree.pending_parts():
                    self._index_wanted.set()
            except Exception as exc:  # retrieval still works on message vectors
                log.warning("sentence index not updated: %s", type(exc).__name__)
                return

    def wait_indexed(self, timeout: float = 30.0) -> bool:
        """Wait until the background sentence index has caught up (tests, benchmarks)."""
        end = time.monotonic() + timeout
        while self.tree.pending_parts():
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True


def open_service(config, name: str | None = None, embed_fn=None, base_url: str | None = None) -> MemoryService:
    """The service for session ``name`` (default ``DEFAULT_SESSION``) with Nexus's settings.
    ``base_url``: where the tree's judge asks its LLM (the proxy's upstream)."""
    mem = config.section("memory")
    path = session_path(name or DEFAULT_SESSION)
    if embed_fn is None:
        from trace_core.embedders import make_embedder

        embed_fn = make_embedder(mem.embed, config.base_url, config.api_key)
    return MemoryService.open(path, embed_fn=embed_fn, judge=mem.judge, base_url=base_url or config.base_url,
                              api_key=config.api_key,
                              memory_model=config.memory_model or config.chat_model or "local-model",
                              max_children=mem.max_children,
                              memory_token_budget=mem.memory_token_budget)

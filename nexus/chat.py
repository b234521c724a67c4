"""ChatSession: one conversation with memory. Plain Python, no widgets.

It owns the tree (the session file), the chat client, the web router and the model
manager, and reports through ``emit(event)``. The Textual app calls it from workers.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from trace_core import CTree, PromptSynthesizer
from trace_core.llm import describe_error

from . import events as ev
from .config import Config
from .web import RouteDecision, WebRouter, WebSearch, WebSearchError, results_block

THINK = re.compile(r"<think>.*?(</think>|$)", re.S)


def strip_think(text: str) -> str:
    """Reasoning sections are shown collapsed and never stored in memory."""
    return THINK.sub("", text).strip()


class ChatSession:
    def __init__(self, config: Config, session_path: Path, emit: Callable[[object], None] = lambda e: None,
                 embed_fn=None, search_fn=None) -> None:
        from openai import OpenAI

        self.config = config
        self.path = Path(session_path)
        self.emit = emit
        self._embed_fn = embed_fn
        self.client = OpenAI(base_url=config.base_url, api_key=config.api_key,
                             timeout=float(config.get("server", "timeout")), max_retries=0)
        self.model = config.chat_model
        self.tree: CTree | None = None
        self.synth: PromptSynthesizer | None = None
        self.cancel_event = threading.Event()
        self.pending: str | None = None  # a message whose reply failed: resend with a key
        self.recent: list[dict] = []
        self.web_enabled = bool(config.get("web", "enabled"))
        self.web = WebSearch(**({"search_fn": search_fn} if search_fn else {}),
                             max_results=int(config.get("web", "max_results")),
                             timeout=float(config.get("web", "timeout")), backend=str(config.get("web", "backend")))
        self.router = WebRouter(self._ask_router)
        self.last_activity = time.monotonic()
        self._lock = threading.Lock()

    # --- opening ---------------------------------------------------------------------------

    def open(self) -> CTree:
        """Open (or create) the session file. Raises ``SessionFileError`` for a bad file."""
        mem = self.config.data["memory"]
        tree = CTree.open(str(self.path), base_url=self.config.base_url, api_key=self.config.api_key,
                          model=self.config.memory_model or "local-model", embed_fn=self._embed_fn,
                          judge=mem["judge"], max_children=int(mem["max_children"]), llm_timeout=30)
        tree.on_event(self.emit)
        self.tree = tree
        self.synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb,
                                       memory_token_budget=int(mem["memory_token_budget"]))
        n = int(mem["recent_exchanges"])
        self.recent = [dict(m) for x in tree.exchanges[-n:] for m in x.messages if m["role"] != "system"]
        return tree

    def close(self) -> None:
        if self.tree is not None and self.tree.vdb is not None:
            self.tree.vdb.close()

    # --- models -----------------------------------------------------------------------------

    def resolve_model(self) -> str:
        """The chat model: configured, or the first the server lists."""
        if self.model:
            return self.model
        try:
            models = self.client.models.list()
            ids = [m.id for m in models.data]
        except Exception as exc:
            raise RuntimeError(describe_error(exc, self.config.base_url)) from exc
        if not ids:
            raise RuntimeError(f"the server at {self.config.base_url} lists no models; load one first")
        self.model = ids[0]
        return self.model

    def list_models(self) -> list[str]:
        try:
            return [m.id for m in self.client.models.list().data]
        except Exception as exc:
            raise RuntimeError(describe_error(exc, self.config.base_url)) from exc

    def _ask_router(self, question: str) -> bool:
        from trace_core import prompts
        from trace_core.llm import JSONLLM

        llm = JSONLLM(self.config.memory_model or self.resolve_model(), api_key=self.config.api_key,
                      base_url=self.config.base_url, timeout=10, max_tokens=16)
        ans = llm.ask(prompts.WEB_ROUTER_SYSTEM, prompts.WEB_ROUTER_USER.format(question=question[:500]),
                      prompts.WEB_ROUTER_SCHEMA, "route")
        return bool(ans.get("search"))

    # --- one turn ---------------------------------------------------------------------------

    def route(self, text: str, forced_query: str | None = None) -> tuple[RouteDecision, list]:
        if forced_query:
            decision = RouteDecision(True, "asked with /web", forced_query, by="command")
        elif not self.web_enabled:
            self.emit(ev.WebRouted(False, "web search is off"))
            return RouteDecision(False, "web search is off", by="off"), []
        else:
            decision = self.router.decide(text)
        if not decision.search:
            self.emit(ev.WebRouted(False, decision.reason))
            return decision, []
        try:
            results, seconds, cached = self.web.search(decision.query)
        except WebSearchError as exc:
            self.emit(ev.WebRouted(True, decision.reason, decision.query, 0, 0.0, str(exc)))
            return decision, []
        self.emit(ev.WebRouted(True, decision.reason + (" (cached)" if cached else ""), decision.query,
                               len(results), seconds))
        return decision, results

    def build_prompt(self, text: str, web_results: list) -> str:
        assert self.tree is not None and self.synth is not None
        extra = [results_block(web_results)] if web_results else []
        prompt = self.synth.synthesize_prompt(text, self.tree.embed_fn.embed(text), self.tree.current_node,
                                              self.recent, extra_context=extra)
        self.emit(ev.Retrieved(self.synth.last_report))
        return prompt

    def send(self, text: str, forced_query: str | None = None) -> str | None:
        """Route, retrieve, stream the reply, remember the exchange. Returns the reply, or
        None when it failed (the message is kept in ``pending``)."""
        self.last_activity = time.monotonic()
        self.cancel_event.clear()
        self.pending = text
        self.emit(ev.ReplyStarted(text))
        partial = ""
        try:
            model = self.resolve_model()
            _decision, results = self.route(text, forced_query)
            system = self.build_prompt(text, results)
            stream = self.client.chat.completions.create(
                model=model, stream=True, temperature=float(self.config.get("models", "temperature")),
                messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
            )
            cancelled = False
            try:
                for chunk in stream:
                    if self.cancel_event.is_set():
                        cancelled = True
                        break
                    delta = chunk.choices[0].delta.content if chunk.choices else None
                    if delta:
                        partial += delta
                        self.emit(ev.ReplyChunk(delta))
            finally:
                stream.close()
        except Exception as exc:
            problem = exc.args[0] if isinstance(exc, RuntimeError) and exc.args else describe_error(
                exc, self.config.base_url)
            self.emit(ev.ReplyFailed(text, partial, problem))
            return None
        sources = tuple((r.title, r.url) for r in results)
        reply = partial if not cancelled else partial + "\n\n[reply cancelled]"
        self.emit(ev.ReplyFinished(reply, cancelled, sources))
        self.pending = None
        self.remember(text, reply)
        return reply

    def remember(self, user: str, reply: str, system: str | None = None) -> None:
        """Store the exchange (called from a worker: add() embeds and writes to disk)."""
        assert self.tree is not None
        content = strip_think(reply) or "(empty reply)"
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": content}]
        if system:
            msgs.insert(0, {"role": "system", "content": system})
        with self._lock:
            node = self.tree.add(msgs)
            n = int(self.config.get("memory", "recent_exchanges"))
            self.recent = (self.recent + [m for m in msgs if m["role"] != "system"])[-2 * n:]
        self.emit(ev.Remembered(node.index, self.tree.thread_path(node)))
        self.index_sentences()

    def index_sentences(self) -> int:
        """Embed the sentences of exchanges not indexed yet (retrieval scores a message by
        its best sentence too). Idle work: after a reply is stored, or a session opened."""
        if self.tree is None:
            return 0
        try:
            return self.tree.index_pending()
        except Exception as exc:  # retrieval still works on message vectors
            self.emit(ev.Notice(f"sentence index not updated: {exc}", "warning"))
            return 0

    def cancel(self) -> None:
        self.cancel_event.set()

    # --- commands' engine side ------------------------------------------------------------------

    def search(self, query: str, top_k: int = 8) -> list:
        assert self.tree is not None and self.tree.vdb is not None
        qv = self.tree.embed_fn.embed(query)
        return self.tree.vdb.search_conversation(qv, top_k=top_k, min_similarity=0.2)

    def reorganize(self, threshold: float | None = None, prune: bool | None = None) -> dict:
        assert self.tree is not None
        mem = self.config.data["memory"]
        return self.tree.reorganize(
            similarity_threshold=float(threshold if threshold is not None else mem["reorganize_threshold"]),
            prune_trivial_leaves=bool(mem["prune_trivial"] if prune is None else prune))

    def stats(self) -> dict:
        assert self.tree is not None
        topics = [t for t in self.tree.iter_topics() if t is not self.tree.root]
        r = self.synth.last_report if self.synth else None
        return {
            "session": str(self.path),
            "exchanges": len(self.tree.exchanges),
            "archived": len(self.tree._archived_nodes),
            "topics": len(topics),
            "judge": self.tree.judge,
            "embedder": getattr(self.tree.embed_fn, "name", "?"),
            "model": self.model or "(first listed)",
            "memory_model": self.config.memory_model or "(chat model)",
            "last_memory_tokens": r.memory_tokens if r else 0,
            "full_history_tokens": r.full_history_tokens if r else 0,
        }

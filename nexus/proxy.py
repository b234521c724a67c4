"""``nexus proxy``: an OpenAI-compatible endpoint that gives any client TRACE memory.

A client (a chat UI, an agent, the ``openai`` library) talks to the proxy as to its
model server. For each ``/v1/chat/completions`` request the proxy recalls the memory
block for the last user message, puts it into the system message, forwards the
request to the upstream server and passes the answer back unchanged (streamed or
not). Once the upstream's answer is complete (``[DONE]`` for a stream, a 200 JSON
body otherwise) the exchange is remembered, before the client sees the end of the
answer, so an acknowledged answer is a stored one. An upstream error, a stream cut
short and a client that hangs up are never remembered. ``X-Nexus-Session: NAME``
picks another session for one request. ``/v1/models`` is passed through.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

from trace_core.llm import shown_url

from .chat import strip_think
from .memory_service import MemoryService, SessionNameError, bare_session_name, served_problem

log = logging.getLogger("nexus.proxy")


def quiet_logging() -> None:
    """The proxy's log: its own lines (session, status, timing) at INFO; the engine's
    only from WARNING, since its events name topics after the messages' words (the
    README promises no message text in the logs)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("trace_core").setLevel(logging.WARNING)
    logging.getLogger("nexus.proxy").setLevel(logging.INFO)
    # the HTTP clients log each request's full URL at INFO: the memory model's carried the
    # upstream's password ("http://alice:pw@…", a trial)
    for client in ("httpx", "httpx2", "httpcore", "openai"):
        logging.getLogger(client).setLevel(logging.WARNING)

SESSION_HEADER = "x-nexus-session"


class NotJSONNumber(ValueError):
    pass


def no_json_number(word: str):
    """Python reads NaN and Infinity; JSON has neither: forwarded, "temperature": NaN went
    on to the upstream as a body no strict parser reads (a trial)."""
    raise NotJSONNumber(f"{word} is not a JSON number")


class ClientGone(Exception):
    """The client hung up while the proxy waited for the upstream."""


async def unless_gone(request, awaitable, every: float = 0.2):
    """``awaitable``'s result, or ``ClientGone`` as soon as the client has hung up, the
    wait for the upstream given up: a client that timed out left the model server writing
    an answer nobody would read, and its retry queued behind it (a trial)."""
    import asyncio

    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


SERVED = "POST /v1/chat/completions and GET /v1/models"


async def not_served(request, exc):
    """A route the proxy does not serve, in words and as JSON (OpenAI clients read errors
    so): a client's /v1/embeddings got a bare "Not Found" (a trial)."""
    asked = f"{request.method} {request.url.path}"
    asked = asked if len(asked) <= 120 else asked[:119] + "…"
    answer = _error(exc.status_code, f"the memory proxy serves {SERVED} only, not {asked}", "invalid_request_error")
    answer.headers.update(exc.headers or {})  # 405's Allow
    return answer


def _error(status: int, message: str, kind: str = "proxy_error"):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def content_text(content) -> str:
    """The text of a message's content: a string, or the text parts of a list (an image
    part is noted "[image]", so the stored exchange says one was shown)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p["text"] for p in content
                 if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
        if any(t.strip() for t in texts) and any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            texts.append("[image]")
        return "\n".join(texts)
    return ""


RECALL_QUERY_CHARS = 20_000  # as MCP's bound; a 3.9 MB message took 35 s to embed before its answer (a trial)


@dataclass
class AskedTurn:
    """What a chat request asks: its newest user message, the messages before it, the
    start of an answer the client wrote itself (a prefill), and its system text."""

    user: str
    earlier: list[dict]
    prefill: str
    system: str
    # the messages up to the question as sent, images and all: two questions of the same
    # words about other images are not a regenerate (a review's captions replaced each other)
    context: list[dict] = field(default_factory=list)
    memory: str = ""  # the block the proxy added: an answer that only copies it out is none
    # response_format json_object / json_schema: a program's step (an extraction, a title,
    # a label), its answer a JSON record, not conversation: '{"name": "Ann", …}' was kept
    # as what the assistant said, and came back in memory blocks (a trial)
    structured: str = ""

    @property
    def given(self) -> str:
        return f"{self.system}\n{self.memory}"

    @property
    def query(self) -> str:
        """What memory is recalled for: the question, or the start and end of a huge one
        (a pasted text's question is often at its end)."""
        u, half = self.user, RECALL_QUERY_CHARS // 2
        return u if len(u) <= RECALL_QUERY_CHARS else u[:half] + "\n" + u[-half:]


def asked_turn(messages: list) -> AskedTurn:
    last = max((k for k, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), default=-1)
    shown = [{"role": m.get("role"), "content": content_text(m.get("content"))} for m in messages
             if isinstance(m, dict)]
    tail = messages[last + 1:] if last >= 0 else []
    # an answer the client began ("The capital of France is"): the model goes on from it
    prefill = (content_text(tail[-1].get("content")) if len(tail) == 1 and isinstance(tail[0], dict)
               and tail[0].get("role") == "assistant" and not tail[0].get("tool_calls") else "")
    system = "\n".join(m["content"] for m in shown if m["role"] in ("system", "developer"))
    user = content_text(messages[last].get("content")).strip() if last >= 0 else ""
    context = [{"role": m.get("role"), "content": json.dumps(m.get("content"), sort_keys=True)}
               for m in messages[:last + 1]]
    return AskedTurn(user, shown[:last] if last >= 0 else shown, prefill, system, context)


def calls_tools(choice: dict) -> bool:
    """An answer that asks for a tool is a step of a tool loop, not the answer: the loop's
    last request gets that (its first step was kept as the answer too: a trial)."""
    msg = choice.get("message") or choice.get("delta") or {}
    return choice.get("finish_reason") in ("tool_calls", "function_call") or bool(
        isinstance(msg, dict) and (msg.get("tool_calls") or msg.get("function_call")))


def with_memory(messages: list, block: str) -> list:
    """The messages with ``block`` appended to the first system message (or as one)."""
    if not block:
        return messages
    out = [dict(m) if isinstance(m, dict) else m for m in messages]
    first = out[0] if out and isinstance(out[0], dict) else None
    if first is not None and first.get("role") in ("system", "developer"):
        c = first.get("content")
        if isinstance(c, list):
            first["content"] = c + [{"type": "text", "text": block}]
        elif isinstance(c, str) and c.strip():
            first["content"] = f"{c}\n\n{block}"
        else:
            first["content"] = block
    else:
        out.insert(0, {"role": "system", "content": block})
    return out


@dataclass
class StreamWatch:
    """Reads the SSE bytes passing through: the answer's text, and whether it completed."""

    text: list[str] = field(default_factory=list)
    done: bool = False
    failed: str = ""
    tool_call: bool = False
    _buf: bytes = b""

    def finish(self) -> None:
        """The stream has ended: its last line counts without a newline after it (a
        complete answer whose "data: [DONE]" had none was not remembered: a trial)."""
        if self._buf:
            self.feed(b"\n")

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for raw in lines:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                continue
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("error"):
                err = obj["error"]
                self.failed = str(err.get("message") if isinstance(err, dict) else err)[:200]
                continue
            choices = obj.get("choices") if isinstance(obj, dict) else None
            for choice in choices if isinstance(choices, list) else []:
                # the first choice only (n=2 stored both answers mixed word by word), and
                # nothing of a chunk not shaped as one (it ended the relay: a trial)
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                self.tool_call = self.tool_call or calls_tools(choice)
                delta = choice.get("delta")
                if isinstance(delta, dict) and isinstance(delta.get("content"), (str, list)):
                    self.text.append(content_text(delta["content"]))

    @property
    def answer(self) -> str:
        return "".join(self.text)


class SessionPool:
    """One MemoryService per session name, opened for writing on first use. At most
    ``max_open`` stay open: opening one more closes those no request has used for
    ``idle_seconds`` (never the default). Each open session holds its file, a writer lock
    and threads: a client naming a new session per request ran the proxy out of file
    handles, and held every one of them from Nexus (a trial)."""

    def __init__(self, opener, default: str, max_open: int = 16, idle_seconds: float = 600.0,
                 clock=time.monotonic) -> None:
        self._opener = opener  # name -> MemoryService (raises SessionNameError/SessionFileError)
        self.default = default[:-3] if default.endswith(".db") and len(default) > 3 else default
        self.max_open = max_open
        self.idle_seconds = idle_seconds  # longer than any request: one in flight is never closed under it
        self._clock = clock
        self._services: dict[str, MemoryService] = {}
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()

    def _key(self, name: str | None) -> str:
        """One key per session file: "family.db" is "family" (as ``session_path`` reads
        it), or the second was refused as open for writing by the first (a trial)."""
        return bare_session_name(name or self.default)

    def cached(self, name: str | None) -> MemoryService | None:
        key = self._key(name)
        svc = self._services.get(key)
        if svc is not None:
            self._used[key] = self._clock()
        return svc

    def get(self, name: str | None) -> MemoryService:
        key = self._key(name)
        with self._lock:
            svc = self._services.get(key)
            if svc is None:
                self._close_idle()
                svc = self._opener(key)
                self._services[key] = svc
            self._used[key] = self._clock()
            return svc

    def _close_idle(self) -> None:
        """Room for one more: the longest idle sessions go, if idle long enough."""
        over = len(self._services) + 1 - self.max_open
        if over <= 0:
            return
        now = self._clock()
        idle = sorted((t, k) for k, t in self._used.items()
                      if k in self._services and k != self.default and now - t >= self.idle_seconds)
        for _t, key in idle[:over]:
            self._services.pop(key).close()
            self._used.pop(key, None)
            log.info("session %s closed: not used for %.0f s (at most %d stay open)", key, now - _t, self.max_open)

    def close(self) -> None:
        with self._lock:
            for svc in self._services.values():
                svc.close()
            self._services.clear()
            self._used.clear()


class MemoryProxy:
    """The proxy's routes over a session pool and an upstream URL (``.../v1``)."""

    def __init__(self, pool: SessionPool, upstream: str, upstream_key: str | None = None,
                 timeout: float = 120.0, budget_tokens: int | None = None) -> None:
        self.pool = pool
        self.upstream = upstream.rstrip("/")  # what requests go to (httpx uses a user:password in it)
        self.shown = shown_url(self.upstream)  # what clients and the log are told: never the password
        self.upstream_key = upstream_key
        self.timeout = timeout
        self.budget_tokens = budget_tokens
        self.client = None  # httpx.AsyncClient, made in the app's lifespan

    # --- the app ----------------------------------------------------------------------------

    def app(self, token: str | None = None, max_body: int | None = None):
        import contextlib

        import httpx
        from starlette.applications import Starlette
        from starlette.routing import Route

        from .httpguard import MAX_BODY_BYTES, guard

        @contextlib.asynccontextmanager
        async def lifespan(_app):
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
            async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout, connect=10.0), limits=limits) as c:
                self.client = c
                yield
            self.client = None

        app = Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.models, methods=["GET"]),
        ], lifespan=lifespan, exception_handlers={404: not_served, 405: not_served})
        return guard(app, token, max_body or MAX_BODY_BYTES)

    def _headers(self) -> dict:
        # the proxy's own key for the upstream: a client's Authorization (the proxy token) is never forwarded
        h = {"Content-Type": "application/json"}
        if self.upstream_key:
            h["Authorization"] = f"Bearer {self.upstream_key}"
        return h

    # --- /v1/models -------------------------------------------------------------------------

    async def models(self, request):
        from urllib.parse import quote

        import httpx
        from starlette.responses import Response

        # /v1/models or /v1/models/<id>, and nothing else: "../../admin" in an id reached any
        # path of the upstream with the proxy's credentials (a developer's trial)
        parts = [p for p in str(request.path_params.get("model", "")).split("/") if p]
        if any(p in (".", "..") for p in parts):
            return _error(400, "a model id cannot hold '.' or '..' path segments", "invalid_request_error")
        path = "/models" + "".join("/" + quote(p, safe="") for p in parts)
        try:
            r = await self.client.get(self.upstream + path, headers=self._headers())
        except httpx.HTTPError as exc:
            return _error(502, f"the upstream {self.shown} did not answer: {type(exc).__name__}", "upstream_error")
        return Response(r.content, status_code=r.status_code,
                        media_type=r.headers.get("content-type", "application/json"))

    # --- /v1/chat/completions -------------------------------------------------------------------

    async def chat(self, request):
        import httpx
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response

        from trace_core import SessionFileError

        started = time.perf_counter()
        try:
            body = json.loads(await request.body(), parse_constant=no_json_number)
        except NotJSONNumber as exc:
            return _error(400, f"the request body is not JSON: {exc}", "invalid_request_error")
        except ValueError:
            return _error(400, "the request body is not JSON", "invalid_request_error")
        except RecursionError:  # "[[[[…" 200,000 deep was a 500 with a traceback in the log (a trial)
            return _error(400, "the request body is nested too deeply to read", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object", "invalid_request_error")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "the request needs a non-empty 'messages' list", "invalid_request_error")
        stream_given = body.get("stream")  # "yes" was relayed as a stream, unsaid (a trial); 1 == True: by kind
        if stream_given is not None and not isinstance(stream_given, bool):
            return _error(400, "'stream' must be true or false", "invalid_request_error")
        problem = messages_problem(messages) or options_problem(body)
        if problem:  # a client's mistake, said here: the upstream answered 500 with its traceback (trial)
            return _error(400, problem, "invalid_request_error")
        name = request.headers.get(SESSION_HEADER)
        try:
            # an open session is a dict lookup; only opening one (file, lock) goes to a thread
            svc = self.pool.cached(name) or await run_in_threadpool(self.pool.get, name)
        except SessionNameError as exc:
            return _error(400, str(exc), "invalid_request_error")
        except SessionFileError as exc:
            said = served_problem(name or self.pool.default, exc)
            log.warning("%s: refused with 409", said)
            return _error(409, said, "session_error")
        turn = asked_turn(messages)
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
            turn.structured = fmt["type"]
        user = turn.user
        replaces = None
        memory = ""
        if user:
            recent = list(turn.earlier)
            # "regenerate": the answer it asks again for was rejected, so it is not recalled as
            # memory, and the new answer takes its place (it was injected, and the question kept twice)
            replaces = await run_in_threadpool(svc.regenerating, user, turn.context)
            if replaces is not None:
                recent.append({"role": "user", "content": user})
            t_recall = time.perf_counter()
            try:
                mem = await run_in_threadpool(svc.recall, turn.query, self.budget_tokens, recent)
            except Exception as exc:  # the answer matters more than the memory: forward without it
                log.warning("session %s: recall failed (%s: %s); forwarding without memory", svc.name,
                            type(exc).__name__, str(exc)[:200])
                memory = ", no memory (recall failed)"
            else:
                log.debug("session %s: recall %.3f s, %d memory tokens", svc.name,
                          time.perf_counter() - t_recall, mem.tokens)
                memory = f", {mem.tokens} memory tokens" + (", a regenerate" if replaces is not None else "")
                turn.memory = mem.block
                body = dict(body, messages=with_memory(messages, mem.block))
        stream = bool(body.get("stream"))
        req = self.client.build_request("POST", self.upstream + "/chat/completions", headers=self._headers(),
                                        content=json.dumps(body).encode())
        t_up = time.perf_counter()
        try:
            upstream = await unless_gone(request, self.client.send(req, stream=True))
        except ClientGone:  # a long prompt still being read: nobody waits for its answer
            return self._gone(svc, started, memory)
        except httpx.HTTPError as exc:
            log.warning("session %s: upstream unreachable (%s)", svc.name, type(exc).__name__)
            return _error(502, f"the upstream {self.shown} did not answer: {type(exc).__name__}", "upstream_error")
        ctype = upstream.headers.get("content-type", "application/json")
        log.debug("session %s: upstream headers after %.3f s (%.3f s since the request)", svc.name,
                  time.perf_counter() - t_up, time.perf_counter() - started)
        if upstream.status_code != 200 or not stream:
            try:
                raw = await unless_gone(request, upstream.aread())
            except ClientGone:
                return self._gone(svc, started, memory)
            except httpx.HTTPError as exc:  # logged as every other outcome is (it was not: a trial)
                log.warning("session %s: chat 502 in %.2f s: the upstream's answer broke off (%s, not remembered)",
                            svc.name, time.perf_counter() - started, type(exc).__name__)
                return _error(502, f"the upstream's answer broke off: {type(exc).__name__}", "upstream_error")
            finally:
                await upstream.aclose()
            stored = "" if user else " (no text in the last user message: not remembered)"
            if upstream.status_code == 200 and user:
                if await request.is_disconnected():  # gone as the answer came: not remembered
                    return self._gone(svc, started, memory)
                stored = await self._remember_json(svc, turn, raw, replaces)
            log.info("session %s: %s %d in %.2f s%s%s", svc.name, "stream" if stream else "chat",
                     upstream.status_code, time.perf_counter() - started, memory, stored)
            return Response(raw, status_code=upstream.status_code, media_type=ctype)
        return self._stream(svc, turn, upstream, ctype, started, replaces, memory)

    @staticmethod
    def _gone(svc: MemoryService, started: float, memory: str):
        from starlette.responses import Response

        log.info("session %s: chat given up in %.2f s: the client hung up before the answer came (not remembered)%s",
                 svc.name, time.perf_counter() - started, memory)
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it

    async def _remember_json(self, svc: MemoryService, turn: AskedTurn, raw: bytes, replaces: int | None) -> str:
        try:
            choice = json.loads(raw)["choices"][0]
            answer = choice["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return " (not an answer: not remembered)"
        if calls_tools(choice):
            return " (a tool call: its loop's answer is remembered)"
        # text parts too: Mistral's reasoning models answer [{"type": "thinking", …}, {"type": "text", …}]
        return await self._remember(svc, turn, content_text(answer), replaces)

    async def _remember(self, svc: MemoryService, turn: AskedTurn, answer: str, replaces: int | None) -> str:
        from starlette.concurrency import run_in_threadpool

        from .memory_service import NothingToRemember

        if turn.structured:
            return f" (structured output, response_format {turn.structured}: not remembered)"
        # the client's start of the answer, unless the upstream said it again (llama.cpp's
        # server does not go on from an assistant message: it was stored twice, a trial)
        if turn.prefill.strip() and not strip_think(answer).startswith(turn.prefill.strip()):
            answer = turn.prefill + answer
        answer = strip_think(answer)
        if not answer:
            return " (empty answer: not remembered)"
        try:
            r = await run_in_threadpool(lambda: svc.remember(turn.user, answer, None, replaces, turn.context,
                                                             turn.given))
        except NothingToRemember:
            return " (the answer says nothing: not remembered)"
        except Exception as exc:  # the client still gets its answer; the failure is logged in words
            # the engine's messages name the problem (locked, read-only, disk full), not the text
            log.error("session %s: the exchange could not be stored: %s: %s", svc.name, type(exc).__name__,
                      str(exc)[:200])
            return " (NOT remembered)"
        return f" → exchange #{r.exchange}" + (" (regenerated: the answer before it is replaced)" if r.replaced else "")

    def _stream(self, svc: MemoryService, turn: AskedTurn, upstream, ctype: str, started: float,
                replaces: int | None, memory: str):
        import httpx
        from starlette.responses import StreamingResponse

        watch = StreamWatch()

        async def relay():
            outcome = "cancelled"
            try:
                async for chunk in upstream.aiter_raw():
                    watch.feed(chunk)
                    last = watch.done and not watch.failed and bool(turn.user)
                    if last:
                        # stored before the client sees [DONE]: an acknowledged answer is a kept one
                        outcome = "done" + await self.remember_streamed(svc, turn, watch, replaces)
                    yield chunk
                    if last:
                        break
                else:  # the upstream's own error text is the client's to read, not the log's
                    watch.finish()
                    if watch.done and not watch.failed and turn.user:
                        outcome = "done" + await self.remember_streamed(svc, turn, watch, replaces)
                    else:
                        outcome = "failed: the upstream sent an error (not remembered)" if watch.failed else (
                            "done" if watch.done else "ended without [DONE] (not remembered)")
            except httpx.HTTPError as exc:
                outcome = f"broke off ({type(exc).__name__}, not remembered)"
                err = {"error": {"message": f"the upstream's stream broke off: {type(exc).__name__}",
                                 "type": "upstream_error"}}
                yield f"data: {json.dumps(err)}\n\n".encode()
            finally:
                await upstream.aclose()
                log.info("session %s: stream %s in %.2f s%s", svc.name, outcome, time.perf_counter() - started,
                         memory)

        return StreamingResponse(relay(), status_code=200, media_type=ctype.split(";")[0] or "text/event-stream",
                                 headers={"Cache-Control": "no-cache"})


    async def remember_streamed(self, svc: MemoryService, turn: AskedTurn, watch: StreamWatch,
                                replaces: int | None) -> str:
        if watch.tool_call:
            return " (a tool call: its loop's answer is remembered)"
        return await self._remember(svc, turn, watch.answer, replaces)


def messages_problem(messages: list) -> str:
    """What is wrong with a request's messages, in words ("" when nothing): each an
    object with a role (a string) and a content that is text, a list of parts or null."""
    for k, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{k}] must be an object with 'role' and 'content'"
        if not isinstance(m.get("role"), str) or not m["role"]:
            return f"messages[{k}] needs a 'role' (\"system\", \"user\", \"assistant\" …)"
        content = m.get("content")
        if not isinstance(content, (str, list, type(None))):
            return f"messages[{k}].content must be text, a list of parts or null"
        for j, part in enumerate(content if isinstance(content, list) else []):
            # {"type": "text", "text": 5} was a 500 with a traceback in the log (a developer's trial)
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                return f"messages[{k}].content[{j}] must be an object with a 'type'"
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                return f"messages[{k}].content[{j}].text must be text"
        said = tool_message_problem(m, f"messages[{k}]")
        if said:
            return said
    return ""


def tool_message_problem(m: dict, where: str) -> str:
    """A tool loop's messages as the OpenAI API defines them: llama.cpp's server answered
    "arguments" as an object, or a tool result with no "tool_call_id", with 500 and its
    own source file's path (a trial)."""
    if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
        return f"{where} (a tool result) needs the 'tool_call_id' of the call it answers"
    calls = m.get("tool_calls")
    if calls is None:
        return ""
    if not isinstance(calls, list):
        return f"{where}.tool_calls must be a list"
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"{where}.tool_calls[{j}] needs a 'function' with a 'name'"
        if not isinstance(fn.get("arguments"), str):
            return (f"{where}.tool_calls[{j}].function.arguments must be a JSON string "
                    "(json.dumps of the arguments), as the model wrote it")
    return ""


def options_problem(body: dict) -> str:
    """What is wrong with a request's options the proxy can tell ("" when nothing)."""
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return "'tools' must be a list of tool objects"
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        return "'n' (how many answers) must be a whole number, 1 or more"
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and isinstance(fmt.get("type"), str)):
        return "'response_format' must be an object with a 'type' (\"text\", \"json_object\", \"json_schema\")"
    return ""


def check_upstream(upstream: str, key: str | None) -> str:
    """What is wrong with the upstream URL, in words ("" when it lists its models)."""
    import httpx

    hint = "the base URL ends in /v1 (LM Studio: http://127.0.0.1:1234/v1, Ollama: http://127.0.0.1:11434/v1)"
    url, upstream = upstream, shown_url(upstream)
    try:
        r = httpx.get(url.rstrip("/") + "/models", timeout=5,
                      headers={"Authorization": f"Bearer {key}"} if key else None)
    except httpx.HTTPError as exc:
        return f"{upstream} does not answer yet ({type(exc).__name__}); requests fail until it does"
    if r.status_code == 404:
        return f"{upstream}/models was not found: check that {hint}"
    if r.status_code != 200:
        return f"{upstream}/models answered HTTP {r.status_code}"
    return ""


def run(config, upstream: str, port: int = 8788, host: str = "127.0.0.1", session: str | None = None,
        token: str | None = None, embed_fn=None) -> int:
    import sys

    import uvicorn

    from trace_core import SessionFileError

    from .httpguard import UnsafeBindError, check_bind, listening_socket
    from .memory_service import DEFAULT_SESSION, open_service, session_path

    try:
        check_bind(host, token)
        session_path(session or DEFAULT_SESSION)
    except (UnsafeBindError, SessionNameError) as exc:
        print(f"nexus proxy: {exc}", file=sys.stderr)
        return 2
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        print(f"nexus proxy: cannot listen on {host}:{port}: {exc.strerror or exc} (another proxy, or "
              "another program, has it: choose another with --port)", file=sys.stderr)
        return 2
    if embed_fn is None:
        from trace_core.embedders import make_embedder

        embed_fn = make_embedder(config.section("memory").embed, config.base_url, config.api_key)
    pool = SessionPool(lambda name: open_service(config, name, embed_fn=embed_fn, base_url=upstream),
                       session or DEFAULT_SESSION, idle_seconds=max(600.0, 4 * config.section("server").timeout))
    try:
        first = pool.get(None)  # the default session opens now: a locked or bad file stops here
        first.tree.embed_fn.embed("warm up")
    except SessionFileError as exc:
        sock.close()
        print(f"nexus proxy: {served_problem(session or DEFAULT_SESSION, exc)}", file=sys.stderr)
        return 2
    proxy = MemoryProxy(pool, upstream, config.api_key, config.section("server").timeout)
    quiet_logging()
    print(f"nexus proxy: http://{host}:{port}/v1 → {shown_url(upstream)}, session {first.name!r}"
          + (" (bearer token required)" if token else ""), file=sys.stderr)
    problem = check_upstream(upstream, config.api_key)
    if problem:  # a warning, not a refusal: the model server may start after the proxy
        print(f"nexus proxy: warning: {problem}", file=sys.stderr)
    try:
        server = uvicorn.Server(uvicorn.Config(proxy.app(token), log_level="warning", access_log=False))
        try:  # on the socket bound above; Ctrl+C ends it as uvicorn.run's own loop does
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
    finally:
        pool.close()
    return 0

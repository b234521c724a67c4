"""Streaming a reply from an OpenAI-compatible server into its ``Turn``, chunk by chunk."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable

from trace_core.llm import shown_url
from trace_core.tokens import count_tokens

from . import events as ev
from .events import FailureKind
from .turn import TAGS, ReplyError, Turn, opened, strip_think

TINY_MAX_TOKENS = 32  # a limit this low, not a full context, is why a reply is cut before its first word


def stream_reply(client, turn: Turn, model: str, messages: list[dict], sampling: dict,
                 emit: Callable[[object], None]) -> str | None:
    """Stream the reply into ``turn.partial``; returns the finish reason, or None when
    cancelled. The request runs in its own thread so a cancel never waits for the
    server's first byte; what an abandoned request later brings goes nowhere."""
    q: queue.Queue = queue.Queue()

    def produce() -> None:
        stream = None
        try:
            stream = client.chat.completions.create(model=model, stream=True, messages=messages, **sampling)
            if turn.cancelled.is_set():
                return
            not_sse = not_a_stream(stream)
            if not_sse is not None:
                q.put(not_sse)
                return
            for chunk in stream:
                q.put(("chunk", chunk))
                if turn.cancelled.is_set():
                    return
            q.put(("end", None))
        except BaseException as exc:
            q.put(("error", exc))
        finally:
            if stream is not None:
                try:
                    stream.close()
                except Exception:
                    pass

    threading.Thread(target=produce, name=f"reply-{turn.id}", daemon=True).start()
    finish = None
    thought = False  # reasoning came (a model can spend its whole max_tokens on it)
    last_text = time.monotonic()  # when text (or reasoning) last came
    while True:
        if turn.cancelled.is_set():
            return None
        try:
            kind, item = q.get(timeout=0.05)
        except queue.Empty:
            continue
        if turn.cancelled.is_set():
            return None
        if kind == "error":
            if turn.partial or thought:  # it had answered: said as a reply broken off, not one never begun
                raise broken_off(item, time.monotonic() - last_text, client)
            raise item
        if kind == "whole":  # a JSON completion where a stream was asked for
            content, finish = item
            if content:
                turn.partial += content
                emit(ev.ReplyChunk(content, turn.id))
        elif kind == "chunk":
            choice = item.choices[0] if item.choices else None
            if choice is None:
                continue
            delta = choice.delta.content if choice.delta else None
            # LM Studio / llama.cpp's reasoning format ("reasoning" in Ollama's and newer vLLM's): shown live,
            # folded, never stored; Ollama's went unread, and a model that thought to its limit was said
            # to have a full context (a trial)
            reasoning = (getattr(choice.delta, "reasoning_content", None)
                         or getattr(choice.delta, "reasoning", None)) if choice.delta else None
            if not isinstance(reasoning, str):
                reasoning = None
            if reasoning or delta:
                last_text = time.monotonic()
            if reasoning:
                thought = True
                turn.reasoned += len(reasoning)
                emit(ev.ReasoningChunk(reasoning, turn.id))
            if delta:
                turn.partial += delta
                emit(ev.ReplyChunk(delta, turn.id))
            if choice.finish_reason:
                finish = choice.finish_reason
        if kind in ("end", "whole"):
            if finish is None:
                if turn.partial.strip() and refused(client):  # a server killed as it wrote (no chunked body)
                    raise lost(client, gone=True)
                # said without the protocol's field name ("no finish_reason" read as jargon, a trial)
                raise ReplyError("the reply stream ended before the server finished it (the connection "
                                 "dropped, the server could not fit the prompt in the model's context, or "
                                 "it sent something that is no reply)"
                                 + ("" if turn.partial.strip() else "; no text came"))
            if finish == "length" and not strip_think(turn.partial):
                limit = sampling.get("max_tokens") or 0
                if (thought or "<think>" in opened(turn.partial)) and cut_by_server(turn, limit):
                    raise ReplyError("the model server stopped the model while it was still thinking, after about "
                                     f"{generated(turn):,} tokens — short of the max_tokens limit"
                                     f"{f' ({limit})' if limit else ''}: its own reply-length limit or a full "
                                     "context did; no answer came")
                if thought or "<think>" in opened(turn.partial):  # "context is full" said of a model that only thought
                    raise ReplyError(f"the model spent its whole max_tokens limit{f' ({limit})' if limit else ''} "
                                     "thinking and gave no answer; /set max_tokens raises it")
                if 0 < limit <= TINY_MAX_TOKENS:  # /set max_tokens 1 read as a full context (trial)
                    raise ReplyError(f"the max_tokens limit ({limit}) ended the reply before its first word; "
                                     "/set max_tokens raises it")
                raise ReplyError("the model's context is full: no room left for a reply")
            return finish


def generated(turn: Turn) -> int:
    """The reply's tokens so far, reasoning included, by the estimate (characters / 4)."""
    return count_tokens(turn.partial) + -(-turn.reasoned // 4)


def cut_by_server(turn: Turn, limit: int) -> bool:
    """A reply ended for its length ("length") that cannot have reached ``limit``, Nexus's
    max_tokens: fewer characters than that, even at a token a character. The server's own
    limit cut it (Ollama's num_predict, LM Studio's response length, llama.cpp's
    --n-predict) or its context filled; "cut at the max_tokens limit (2048)" under a
    twelve-word reply was not true (a trial)."""
    return limit > 0 and len(turn.partial) + turn.reasoned < limit


def broken_off(exc: BaseException, quiet: float, client) -> BaseException:
    """The failure of a reply that had begun, in words (``exc`` as it is when it has none):
    the timeout of a stream that went quiet is no server that "did not answer", a server
    killed mid-reply none that "cannot be reached" (trials)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        said = ReplyError(f"the model server at {server_of(client)} stopped sending mid-reply (no new text for "
                          f"{quiet:.0f} s)")
    elif isinstance(exc, openai.APIConnectionError):  # reset, or closed mid-body: a server killed as it wrote
        said = lost(client, refused(client))
    else:
        return exc
    said.__cause__ = exc
    return said


def server_of(client) -> str:
    return shown_url(str(client.base_url).rstrip("/"))


def lost(client, gone: bool) -> ReplyError:
    """The connection broke mid-reply; ``gone``: nothing listens there now (a server
    killed, not a connection dropped)."""
    return ReplyError(f"the connection to the model server at {server_of(client)} was lost mid-reply"
                      + (", and nothing answers there now (did it stop or crash?)" if gone else ""),
                      FailureKind.GONE_MID_REPLY if gone else FailureKind.LOST_MID_REPLY)


def refused(client) -> bool:
    """Nothing listens at the server's address now (its model list is refused)."""
    import openai

    try:
        client.with_options(timeout=2.0, max_retries=0).models.list()
    except openai.APITimeoutError:  # there, and busy: not known to be gone
        return False
    except openai.APIConnectionError:
        return True
    except Exception:
        return False
    return False


def not_a_stream(stream) -> tuple | None:
    """An HTTP 200 whose body is not an event stream: an HTML page is a failure with
    its text; a JSON body is an error or a whole (non-streamed) completion."""
    response = getattr(stream, "response", None)
    ctype = (response.headers.get("content-type", "") if response is not None else "").lower()
    if not ctype or "event-stream" in ctype:
        return None
    raw = response.read().decode("utf-8", "replace")
    if "json" in ctype:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("choices"):
            c = body["choices"][0]
            return ("whole", ((c.get("message") or {}).get("content") or "", c.get("finish_reason")))
        if isinstance(body, dict) and body.get("error"):
            err = body["error"]
            msg = err.get("message", "") if isinstance(err, dict) else str(err)
            return ("error", ReplyError(f"the model server answered with an error: {msg[:300]}"))
    words = " ".join(TAGS.sub(" ", raw).split())[:200]
    return ("error", ReplyError(f"the model server answered {ctype.split(';')[0]}, not a reply"
                                + (f": {words}" if words else "")))

"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for deterministic tests.

The real ``openai`` client talks real HTTP to it. Each chat request is answered by
``server.responder(request_json) -> Reply``; every request is recorded. It also
speaks enough of LM Studio's native REST API and Ollama's API for the model-manager
tests (``/api/v1/models``, ``/api/v1/models/load|unload``, ``/api/ps``,
``/api/generate``).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0  # seconds before answering (a slow server)
    chunk_delay: float = 0.0  # seconds between streamed chunks
    chunks: list[str] | None = None  # streamed pieces; default: content split in words
    error: str = "scripted error"
    reasoning: list[str] | None = None  # streamed first as delta.reasoning_content (LM Studio, llama.cpp)
    reasoning_field: str = "reasoning_content"  # "reasoning": Ollama's /v1 and newer vLLM's name for it
    body: str | None = None  # answer HTTP ``status`` with this raw body instead (e.g. an HTML page)
    content_type: str = "text/html; charset=utf-8"  # of ``body``
    drop: bool = False  # stream the pieces, then close without finish_reason and [DONE]
    finish: str = "stop"  # the finish_reason of the last chunk ("length": cut at max_tokens)
    error_event: str | None = None  # after the pieces, an {"error": …} event in the stream (a failing upstream)
    stall: float = 0.0  # after the pieces, seconds of silence before the end (a server that stalls mid-reply)
    die: bool = False  # after the pieces (and the stall), the connection is reset: a server killed mid-reply
    headers: dict[str, str] = field(default_factory=dict)  # of an error answer (``status`` not 200): Retry-After


@dataclass
class Recorded:
    method: str
    path: str
    body: dict | None
    authorization: str | None = None  # the request's Authorization header


@dataclass
class ServerState:
    responder: Callable[[dict], Reply] = lambda req: Reply('{"action": "continue"}')
    reject_formats: set[str] = field(default_factory=set)  # response_format types refused
    reject_status: int = 400  # LM Studio: 400; llama-cpp-python's server: 500
    embeddings_error: str | None = None  # /v1/embeddings answers HTTP 500 with this (a chat-only llama.cpp)
    requests: list[Recorded] = field(default_factory=list)
    models: list[str] = field(default_factory=lambda: ["test-model"])
    models_delay: float = 0.0  # seconds before /v1/models answers (a server that stalls)
    # LM Studio / Ollama model state: key -> {"type": "llm"|"vlm", "loaded": [instance ids]}
    catalogue: dict[str, dict] = field(default_factory=dict)
    refuse_load: set[str] = field(default_factory=set)
    load_delay: dict[str, float] = field(default_factory=dict)  # key -> seconds a load takes (a slow swap)
    # llama-cpp-python's /extras/tokenize/count: tokens a character, or None (no such route)
    tokens_per_char: float | None = None
    required_key: str | None = None  # other bearer keys get HTTP 401, as from a server with a key set
    lock: threading.Lock = field(default_factory=threading.Lock)


def _completion(content: str, model: str) -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _chunk(delta: dict, model: str, finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: ServerState  # set on the subclass

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _body(self) -> dict | None:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return None
        raw = self.rfile.read(n)
        try:
            return json.loads(raw)
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def _key_refused(self) -> bool:
        key = self.state.required_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._send(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
        return True

    def do_GET(self) -> None:
        st = self.state
        with st.lock:
            st.requests.append(Recorded("GET", self.path, None, self.headers.get("Authorization")))
        if self._key_refused():
            return
        if self.path.rstrip("/") == "/v1/models":
            time.sleep(st.models_delay)
            return self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in st.models]})
        if self.path.rstrip("/") == "/api/v1/models":
            models = [
                {"type": info.get("type", "llm"), "key": key, "display_name": key,
                 "loaded_instances": [{"id": i} for i in info.get("loaded", [])],
                 "capabilities": {"vision": info.get("type") == "vlm"}}
                for key, info in st.catalogue.items()
            ]
            return self._send(200, {"models": models})
        if self.path.rstrip("/") == "/api/tags":  # Ollama: the models it has
            return self._send(200, {"models": [{"name": key, "model": key} for key in st.catalogue]})
        if self.path.rstrip("/") == "/api/ps":
            models = [{"name": key, "model": key} for key, info in st.catalogue.items() if info.get("loaded")]
            return self._send(200, {"models": models})
        self._send(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        st = self.state
        body = self._body()
        with st.lock:
            st.requests.append(Recorded("POST", self.path, body, self.headers.get("Authorization")))
        if self._key_refused():
            return
        path = self.path.rstrip("/")
        if path == "/v1/chat/completions":
            return self._chat(body or {})
        if path == "/extras/tokenize/count" and st.tokens_per_char is not None:
            return self._send(200, {"count": int(len((body or {}).get("input", "")) * st.tokens_per_char) + 1})
        if path == "/v1/embeddings" and st.embeddings_error:
            return self._send(500, {"error": {"message": st.embeddings_error, "type": "internal_server_error"}})
        if path == "/v1/embeddings":
            inputs = (body or {}).get("input", [])
            inputs = [inputs] if isinstance(inputs, str) else inputs
            data = [{"object": "embedding", "index": i, "embedding": [float(len(t) % 7), 1.0, 0.5]}
                    for i, t in enumerate(inputs)]
            return self._send(200, {"object": "list", "data": data, "model": (body or {}).get("model", "")})
        if path == "/api/v1/models/load":
            key = (body or {}).get("model", "")
            if key in st.refuse_load or key not in st.catalogue:
                return self._send(400, {"error": f"cannot load {key}"})
            time.sleep(st.load_delay.get(key, 0.0))
            with st.lock:
                inst = f"{key}"
                st.catalogue[key].setdefault("loaded", []).append(inst)
            return self._send(200, {"type": "llm", "instance_id": inst, "status": "loaded"})
        if path == "/api/v1/models/unload":
            inst = (body or {}).get("instance_id", "")
            with st.lock:
                for info in st.catalogue.values():
                    if inst in info.get("loaded", []):
                        info["loaded"].remove(inst)
                        return self._send(200, {"instance_id": inst})
            return self._send(404, {"error": f"no instance {inst}"})
        if path == "/api/generate":
            key = (body or {}).get("model", "")
            if key not in st.catalogue and f"{key}:latest" in st.catalogue:  # as Ollama reads an untagged name
                key = f"{key}:latest"
            if key in st.refuse_load or key not in st.catalogue:
                return self._send(404, {"error": f"model '{key}' not found"})
            with st.lock:
                if (body or {}).get("keep_alive") == 0:
                    st.catalogue[key]["loaded"] = []
                else:
                    st.catalogue[key]["loaded"] = [key]
            return self._send(200, {"model": key, "response": "", "done": True})
        self._send(404, {"error": f"no route {self.path}"})

    def _chat(self, body: dict) -> None:
        st = self.state
        fmt = (body.get("response_format") or {}).get("type")
        if fmt and fmt in st.reject_formats:
            return self._send(st.reject_status, {"error": {
                "message": f"1 validation error: body.response_format.type: input should be 'text' or 'json_object', got {fmt}"}})
        reply = st.responder(body)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.body is not None:
            data = reply.body.encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if reply.status != 200:
            return self._send(reply.status, {"error": {"message": reply.error}}, reply.headers)
        model = body.get("model", "test-model")
        if not body.get("stream"):
            return self._send(200, _completion(reply.content, model))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        pieces = reply.chunks if reply.chunks is not None else [w + " " for w in reply.content.split(" ")]
        try:
            self.wfile.write(_chunk({"role": "assistant", "content": ""}, model))
            for piece in reply.reasoning or []:
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
                self.wfile.write(_chunk({"content": "", reply.reasoning_field: piece}, model))
                self.wfile.flush()
            for piece in pieces:
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
                self.wfile.write(_chunk({"content": piece}, model))
                self.wfile.flush()
            if reply.stall:
                time.sleep(reply.stall)
            if reply.die:  # as a killed process's socket: reset, mid-body
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            if reply.error_event is not None:
                self.wfile.write(f"data: {json.dumps({'error': {'message': reply.error_event}})}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True
                return
            if reply.drop:  # a connection lost mid-reply: no finish_reason, no [DONE]
                self.close_connection = True
                return
            self.wfile.write(_chunk({}, model, reply.finish))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client cancelled the stream (or gave up on a stall)
        self.close_connection = True


class ScriptedServer:
    """``with ScriptedServer() as srv: srv.base_url ...``"""

    def __init__(self, port: int = 0) -> None:
        self.state = ServerState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def respond(self, fn: Callable[[dict], Reply]) -> None:
        self.state.responder = fn

    def script(self, *replies: Reply | str) -> None:
        """Answer requests with these replies in order (the last one repeats)."""
        queue = [Reply(r) if isinstance(r, str) else r for r in replies]
        lock = threading.Lock()

        def responder(_req: dict) -> Reply:
            with lock:
                return queue.pop(0) if len(queue) > 1 else queue[0]

        self.state.responder = responder

    def chat_requests(self) -> list[dict]:
        return [r.body for r in self.state.requests if r.path.rstrip("/") == "/v1/chat/completions"]

    def calls(self) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.state.requests]

"""Safe defaults shared by ``nexus mcp --http`` and ``nexus proxy``.

Loopback only unless a token is given; with a token every request must carry
``Authorization: Bearer <token>`` (401 otherwise). The token is never logged.
"""

from __future__ import annotations

import hmac
import json
import os

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "NEXUS_TOKEN"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a chat request with a long history fits; a runaway paste does not


class UnsafeBindError(ValueError):
    pass


def resolve_token(flag: str | None) -> str | None:
    """``--token`` or, to keep it out of the process list, ``$NEXUS_TOKEN``."""
    token = flag if flag is not None else os.environ.get(TOKEN_ENV)
    return token or None


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token."""
    if host not in LOOPBACK and not token:
        raise UnsafeBindError(
            f"refusing to listen on {host}: another host can reach it, so a token is required "
            f"(--token T or ${TOKEN_ENV}); clients then send 'Authorization: Bearer T'")
    if token is not None and len(token) < 8:
        raise UnsafeBindError("the token is too short: use at least 8 characters")


class BearerAuth:
    """ASGI middleware: every HTTP request carries the token, or gets 401."""

    def __init__(self, app, token: str) -> None:
        self.app = app
        self._expected = token.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            scheme, _, given = dict(scope.get("headers") or []).get(b"authorization", b"").partition(b" ")
            # the scheme's name in any case (RFC 7235): "bearer tok" was refused (a trial)
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._expected):
                body = b'{"error": {"message": "missing or wrong bearer token", "type": "unauthorized"}}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def size_words(n: int) -> str:
    return f"{n / 2**20:g} MB" if n >= 2**20 else f"{n:,} bytes"


class BodyLimit:
    """ASGI middleware: a request body over ``max_body`` gets 413 — in JSON, as OpenAI
    clients read an error's message, saying the limit (the SDK's limiter answered the
    plain text "Request body too large", which named no size: a trial)."""

    def __init__(self, app, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope, receive, send) -> None:
        from mcp.server.transport_security import RequestBodyLimitMiddleware

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reached = False  # once the app runs, every response is its own (a proxied upstream's 413 too)

        async def app(scope, receive, send) -> None:
            nonlocal reached
            reached = True
            await self.app(scope, receive, send)

        body = json.dumps({"error": {
            "message": f"the request body is over {size_words(self.max_body)}, this server's limit",
            "type": "request_too_large"}}).encode()

        async def said(message) -> None:
            if reached:
                await send(message)
            elif message["type"] == "http.response.start":
                await send({"type": "http.response.start", "status": message["status"],
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
            elif message["type"] == "http.response.body":
                await send({"type": "http.response.body", "body": body})

        await RequestBodyLimitMiddleware(app, self.max_body)(scope, receive, said)


def guard(app, token: str | None, max_body: int = MAX_BODY_BYTES):
    """The app behind a body size limit (413) and, with a token, the bearer check."""
    app = BodyLimit(app, max_body)
    return BearerAuth(app, token) if token else app


def listening_socket(host: str, port: int):
    """The server's socket (proxy, MCP over HTTP), bound before anything else is done: a
    port in use is said at once, before a session file is made (trials found one left
    behind, after an address was announced that was never served)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock

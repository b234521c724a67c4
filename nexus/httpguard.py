"""Safe defaults shared by ``nexus mcp --http`` and ``nexus proxy``.

Loopback only unless a token is given; with a token every request must carry
``Authorization: Bearer <token>`` (401 otherwise). The token is never logged.
"""

from __future__ import annotations

import hmac
import json
import os

TOKEN_ENV = "NEXUS_TOKEN"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a chat request with a long history fits; a runaway paste does not


class UnsafeBindError(ValueError):
    pass


def resolve_token(flag: str | None) -> str | None:
    """``--token`` or, to keep it out of the process list, ``$NEXUS_TOKEN``."""
    token = flag if flag is not None else os.environ.get(TOKEN_ENV)
    return token or None


def is_loopback(host: str) -> bool:
    """``host`` (a name or address, with or without a port) is this machine: localhost,
    127.0.0.0/8 or ::1 (127.0.0.2 was refused as "another host": a trial)."""
    import ipaddress

    host = host.strip().lower()
    if host.startswith("["):  # "[::1]:8788"
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # "127.0.0.1:8788", "localhost:8788"
        host = host.partition(":")[0]
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token."""
    if not is_loopback(host) and not token:
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


def _refuse(status: int, message: str, kind: str):
    body = json.dumps({"error": {"message": message, "type": kind}}).encode()
    return [{"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]},
            {"type": "http.response.body", "body": body}]


class LocalRequestsOnly:
    """ASGI middleware for a server no token guards (loopback only): a request must name
    this machine (``Host``: a DNS-rebinding page names its own site), come from no web page
    but a local one (``Origin``), and post JSON. A page's text/plain or form POST needs no
    CORS preflight, so without these any site the user visits could write into their
    memory and spend the upstream's key (a trial did, with curl standing in for a page)."""

    def __init__(self, app) -> None:
        self.app = app

    @staticmethod
    def problem(scope) -> list | None:
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if host and not is_loopback(host):
            return _refuse(421, f"this server answers requests addressed to this machine (127.0.0.1 or "
                                f"localhost), not to {host[:80]!r}", "forbidden_host")
        origin = headers.get(b"origin")
        if origin is not None:
            from urllib.parse import urlsplit

            # a page of a site, or one with no origin ("null": a sandboxed frame, a file);
            # a browser extension the user installed (chrome-extension://…) or an app's own
            # scheme is no web page (Page Assist was refused: a review)
            raw = origin.decode("latin-1").strip()
            o = urlsplit(raw)
            if raw.lower() == "null" or (o.scheme in ("http", "https") and not is_loopback(o.netloc.rpartition("@")[2])) \
                    or not o.scheme:
                # (no way around it is offered: the servers answer no CORS preflight, so a page of
                # another site cannot use them with a token either — a trial took the hint)
                return _refuse(403, "requests from web pages of other sites are refused (Origin "
                                    f"{origin.decode('latin-1')[:80]!r})", "forbidden_origin")
        if scope.get("method") == "POST":
            ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if ctype != b"application/json":
                return _refuse(415, "the request body must be JSON, sent with 'Content-Type: application/json'",
                               "invalid_request_error")
        return None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            refusal = self.problem(scope)
            if refusal is not None:
                for message in refusal:
                    await send(message)
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

        start, body = _refuse(413, f"the request body is over {size_words(self.max_body)}, this server's limit",
                              "request_too_large")

        async def said(message) -> None:
            if reached:
                await send(message)
            elif message["type"] == "http.response.start":
                await send(start)
            elif message["type"] == "http.response.body":
                await send(body)

        await RequestBodyLimitMiddleware(app, self.max_body)(scope, receive, said)


def guard(app, token: str | None, max_body: int = MAX_BODY_BYTES):
    """The app behind a body size limit (413) and the bearer check with a token, or
    without one, the check that a request comes from this machine and no other site."""
    app = BodyLimit(app, max_body)
    return BearerAuth(app, token) if token else LocalRequestsOnly(app)


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

"""``nexus mcp``: a session's TRACE memory as a Model Context Protocol server.

Built on the official ``mcp`` SDK (2.x, ``MCPServer``). Tools: recall, remember,
search, tree, stats; resources: the tree and one exchange. Stdio by default (LM
Studio, agent tools start it as a subprocess); ``--http PORT`` serves streamable
HTTP on 127.0.0.1 (another host needs ``--token``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from .memory_service import MemoryService, Recall, Remembered, SearchResult
from .text import counted

INSTRUCTIONS = (
    "Long-term memory of past conversations (TRACE). Call recall(query) before answering a question "
    "that may depend on earlier conversations and use the memory block it returns; call "
    "remember(user, assistant) after each completed exchange worth keeping; search finds past "
    "messages (all_sessions=true: in every session); tree shows the topics."
)


# what one call may carry: a query is a question, not a document (a 2.8 MB query took
# 7.2 s and came back whole in the result); an exchange is bounded as the proxy's request
# body is (8.8 MB took 15 s over stdio, holding the one writer; trial)
MAX_QUERY_CHARS = 20_000
MAX_EXCHANGE_CHARS = 4_000_000


def checked_query(query: str, what: str) -> str:
    """``query`` to recall or search with, or ``ValueError`` in words."""
    if not query.strip():
        raise ValueError(f"the query is empty: say what to {what}")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the query is {len(query):,} characters; at most {MAX_QUERY_CHARS:,}: send the "
                         "question, not a document")
    return query


def build_server(service: MemoryService):
    """An ``MCPServer`` whose tools and resources call ``service``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError

    server = MCPServer("nexus-trace", instructions=INSTRUCTIONS, log_level="WARNING")

    def anticipated(fn, *args, **kwargs):
        # bad input and missing things reach the model in words; anything else stays a crash
        try:
            return fn(*args, **kwargs)
        except (ValueError, IndexError) as exc:
            raise ToolError(str(exc)) from exc

    @server.tool(description="The memory block for a query: past exchanges and topic branches relevant to it, "
                             "within budget_tokens, with provenance (branches, exchange numbers, scores).")
    def recall(query: str, budget_tokens: int = 1000) -> Recall:
        return anticipated(lambda: service.recall(checked_query(query, "recall"), budget_tokens))

    @server.tool(description="Store one completed exchange (the user's message and the assistant's answer) "
                             "in long-term memory. Returns its exchange number and topic branch.")
    def remember(user: str, assistant: str) -> Remembered:
        if len(user) + len(assistant) > MAX_EXCHANGE_CHARS:
            raise ToolError(f"the exchange is {len(user) + len(assistant):,} characters; at most "
                            f"{MAX_EXCHANGE_CHARS:,} in one call: nothing was stored")
        return anticipated(service.remember, user, assistant)

    @server.tool(description="Past messages closest in meaning to the query, best first; each hit names its "
                             "session, exchange number and branch. all_sessions=true searches every session.")
    def search(query: str, k: int = 10, all_sessions: bool = False) -> SearchResult:
        return anticipated(lambda: service.search(checked_query(query, "search for"), k, all_sessions))

    @server.tool(description="The topic outline of the memory: branch names, exchange ranges, summaries "
                             "(* marks the active branch).")
    def tree() -> str:
        return service.outline()

    @server.tool(description="Statistics of the memory session: exchanges, topics, embedder, judge.")
    def stats() -> dict[str, Any]:
        return service.stats()

    @server.resource("trace://tree", name="tree", mime_type="text/plain",
                     description="The topic outline with each exchange's first words.")
    def tree_resource() -> str:
        return service.outline(show_messages=True)

    @server.resource("trace://exchange/{index}", name="exchange", mime_type="application/json",
                     description="One stored exchange by number: messages, date, branch.")
    def exchange_resource(index: str) -> str:
        try:
            return json.dumps(service.exchange(int(index)), ensure_ascii=False, indent=2)
        except (ValueError, IndexError) as exc:
            raise ResourceNotFoundError(str(exc) if isinstance(exc, IndexError)
                                        else f"{index[:40]!r} is not an exchange number") from exc

    return server


@contextlib.contextmanager
def _stdout_to_stderr():
    """While models load, anything printed goes to stderr: on stdio, stdout is the protocol."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run(config, session: str | None, http_port: int | None = None, host: str = "127.0.0.1",
        token: str | None = None, embed_fn=None) -> int:
    """Serve until stdin closes (stdio) or Ctrl+C (HTTP). Returns the exit status."""
    from trace_core import SessionFileError

    from .httpguard import UnsafeBindError, check_bind, listening_socket
    from .memory_service import DEFAULT_SESSION, SessionNameError, open_service, served_problem

    sock = None
    if http_port is not None:
        try:
            check_bind(host, token)
        except UnsafeBindError as exc:
            print(f"nexus mcp: {exc}", file=sys.stderr)
            return 2
        try:  # before the session file is made (it announced the address, then uvicorn failed: a trial)
            sock = listening_socket(host, http_port)
        except OSError as exc:
            print(f"nexus mcp: cannot listen on {host}:{http_port}: {exc.strerror or exc} (another server "
                  "has it: choose another port with --http)", file=sys.stderr)
            return 2
    try:
        with _stdout_to_stderr():
            service = open_service(config, session, embed_fn=embed_fn)
            service.tree.embed_fn.embed("warm up")  # load the embedder before the first call
    except (SessionNameError, SessionFileError) as exc:
        if sock is not None:
            sock.close()
        said = str(exc) if isinstance(exc, SessionNameError) else served_problem(session or DEFAULT_SESSION, exc)
        print(f"nexus mcp: {said}", file=sys.stderr)
        return 2
    print(f"nexus mcp: session {service.name!r} ({service.path}), {counted(len(service.tree.exchanges), 'exchange')}",
          file=sys.stderr)
    server = build_server(service)
    try:
        if sock is None:
            server.run("stdio")
        else:
            serve_http(server, host, sock, token)
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
    return 0


def serve_http(server, host: str, sock, token: str | None) -> None:
    """Streamable HTTP on the socket bound at start."""
    import uvicorn

    from .httpguard import MAX_BODY_BYTES, guard

    app = server.streamable_http_app(host=host, max_request_body_size=MAX_BODY_BYTES)
    port = sock.getsockname()[1]
    print(f"nexus mcp: streamable HTTP on http://{host}:{port}/mcp" + (" (bearer token required)" if token else ""),
          file=sys.stderr)
    uvicorn.Server(uvicorn.Config(guard(app, token), log_level="warning", access_log=False)).run(sockets=[sock])

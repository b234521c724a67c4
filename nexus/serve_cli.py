"""``nexus mcp`` and ``nexus proxy``: the memory as a service for other clients."""

from __future__ import annotations

import argparse
import os
import sys


def port_number(text: str) -> int:
    """A TCP port, 0-65535, 0 for any free one (70000 reached bind() and ended in a
    traceback: a trial)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is no port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is no port: ports run from 1 to 65535 (0: any free one)")
    return port


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="nexus", description="TRACE memory for other clients.")
    sub = ap.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("mcp", help="serve the memory over the Model Context Protocol (stdio, or --http PORT)",
                       description="Serve a session's memory as an MCP server: tools recall, remember, search, "
                                   "tree, stats. Stdio unless --http is given.")
    m.add_argument("--session", help="session name in the sessions folder (default: 'default')")
    m.add_argument("--http", type=port_number, metavar="PORT", help="serve streamable HTTP at http://HOST:PORT/mcp")
    m.add_argument("--host", default="127.0.0.1", help="with --http: address to bind (default 127.0.0.1; "
                                                       "any other needs --token)")
    m.add_argument("--token", help="with --http: bearer token clients must send (or $NEXUS_TOKEN)")
    p = sub.add_parser("proxy", help="an OpenAI-compatible endpoint that adds memory to every chat",
                       description="Serve /v1/chat/completions with memory in the system message, forwarding "
                                   "to --upstream; each completed exchange is remembered.")
    p.add_argument("--upstream", required=True, help="the model server's OpenAI base URL, e.g. "
                                                     "http://127.0.0.1:1234/v1 (LM Studio)")
    p.add_argument("--port", type=port_number, default=8788, help="port to serve on (default 8788)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs --token)")
    p.add_argument("--session", help="default session name (default: 'default'); a request's "
                                     "X-Nexus-Session header picks another")
    p.add_argument("--token", help="bearer token clients must send (or $NEXUS_TOKEN)")
    for cmd in (m, p):
        # the LLM judges ask a model inside remember(), holding the tree for seconds: a service
        # shared by many clients files exchanges by embedding unless asked otherwise
        cmd.add_argument("--judge", choices=("embedding", "auto", "llm"),
                         default=os.environ.get("NEXUS_JUDGE") or "embedding",
                         help="how exchanges are filed into topics (default: embedding, no model asked; "
                              "auto/llm ask the memory model)")
    args, extra = ap.parse_known_args(argv)
    if extra:  # said with the subcommand's usage (the top level's listed only {mcp,proxy})
        {"mcp": m, "proxy": p}[args.mode].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def argument_problem(args) -> str | None:
    """What is wrong with the arguments, in words (the server does not start then)."""
    if args.session is not None and not args.session.strip():
        return "--session needs a name (leave it out for the session 'default')"
    from .config import HTTP_URL, http_url_problem

    upstream = getattr(args, "upstream", None)
    if upstream is not None and (problem := http_url_problem(upstream)):
        return f"--upstream must be {HTTP_URL} ({problem}: it was {upstream!r})"
    return None


def main(argv: list[str]) -> int:
    args = parse(argv)
    from .config import ConfigError, load_config
    from .httpguard import resolve_token

    try:
        config = load_config()
    except ConfigError as exc:
        print(f"nexus: {exc}", file=sys.stderr)
        return 2
    config.set("memory", "judge", args.judge)
    problem = argument_problem(args)
    if problem:
        print(f"nexus {args.mode}: {problem}", file=sys.stderr)
        return 2
    from .config import data_dir
    from .paths import data_folder_problem, log_dir

    # a data folder under a file stopped the proxy and the MCP server with a traceback
    # (an MCP client shows only "Connection closed"): said as plain nexus says it
    problem = data_folder_problem((data_dir() / "sessions", log_dir()))
    if problem:
        print(f"nexus {args.mode}: {problem}", file=sys.stderr)
        return 2
    token = resolve_token(args.token)
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar in a server's log
    try:
        if args.mode == "mcp":
            from .mcp_server import run

            return run(config, args.session, args.http, args.host, token)
        from .proxy import run

        return run(config, args.upstream, args.port, args.host, args.session, token)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "starlette", "uvicorn", "httpx"):
            print(f"nexus {args.mode}: the '{exc.name}' package is missing; reinstall with "
                  "pip install -e . (it is a dependency of nexus-trace)", file=sys.stderr)
            return 2
        raise

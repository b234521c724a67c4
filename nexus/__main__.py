"""``nexus`` / ``python -m nexus``: start the workbench."""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from .config import user_config_path

    ap = argparse.ArgumentParser(
        prog="nexus",
        description="Nexus: chat with a local model over TRACE memory.",
        epilog=f"Settings: config/nexus.toml (defaults), {user_config_path()} (yours), "
               ".env and NEXUS_*/OPENAI_* variables, then these flags.",
    )
    ap.add_argument("--base-url", help="OpenAI-compatible endpoint (default: LM Studio's http://127.0.0.1:1234/v1)")
    ap.add_argument("--model", help="chat model (default: the first the server lists)")
    ap.add_argument("--memory-model", help="the tree's internal model: a fast non-reasoning one")
    ap.add_argument("--embed", help="embedder: minilm | sentence-transformers name/path | openai:MODEL")
    ap.add_argument("--session", help="session file path, or a name in the sessions folder (default: the last)")
    ap.add_argument("--no-web", action="store_true", help="never search the web")
    ap.add_argument("--local", action="store_true",
                    help="start the bundled llama.cpp server with gemma-3-270m and use it (extra 'local')")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from .config import ConfigError, load_config

    flags = {
        ("server", "base_url"): args.base_url,
        ("models", "chat"): args.model,
        ("models", "memory"): args.memory_model,
        ("memory", "embed"): args.embed,
        ("web", "enabled"): False if args.no_web else None,
    }
    try:
        config = load_config(flags)
    except ConfigError as exc:
        print(f"nexus: {exc}", file=sys.stderr)
        return 2
    local = None
    if args.local:
        from trace_core.local_llm import LocalLLMError, LocalLLMServer

        print("Starting the bundled llama.cpp server (gemma-3-270m)…", file=sys.stderr)
        try:
            local = LocalLLMServer().start(timeout=180)
        except LocalLLMError as exc:
            print(f"nexus: {exc}", file=sys.stderr)
            return 2
        config.set("server", "base_url", local.base_url)
        config.set("server", "kind", "openai")
        config.set("models", "chat", local.model_name)
        config.set("models", "memory", local.model_name)
    from trace_core.embedders import make_embedder

    from . import sessions
    from .app import NexusApp

    embed = make_embedder(str(config.get("memory", "embed")), config.base_url, config.api_key)
    try:
        app = NexusApp(config, sessions.resolve(args.session), embed_fn=embed)
        import os

        code = app.run(headless=bool(os.environ.get("NEXUS_STARTUP_PROBE")))
    finally:
        if local is not None:
            local.stop()
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())

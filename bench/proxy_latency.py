"""The memory proxy's added time to the first streamed token, against the upstream called
directly in the same run.

    python -m bench.proxy_latency [--runs 40] [--history 300] [--local | --upstream URL] [--json OUT]

Upstream: the bundled llama.cpp server with gemma-3-270m (``--local``), any
OpenAI-compatible server (``--upstream``), or by default the scripted test server in its
own process, answering after ``--first-token-ms`` (a stand-in for a model's prompt time,
so the ratio is not one of two near-zero loopback times). The proxy runs as
``nexus proxy`` in its own process, with MiniLM and a session of ``--history``
exchanges, so each request pays a real recall (its exchange is remembered after the
first token, off the timed path); the recall alone is timed too, in this process, before
the proxy starts. Direct and proxied requests alternate; time to first token is
measured with the ``openai`` client, from the request to the first chunk with content.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOPICS = ["my sister's piano lessons", "the Orion release plan", "peanut-free recipes", "the cabin trip",
          "my green Brompton bike", "the quarterly budget", "learning Portuguese", "the garden irrigation"]


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def ttft(client, model: str, text: str, max_tokens: int) -> float:
    t0 = time.perf_counter()
    stream = client.chat.completions.create(model=model, stream=True, max_tokens=max_tokens, temperature=0,
                                            messages=[{"role": "user", "content": text}])
    first = None
    for ch in stream:
        if first is None and ch.choices and ch.choices[0].delta.content:
            first = time.perf_counter() - t0
    return first if first is not None else time.perf_counter() - t0


UPSTREAM = """
import sys, time
sys.path.insert(0, sys.argv[1])
from scripted_server import Reply, ScriptedServer
srv = ScriptedServer().start()
delay = float(sys.argv[2]) / 1000
srv.respond(lambda req: Reply("Sure, here is what I remember about that.", delay=delay))
print(srv.base_url, flush=True)
sys.stdin.readline()
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): load-independent cost."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc, timeout: float = 180) -> None:
    import httpx

    end = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"{url} did not come up") from None
            time.sleep(0.3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--history", type=int, default=300, help="exchanges in the session before the runs")
    ap.add_argument("--local", action="store_true", help="upstream: the bundled llama.cpp server (gemma-3-270m)")
    ap.add_argument("--upstream", help="upstream: an OpenAI-compatible base URL")
    ap.add_argument("--model", default="test-model")
    ap.add_argument("--first-token-ms", type=float, default=150.0, help="scripted upstream's first-token delay")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()

    import subprocess

    import openai

    from nexus.memory_service import MemoryService
    from trace_core.embedders import MiniLMEmbedder

    local = scripted = None
    if args.local:
        from trace_core.local_llm import LocalLLMServer

        local = LocalLLMServer().start(timeout=300)
        upstream, model, kind = local.base_url, local.model_name, "llama.cpp gemma-3-270m"
    elif args.upstream:
        upstream, model, kind = args.upstream.rstrip("/"), args.model, args.upstream
    else:  # in its own process, like a real model server
        tests = str(Path(__file__).resolve().parent.parent / "tests")
        scripted = subprocess.Popen([sys.executable, "-c", UPSTREAM, tests, str(args.first_token_ms)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        upstream, model = scripted.stdout.readline().strip(), "test-model"
        kind = f"scripted, first token after {args.first_token_ms:.0f} ms"

    queries = [f"What did I say about {TOPICS[k % len(TOPICS)]}? (run {k})" for k in range(args.runs)]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NEXUS_DATA_DIR"] = tmp
        from nexus.memory_service import session_path

        embed = MiniLMEmbedder()
        embed.load()
        svc = MemoryService.open(session_path("bench"), embed_fn=embed, judge="embedding")
        for i in range(args.history):
            topic = TOPICS[i % len(TOPICS)]
            svc.remember(f"Note {i} about {topic}: detail number {i * 7 % 101}.", f"Noted detail {i} on {topic}.")
        svc.wait_indexed(300)
        recall, recall_cpu = [], []  # the recall alone, same queries, in this process: the proxy's own work
        for q in queries:
            t0, c0 = time.perf_counter(), time.process_time()
            svc.recall(q)
            recall.append(time.perf_counter() - t0)
            recall_cpu.append(time.process_time() - c0)
        svc.close()  # the proxy process takes the session's writer lock
        port = free_port()
        env = dict(os.environ, NEXUS_JUDGE="embedding", NEXUS_EMBED="minilm", HF_HUB_OFFLINE="1")
        proxy = subprocess.Popen([sys.executable, "-m", "nexus", "proxy", "--upstream", upstream, "--port", str(port),
                                  "--session", "bench"], env=env, stderr=subprocess.DEVNULL)
        try:
            proxy_url = f"http://127.0.0.1:{port}/v1"
            wait_http(proxy_url + "/models", proxy)
            direct = openai.OpenAI(base_url=upstream, api_key="lm-studio", max_retries=0, timeout=300)
            proxied = openai.OpenAI(base_url=proxy_url, api_key="lm-studio", max_retries=0, timeout=300)
            ttft(direct, model, "warm up", args.max_tokens)
            ttft(proxied, model, "warm up", args.max_tokens)
            d, p = [], []
            cpu0 = cpu_seconds(proxy.pid)
            for k, q in enumerate(queries):
                if k % 2:
                    p.append(ttft(proxied, model, q, args.max_tokens))
                    d.append(ttft(direct, model, q, args.max_tokens))
                else:
                    d.append(ttft(direct, model, q, args.max_tokens))
                    p.append(ttft(proxied, model, q, args.max_tokens))
            proxy_cpu = (cpu_seconds(proxy.pid) - cpu0) / len(queries)
        finally:
            proxy.terminate()
            proxy.wait(60)
        svc = MemoryService.open(session_path("bench"), embed_fn=embed, judge="embedding")
        stored = len(svc.tree.exchanges)
        svc.close()
    if scripted is not None:
        scripted.stdin.close()
        scripted.wait(30)
    if local is not None:
        local.stop()
    added = [b - a for a, b in zip(d, p)]
    res = {
        "upstream": kind, "runs": args.runs, "history_exchanges": args.history,
        "direct_ttft_ms_median": 1000 * statistics.median(d), "direct_ttft_ms_p95": 1000 * p95(d),
        "proxy_ttft_ms_median": 1000 * statistics.median(p), "proxy_ttft_ms_p95": 1000 * p95(p),
        "added_ms_median": 1000 * statistics.median(added), "added_ms_p95": 1000 * p95(added),
        "ratio_median": statistics.median(p) / statistics.median(d), "ratio_p95": p95(p) / p95(d),
        "recall_alone_ms_median": 1000 * statistics.median(recall), "recall_alone_ms_p95": 1000 * p95(recall),
        "recall_alone_cpu_ms_median": 1000 * statistics.median(recall_cpu),
        "proxy_cpu_ms_per_request": 1000 * proxy_cpu,
        "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count(),
        "exchanges_stored_after": stored,
    }
    print(f"upstream: {kind}; session of {args.history} exchanges; {args.runs} runs each, alternating")
    print(f"time to first token: direct median {res['direct_ttft_ms_median']:.1f} ms (p95 "
          f"{res['direct_ttft_ms_p95']:.1f}), via proxy median {res['proxy_ttft_ms_median']:.1f} ms "
          f"(p95 {res['proxy_ttft_ms_p95']:.1f})")
    print(f"added by the proxy: median {res['added_ms_median']:.1f} ms, p95 {res['added_ms_p95']:.1f} ms; "
          f"ratio proxy/direct: median {res['ratio_median']:.2f}, p95 {res['ratio_p95']:.2f}")
    print(f"of which the recall alone (MiniLM query embeddings + scoring): median {res['recall_alone_ms_median']:.1f} "
          f"ms, p95 {res['recall_alone_ms_p95']:.1f} ms; load average {res['load_average_1min']:.1f} on "
          f"{res['cpus']} CPUs")
    print(f"CPU time (load-independent): recall alone median {res['recall_alone_cpu_ms_median']:.1f} ms; the proxy "
          f"process per request (recall, relay, remember) {res['proxy_cpu_ms_per_request']:.1f} ms")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()

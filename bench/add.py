"""add() speed and LLM economy on LoCoMo.

    python -m bench.add [--data DIR] [--auto-limit N] [--llm-limit N] [--json OUT] [--no-llm]

1. ``judge="embedding"``: every exchange of every conversation through ``add()`` into
   a real session file; median and p95 per ``add()`` (embedding included). Baseline
   in the same run: embedding the same exchange alone (the floor ``add()`` stands on).
2. ``judge="auto"`` and ``judge="llm"`` against the local llama.cpp server (gemma-3-270m):
   LLM calls per exchange. ``llm`` is the TRACE/ChatIndex behaviour (≥ 1 call per
   exchange), measured on the same exchanges as the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench.locomo_data import default_data_dir, load_dir
from trace_core import CTree
from trace_core.embedders import MiniLMEmbedder


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def bench_embedding(convs, emb) -> dict:
    add_ms, embed_ms = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for conv in convs:
            tree = CTree.open(os.path.join(tmp, f"{conv.name}.db"), judge="embedding", embed_fn=emb)
            for x in conv.exchanges:
                t = time.perf_counter()
                emb.embed_batch([x.user, x.assistant])
                embed_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                tree.add(x.messages(), timestamp=x.timestamp)
                add_ms.append((time.perf_counter() - t) * 1000)
            tree.vdb.close()
    return {
        "exchanges": len(add_ms),
        "add_median_ms": statistics.median(add_ms),
        "add_p95_ms": pct(add_ms, 0.95),
        "embed_only_median_ms": statistics.median(embed_ms),
        "ratio_add_to_embed": statistics.median(add_ms) / statistics.median(embed_ms),
    }


def bench_llm_calls(convs, emb, judge: str, limit: int, server) -> dict:
    calls = fails = n = 0
    seconds = 0.0
    for conv in convs:
        tree = CTree(judge=judge, base_url=server.base_url, model=server.model_name, embed_fn=emb, llm_timeout=60)
        for x in conv.exchanges[: limit // len(convs)]:
            tree.add(x.messages(), timestamp=x.timestamp)
            n += 1
        st = tree.judges.llm.llm.stats
        calls, fails, seconds = calls + st.calls, fails + st.failures, seconds + st.seconds
    return {"judge": judge, "exchanges": n, "llm_calls": calls, "llm_failures": fails,
            "calls_per_exchange": calls / max(n, 1), "llm_seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--auto-limit", type=int, default=400, help="exchanges for the auto-judge run")
    ap.add_argument("--llm-limit", type=int, default=60, help="exchanges for the llm-judge baseline")
    ap.add_argument("--no-llm", action="store_true", help="skip the llama.cpp runs")
    ap.add_argument("--json")
    args = ap.parse_args()
    convs = load_dir(args.data)
    emb = MiniLMEmbedder()
    emb.load()
    emb.embed_batch(["warm up", "the model"])
    out = {"embedding": bench_embedding(convs, emb)}
    e = out["embedding"]
    print(f"judge=embedding  {e['exchanges']} exchanges  add() median {e['add_median_ms']:.1f} ms  "
          f"p95 {e['add_p95_ms']:.1f} ms  |  embedding alone median {e['embed_only_median_ms']:.1f} ms  "
          f"(add/embed {e['ratio_add_to_embed']:.2f}x)")
    if not args.no_llm:
        from trace_core.local_llm import LocalLLMServer

        with LocalLLMServer() as server:
            for judge, limit in (("auto", args.auto_limit), ("llm", args.llm_limit)):
                r = bench_llm_calls(convs, emb, judge, limit, server)
                out[judge] = r
                print(f"judge={judge:<5} {r['exchanges']} exchanges  {r['calls_per_exchange']:.2f} LLM calls/exchange"
                      f"  ({r['llm_calls']} calls, {r['llm_failures']} failed, {r['llm_seconds']:.0f} s in the LLM)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()

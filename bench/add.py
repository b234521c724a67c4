"""add() speed and LLM economy on LoCoMo.

    python -m bench.add [--data DIR] [--auto-limit N] [--llm-limit N] [--json OUT] [--no-llm]
                        [--judge all|embedding|auto|llm]

1. ``judge="embedding"``: every exchange of every conversation through ``add()`` into
   a real session file; median and p95 per ``add()`` (embedding included). Baseline
   in the same run: embedding the same exchange alone (the floor ``add()`` stands on).
2. ``judge="auto"`` and ``judge="llm"`` against the local llama.cpp server (gemma-3-270m):
   LLM calls per exchange. ``llm`` is the TRACE/ChatIndex behaviour (≥ 1 call per
   exchange), measured on the same exchanges as the baseline. The ``llm`` run counts the
   judge's answers that were usable (parsed and valid) against those that were not, and
   among the usable ones those only json-repair could read: the same answers without
   it (one pass, paired; ``--no-repair`` runs a pass without it instead).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench.locomo_data import default_data_dir, load_dir
from trace_core import CTree, jsonparse
from trace_core.embedders import MiniLMEmbedder
from trace_core.llm import LLMError

JUDGE_TASKS = ("place", "name_topic", "summarize", "approve_merge")


class AnswerCounter:
    """Wraps a tree's LLM judge: every task that got an answer from the server is usable
    (parsed and valid) or not; a task the server never answered (timeout, HTTP error) is
    counted apart."""

    def __init__(self, judge) -> None:
        self._judge = judge
        self.usable = self.unusable = self.unanswered = self.usable_by_repair = 0
        self.problems: dict[str, int] = {}

    def __getattr__(self, name):
        attr = getattr(self._judge, name)
        if name not in JUDGE_TASKS:
            return attr

        def counted(*args, **kwargs):
            repaired_before = jsonparse.stats.repaired
            try:
                result = attr(*args, **kwargs)
            except LLMError as exc:
                if "model server" in exc.problem:
                    self.unanswered += 1
                else:
                    self.unusable += 1
                    kind = exc.problem.split(":")[0][:60]
                    self.problems[kind] = self.problems.get(kind, 0) + 1
                raise
            self.usable += 1
            self.usable_by_repair += jsonparse.stats.repaired > repaired_before
            return result

        return counted


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
    usable = unusable = unanswered = by_repair = 0
    problems: dict[str, int] = {}
    for conv in convs:
        # a long timeout: a busy machine must not turn slow answers into unanswered ones
        tree = CTree(judge=judge, base_url=server.base_url, model=server.model_name, embed_fn=emb, llm_timeout=300)
        counter = AnswerCounter(tree.judges.llm)
        tree.judges.llm = counter
        for x in conv.exchanges[: limit // len(convs)]:
            tree.add(x.messages(), timestamp=x.timestamp)
            n += 1
        st = counter.llm.stats
        calls, fails, seconds = calls + st.calls, fails + st.failures, seconds + st.seconds
        usable, unusable, unanswered = usable + counter.usable, unusable + counter.unusable, \
            unanswered + counter.unanswered
        by_repair += counter.usable_by_repair
        for k, v in counter.problems.items():
            problems[k] = problems.get(k, 0) + v
    return {"judge": judge, "exchanges": n, "llm_calls": calls, "llm_failures": fails,
            "calls_per_exchange": calls / max(n, 1), "llm_seconds": seconds,
            "answers_usable": usable, "answers_unusable": unusable, "tasks_unanswered": unanswered,
            "usable_share": usable / max(usable + unusable, 1), "unusable_kinds": problems,
            "usable_only_by_repair": by_repair,
            "usable_share_without_repair": (usable - by_repair) / max(usable + unusable, 1)}


def show_llm(r: dict, label: str = "") -> None:
    print(f"judge={r['judge']:<5}{label} {r['exchanges']} exchanges  {r['calls_per_exchange']:.2f} LLM calls/exchange"
          f"  ({r['llm_calls']} calls, {r['llm_failures']} failed, {r['llm_seconds']:.0f} s in the LLM)  "
          f"usable answers {r['answers_usable']}/{r['answers_usable'] + r['answers_unusable']} "
          f"= {r['usable_share']:.0%}" + (f", {r['tasks_unanswered']} unanswered" if r["tasks_unanswered"] else ""))
    if r["usable_only_by_repair"]:
        print(f"      of which {r['usable_only_by_repair']} only through json-repair: the same answers without it "
              f"{r['answers_usable'] - r['usable_only_by_repair']}/{r['answers_usable'] + r['answers_unusable']} "
              f"= {r['usable_share_without_repair']:.0%}")
    for kind, k in sorted(r["unusable_kinds"].items(), key=lambda kv: -kv[1]):
        print(f"      {k:3d} × {kind}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--auto-limit", type=int, default=400, help="exchanges for the auto-judge run")
    ap.add_argument("--llm-limit", type=int, default=60, help="exchanges for the llm-judge baseline")
    ap.add_argument("--no-llm", action="store_true", help="skip the llama.cpp runs")
    ap.add_argument("--judge", choices=("all", "embedding", "auto", "llm"), default="all",
                    help="run only this part (llm: the share of usable judge answers)")
    ap.add_argument("--no-repair", action="store_true", help="parse the judge's JSON without json-repair")
    ap.add_argument("--json")
    args = ap.parse_args()
    convs = load_dir(args.data)
    emb = MiniLMEmbedder()
    emb.load()
    emb.embed_batch(["warm up", "the model"])
    out: dict = {}
    if args.judge in ("all", "embedding"):
        out["embedding"] = e = bench_embedding(convs, emb)
        print(f"judge=embedding  {e['exchanges']} exchanges  add() median {e['add_median_ms']:.1f} ms  "
              f"p95 {e['add_p95_ms']:.1f} ms  |  embedding alone median {e['embed_only_median_ms']:.1f} ms  "
              f"(add/embed {e['ratio_add_to_embed']:.2f}x)")
    if not args.no_llm and args.judge != "embedding":
        from trace_core.local_llm import LocalLLMServer

        with LocalLLMServer() as server:
            if args.judge in ("all", "auto"):
                out["auto"] = bench_llm_calls(convs, emb, "auto", args.auto_limit, server)
                show_llm(out["auto"])
            if args.judge in ("all", "llm"):
                jsonparse.REPAIR = not args.no_repair
                out["llm"] = bench_llm_calls(convs, emb, "llm", args.llm_limit, server)
                show_llm(out["llm"], "" if jsonparse.REPAIR else " (no json-repair)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()

"""Web routing on a labelled set: precision and recall of "search".

    python -m bench.router [--questions bench/router_questions.jsonl] [--no-llm] [--json OUT]

Each line of the set is a question with its kind — about the conversation, needing
current information, or general knowledge — and whether it should be searched (only
the "current" ones). The router runs twice on the same questions: with its no-LLM
fallback (rules; doubtful questions are not searched) and with the embedded
gemma-3-270m answering the doubtful ones (the memory model's role in Nexus).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter

from nexus.web import WebRouter, ask_memory_model

HERE = os.path.dirname(__file__)


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def score(router: WebRouter, items: list[dict]) -> dict:
    tp = fp = fn = 0
    right: Counter = Counter()
    by: Counter = Counter()
    wrong = []
    started = time.perf_counter()
    for it in items:
        d = router.decide(it["question"])
        by[d.by] += 1
        if d.search == it["search"]:
            right[it["kind"]] += 1
        else:
            wrong.append({"question": it["question"], "kind": it["kind"], "search": d.search, "reason": d.reason})
        tp += d.search and it["search"]
        fp += d.search and not it["search"]
        fn += (not d.search) and it["search"]
    kinds = Counter(it["kind"] for it in items)
    return {
        "questions": len(items),
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "searched": tp + fp,
        "decided_by": dict(by),
        "correct_by_kind": {k: f"{right[k]}/{n}" for k, n in kinds.items()},
        "seconds": time.perf_counter() - started,
        "wrong": wrong,
    }


def show(name: str, r: dict) -> None:
    print(f"{name:<28} precision {r['precision']:.2f}  recall {r['recall']:.2f}  "
          f"({r['searched']} searched of {r['questions']}; correct by kind {r['correct_by_kind']}; "
          f"decided by {r['decided_by']}; {r['seconds']:.1f} s)")
    for w in r["wrong"]:
        print(f"    {'searched' if w['search'] else 'not searched'} [{w['kind']}] {w['question']}  — {w['reason']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", default=os.path.join(HERE, "router_questions.jsonl"))
    ap.add_argument("--no-llm", action="store_true", help="only the no-LLM fallback")
    ap.add_argument("--json")
    args = ap.parse_args()
    items = load(args.questions)
    out = {"fallback": score(WebRouter(ask_llm=None), items)}
    show("no-LLM fallback (rules)", out["fallback"])
    if not args.no_llm:
        from trace_core.llm import JSONLLM
        from trace_core.local_llm import LocalLLMServer

        with LocalLLMServer() as server:
            llm = JSONLLM(server.model_name, base_url=server.base_url, timeout=60, max_tokens=16)
            out["llm"] = score(WebRouter(ask_llm=lambda q: ask_memory_model(llm, q)), items)
            out["llm"]["llm_calls"] = llm.stats.calls
            out["llm"]["llm_failures"] = llm.stats.failures
        show("rules + gemma-3-270m", out["llm"])
        print(f"    ({out['llm']['llm_calls']} LLM calls, {out['llm']['llm_failures']} failed: no search)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()

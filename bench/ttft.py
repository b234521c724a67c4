"""Time to the first streamed token on the embedded llama.cpp model (gemma-3-270m):
TRACE's memory block against the whole conversation in the prompt.

    python -m bench.ttft [--data DIR] [--conversation conv-26] [--questions 10] [--n-ctx 4096] [--json OUT]

One development conversation goes through ``add()`` (embedding judge) and the idle-time
sentence index, as in Nexus. For each question (LoCoMo categories 1-4, spread over the
set) two prompts are streamed with ``max_tokens=1``, alternately so that neither reuses
the other's prompt cache:

- **TRACE**: Nexus's system prompt with the memory block (``memory_token_budget`` 1,000);
- **full, cold**: the same system prompt with the whole conversation as transcript.
  When it does not fit the server's context it keeps the most recent turns that fit
  (said in the output: how many tokens of how many).

A third column, **full, warm**, repeats the full prompt right after itself: llama.cpp
then reuses the cached prefix, the best case for a full-history prompt whose history
has not changed. Median per column and the ratios, in one run on one server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.request

from bench.locomo_data import default_data_dir, load_dir
from trace_core import CTree, PromptSynthesizer, prompts
from trace_core.embedders import MiniLMEmbedder

CATEGORIES = (1, 2, 3, 4)


def first_token_seconds(client, model: str, system: str, question: str) -> float:
    """Seconds from sending to the first streamed content."""
    started = time.perf_counter()
    stream = client.chat.completions.create(
        model=model, stream=True, max_tokens=1, temperature=0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    first = None
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content is not None:
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


def count_server_tokens(base_url: str, text: str) -> int:
    root = base_url.rsplit("/v1", 1)[0]
    req = urllib.request.Request(f"{root}/extras/tokenize", data=json.dumps({"input": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return len(json.load(r)["tokens"])


def transcript(conv) -> list[str]:
    return [f"User: {x.user}\nAssistant: {x.assistant}" for x in conv.exchanges]


def fit_transcript(lines: list[str], base: str, question: str, n_ctx: int, base_url: str) -> tuple[str, int, int]:
    """The whole conversation after ``base``, or its most recent part that fits the
    context with the question, the chat markers and one reply token.
    Returns ``(system, tokens kept, tokens of the whole)``."""
    header = "\n\nThe conversation so far:\n"
    whole_tokens = count_server_tokens(base_url, "\n".join(lines))
    room = n_ctx - count_server_tokens(base_url, base + header + question) - 32  # markers, reply
    # tokens per line, counted once, then keep the newest lines that fit
    sizes = [count_server_tokens(base_url, line + "\n") for line in lines]
    kept, used = [], 0
    for line, size in zip(reversed(lines), reversed(sizes)):
        if used + size > room:
            break
        kept.append(line)
        used += size
    kept.reverse()
    return base + header + "\n".join(kept), used, whole_tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--conversation", default="conv-26")
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--n-ctx", type=int, default=4096, help="the server's context (nexus --local uses 4096)")
    ap.add_argument("--json")
    args = ap.parse_args()

    from openai import OpenAI

    from trace_core.local_llm import LocalLLMServer

    conv = next(c for c in load_dir(args.data) if c.name == args.conversation)
    qs = [q for q in conv.questions if q.get("category") in CATEGORIES]
    step = max(1, len(qs) // args.questions)
    qs = qs[::step][: args.questions]
    emb = MiniLMEmbedder()
    emb.load()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = CTree.open(os.path.join(tmp, "ttft.db"), judge="embedding", embed_fn=emb)
        for x in conv.exchanges:
            tree.add(x.messages(), timestamp=x.timestamp)
        tree.index_pending()
        synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb, memory_token_budget=1000)
        lines = transcript(conv)
        with LocalLLMServer(n_ctx=args.n_ctx) as server:
            client = OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=600)
            first_token_seconds(client, server.model_name, "Warm up.", "Hi")  # model pages in memory
            longest = max((q["question"] for q in qs), key=len)
            full_system, kept, whole = fit_transcript(lines, prompts.ASSISTANT_SYSTEM, longest,
                                                      args.n_ctx, server.base_url)
            print(f"{conv.name}: {len(conv.exchanges)} exchanges, whole conversation {whole} tokens; "
                  f"server context {args.n_ctx}: the full prompt keeps the most recent {kept} tokens"
                  + (" (all of it)" if kept >= whole else f" ({kept / whole:.0%}, truncated to fit)"))
            for q in qs:
                question = q["question"]
                t = time.perf_counter()  # the memory's own time counts: embedding the question + synthesis
                trace_system = synth.synthesize_prompt(question, emb.embed(question), tree.current_node, [])
                memory_s = time.perf_counter() - t
                trace_s = first_token_seconds(client, server.model_name, trace_system, question)
                cold_s = first_token_seconds(client, server.model_name, full_system, question)
                warm_s = first_token_seconds(client, server.model_name, full_system, question)
                rows.append({"question": question, "trace_s": trace_s + memory_s, "memory_s": memory_s,
                             "full_cold_s": cold_s, "full_warm_s": warm_s,
                             "trace_prompt_tokens": count_server_tokens(server.base_url, trace_system)})
                print(f"  TRACE {trace_s + memory_s:6.2f} s ({rows[-1]['trace_prompt_tokens']} tokens)   "
                      f"full cold {cold_s:6.2f} s   full warm {warm_s:6.2f} s   {question[:60]}")
        tree.vdb.close()
    med = {k: statistics.median(r[k] for r in rows) for k in ("trace_s", "full_cold_s", "full_warm_s",
                                                              "memory_s", "trace_prompt_tokens")}
    out = {"conversation": conv.name, "questions": len(rows), "n_ctx": args.n_ctx, "whole_tokens": whole,
           "full_prompt_tokens": kept, "median": med,
           "ratio_full_cold_to_trace": med["full_cold_s"] / med["trace_s"],
           "ratio_full_warm_to_trace": med["full_warm_s"] / med["trace_s"], "rows": rows}
    print(f"median time to first token over {len(rows)} questions: TRACE {med['trace_s']:.2f} s "
          f"(memory {med['memory_s'] * 1000:.0f} ms, prompt {med['trace_prompt_tokens']:.0f} tokens) | "
          f"full cold {med['full_cold_s']:.2f} s ({out['ratio_full_cold_to_trace']:.1f}x) | "
          f"full warm {med['full_warm_s']:.2f} s ({out['ratio_full_warm_to_trace']:.1f}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()

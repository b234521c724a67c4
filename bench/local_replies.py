"""Replies of the embedded llama.cpp model (gemma-3-270m, a base model) with and without
the bundled server's reply stops, in one run.

    python -m bench.local_replies [--seeds 1,2 | --seeds none] [--max-tokens 256] [--json OUT]

Twelve first messages (English, German, French, Japanese; a chat's first turn, so the
prompt is TRACE's assistant system text and the message) are sent to two servers
started one after the other: **stops on** (as Nexus runs it: the model's word for a turn
end, the starts of the prompt's lines, one more sample of a reply stopped before its
first word) and **stops off** (only ``<end_of_turn>`` ends a reply: the baseline), at
temperature 0.7 (Nexus's default) with fixed seeds, or with none (``--seeds none``: as
Nexus asks, where llama.cpp seeds every request alike). Per server: replies that write the
prompt again (its system text or the message, first 20 characters) or the turn-end word,
empty replies, replies cut at ``max_tokens``, and the median tokens and seconds a reply.

Each message is then followed by a second turn as Nexus sends it: the first exchange in
the system text's "Most recent exchanges" (``User: …`` / ``Assistant: …`` lines), and a
follow-up question. Counted there: replies that write a next turn of the dialogue
themselves (a role label after a space or a line break, which the stops cut).

Then **turns with a memory block** (``--memory-retries 0,1,3``): the twelve messages
stored in a TRACE tree with a short answer each, then six questions about them asked as
Nexus asks (system text with the memory block and the newest exchange, streamed, no
seed), ``--repeats`` times each, to the server with its stops and 0, 1, 3… more samples
for a reply stopped before it says anything. Counted: replies that say nothing (empty, a
bare role label, a copied date line or system-prompt line, symbols: what Nexus keeps as
not answered; or the user's next turn, "User: …").
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from trace_core.local_llm import LocalLLMServer
from trace_core.local_server import EMPTY_RETRIES, TURN_END_STANDINS, marker_at
from trace_core.prompts import ASSISTANT_SYSTEM, RECENT_HEADER

MESSAGES = [
    "My tomato seedlings have yellow leaves at the bottom, what should I do?",
    "Any tips for my first marathon in October?",
    "How do I set CPU limits for a Kubernetes deployment?",
    "I want to start a sourdough starter this weekend. How often do I feed it?",
    "Can you suggest a jazz album for a rainy evening?",
    "What should I keep in mind when filing taxes as a freelancer?",
    "Mein Großvater hat eine Bäckerei in München, was soll ich ihm zum 80. Geburtstag schenken?",
    "Wie lange muss ein Hefeteig für Brezeln gehen?",
    "Comment puis-je garder mon levain en bonne santé pendant les vacances ?",
    "Quel vin servir avec une raclette ?",
    "私の猫は毎晩三時に鳴きます。どうすればいいですか？",
    "週末に京都で紅葉を見るならどこがいいですか？",
]


FOLLOW_UP = "Can you say a bit more about that?"
FIRST_ANSWER = "Happy to help: here is a short first answer."
NEXT_TURN = tuple(f"{sep}{label}:" for label in ("User", "Assistant") for sep in ("\n", " "))


def second_turn(message: str) -> list[dict]:
    """The follow-up as Nexus sends it: the first exchange as a recent one in the system text."""
    recent = f"{RECENT_HEADER}\nUser: {message}\nAssistant: {FIRST_ANSWER}"
    return [{"role": "system", "content": f"{ASSISTANT_SYSTEM}\n\n{recent}"}, {"role": "user", "content": FOLLOW_UP}]


STORED_ANSWER = "Here is a short answer: keep it simple, and check again in a week."
MEMORY_QUESTIONS = [
    "What did I ask you about my tomatoes?",
    "Remind me, when is my marathon?",
    "Which album did you suggest?",
    "What was my question about taxes?",
    "Was habe ich über meinen Großvater gefragt?",
    "Qu'ai-je demandé sur le levain ?",
]


def memory_prompts(tmp: str) -> list[list[dict]]:
    """The six questions as Nexus sends them after the twelve messages were answered: the
    system text with TRACE's memory block and the newest exchange, then the question."""
    from trace_core import CTree, PromptSynthesizer

    tree = CTree.open(f"{tmp}/memory.db", judge="embedding")
    for message in MESSAGES:
        tree.add([{"role": "user", "content": message}, {"role": "assistant", "content": STORED_ANSWER}])
    recent = [{"role": "user", "content": MESSAGES[-1]}, {"role": "assistant", "content": STORED_ANSWER}]
    out = []
    with PromptSynthesizer(ctree=tree, vector_db=tree.vdb) as synth:
        for q in MEMORY_QUESTIONS:
            system = synth.synthesize_prompt(q, tree.embed_fn.embed(q), tree.current_node, recent)
            out.append([{"role": "system", "content": system}, {"role": "user", "content": q}])
    tree.close()
    return out


def run_memory_turns(retries: list[int], repeats: int, max_tokens: int) -> dict:
    """Per ``empty_retries``: the memory turns' replies that say nothing, and their times."""
    from openai import OpenAI

    from trace_core.local_server import says_nothing

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        prompts = memory_prompts(tmp)
        for n in retries:
            srv = LocalLLMServer(log_path=f"{tmp}/server-{n}.log", empty_retries=n).start(timeout=180)
            try:
                client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=300)
                rows = []
                for _ in range(repeats):
                    for messages in prompts:
                        t = time.perf_counter()
                        text = ""
                        for chunk in client.chat.completions.create(model=srv.model_name, max_tokens=max_tokens,
                                                                    temperature=0.7, stream=True, messages=messages):
                            if chunk.choices and chunk.choices[0].delta.content:
                                text += chunk.choices[0].delta.content
                        rows.append({"question": messages[-1]["content"], "seconds": round(time.perf_counter() - t, 3),
                                     "says_nothing": says_nothing(text), "text": text[:200]})
            finally:
                srv.stop()
            out[str(n)] = {"replies": len(rows), "says_nothing": sum(r["says_nothing"] for r in rows),
                           "median_seconds": round(statistics.median(r["seconds"] for r in rows), 3),
                           "p90_seconds": round(statistics.quantiles([r["seconds"] for r in rows], n=10)[-1], 3),
                           "rows": rows}
    return out


def seeded(seed: int | None) -> dict:
    """The request's seed argument: none at all for ``None`` (as Nexus sends a message)."""
    return {} if seed is None else {"seed": seed}


def run_server(reply_stops: bool, seeds: list[int | None], max_tokens: int) -> dict:
    from openai import OpenAI

    with tempfile.TemporaryDirectory() as tmp:
        srv = LocalLLMServer(log_path=f"{tmp}/server.log", reply_stops=reply_stops).start(timeout=180)
        try:
            client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=300)
            rows = []
            for message in MESSAGES:
                for seed in seeds:
                    t = time.perf_counter()
                    resp = client.chat.completions.create(
                        model=srv.model_name, max_tokens=max_tokens, temperature=0.7, **seeded(seed),
                        messages=[{"role": "system", "content": ASSISTANT_SYSTEM},
                                  {"role": "user", "content": message}])
                    seconds = time.perf_counter() - t
                    text = resp.choices[0].message.content or ""
                    again = [s for s in (ASSISTANT_SYSTEM[:20], message[:20], *TURN_END_STANDINS) if s in text]
                    rows.append({"message": message, "seed": seed, "seconds": round(seconds, 3),
                                 "tokens": resp.usage.completion_tokens, "finish": resp.choices[0].finish_reason,
                                 "prompt_again": bool(again), "empty": not text.strip(),
                                 "turn_word": marker_at(text, ended=True) is not None, "text": text[:400]})
            follow = []
            for message in MESSAGES:
                for seed in seeds:
                    resp = client.chat.completions.create(model=srv.model_name, max_tokens=max_tokens,
                                                          temperature=0.7, **seeded(seed),
                                                          messages=second_turn(message))
                    text = resp.choices[0].message.content or ""
                    follow.append({"message": message, "seed": seed, "tokens": resp.usage.completion_tokens,
                                   "next_turn": any(s in text for s in NEXT_TURN), "empty": not text.strip(),
                                   "turn_word": marker_at(text, ended=True) is not None,
                                   "text": text[:400]})
        finally:
            srv.stop()
    n = len(rows)
    return {"replies": n,
            "prompt_written_again": sum(r["prompt_again"] for r in rows),
            "empty": sum(r["empty"] for r in rows),
            "cut_at_max_tokens": sum(r["finish"] == "length" for r in rows),
            # a turn change written as a junk word glued to a role ("łęmauser"), kept in the reply
            "turn_word": sum(r["turn_word"] for r in rows) + sum(r["turn_word"] for r in follow),
            "median_tokens": statistics.median(r["tokens"] for r in rows),
            "median_seconds": round(statistics.median(r["seconds"] for r in rows), 3),
            "second_turns": len(follow),
            "second_turn_writes_next_turn": sum(r["next_turn"] for r in follow),
            "second_turn_empty": sum(r["empty"] for r in follow),
            "second_turn_median_tokens": statistics.median(r["tokens"] for r in follow),
            "rows": rows, "second_turn_rows": follow}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--max-tokens", type=int, default=256)  # Nexus's --local default
    ap.add_argument("--memory-retries", default=f"0,1,{EMPTY_RETRIES}")  # "none": skip the memory turns
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    seeds = [None] if args.seeds == "none" else [int(s) for s in args.seeds.split(",")]
    out = {"max_tokens": args.max_tokens, "seeds": seeds,
           "stops_off": run_server(False, seeds, args.max_tokens),
           "stops_on": run_server(True, seeds, args.max_tokens)}
    if args.memory_retries != "none":
        retries = list(dict.fromkeys(int(n) for n in args.memory_retries.split(",")))
        out["memory_turns"] = run_memory_turns(retries, args.repeats, args.max_tokens)
    print(f"{'':10} | replies | prompt written again | empty | cut at max_tokens | median tokens | median s")
    for name in ("stops_off", "stops_on"):
        r = out[name]
        print(f"{name:10} | {r['replies']:7} | {r['prompt_written_again']:19} | {r['empty']:5} | "
              f"{r['cut_at_max_tokens']:17} | {r['median_tokens']:13} | {r['median_seconds']:8}")
    print(f"{'':10} | second turns | next turn written | empty | median tokens")
    for name in ("stops_off", "stops_on"):
        r = out[name]
        print(f"{name:10} | {r['second_turns']:12} | {r['second_turn_writes_next_turn']:17} | "
              f"{r['second_turn_empty']:5} | {r['second_turn_median_tokens']:13}")
    off, on = out["stops_off"], out["stops_on"]
    print("turn change written as a word (\"łęmauser\"), first and second turns: "
          + ", ".join(f"{name} {out[name]['turn_word']} of {out[name]['replies'] + out[name]['second_turns']}"
                      for name in ("stops_off", "stops_on")))
    print(f"ratio on/off: median tokens {on['median_tokens'] / off['median_tokens']:.2f}, "
          f"median seconds {on['median_seconds'] / off['median_seconds']:.2f}")
    if "memory_turns" in out:
        print("turns with a memory block | more samples | replies | say nothing | median s | p90 s")
        for n, r in out["memory_turns"].items():
            print(f"{'':25} | {n:12} | {r['replies']:7} | {r['says_nothing']:11} | {r['median_seconds']:8} | "
                  f"{r['p90_seconds']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()

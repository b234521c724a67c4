"""Reopening a long session: time until its last exchanges are on screen.

    python -m bench.history_open [--exchanges 10000] [--runs 5] [--json OUT]

A 10,000-exchange session file is built fast with ``bench.scale.build_session``
(templated questions; each answer a few lines of Markdown: bold, a list, inline code;
five exchanges per topic, balanced tree, summaries, FTS, thread paths, written
through the store's own calls). Its vectors are random unit vectors recorded under
the default embedder's name and size, so that ``nexus`` opens it with its usual
MiniLM: this measures opening the file and drawing the history, not retrieval.

Each run starts ``python -m nexus --session FILE`` in a fresh headless process with
NEXUS_STARTUP_PROBE set; the app records when its first frame was drawn and when the
session's history (its last 50 exchanges, ``nexus/history.py``) had been mounted and a
frame drawn after it, then exits once the embedder is loaded. Baseline in the same
run: the same for an empty session (nothing to show: the event marks it open). The
newest page is read straight from the file while the tree loads (nexus/history.py),
so the long session's history can be on screen before an empty session is open; the
figures are both differences: history against the empty session's open, and history
against the long session's own first frame.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.scale import ANSWERS, DETAILS, QUESTIONS, SUBJECTS, build_session


class RandomVectors:
    """Random unit vectors under MiniLM's name and size (see the module docstring)."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, seed: int = 7) -> None:
        self.rng = np.random.default_rng(seed)

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def embed(self, text: str) -> np.ndarray:
        return self.embed_batch([text])[0]

    def __call__(self, text: str) -> list[float]:
        return self.embed(text).tolist()


def markdown_pool(rng: random.Random, n: int = 600) -> list[tuple[str, str, str]]:
    """(subject, question, answer) with answers as a chat model writes them."""
    out = []
    for _ in range(n):
        s, d = rng.choice(SUBJECTS), rng.choice(DETAILS)
        a = rng.choice(ANSWERS).format(s=s, d=d)
        answer = (f"**{s.title()}**: {a}\n\n- first, write down what you have\n- then `compare` the options "
                  f"{d}\n- keep notes for next time\n\nIn short: {a.lower()}")
        out.append((s, rng.choice(QUESTIONS).format(s=s, d=d), answer))
    return out


def one_run(session: str, data: str, probe: str) -> dict:
    env = {**os.environ, "NEXUS_STARTUP_PROBE": probe, "NEXUS_DATA_DIR": data,
           "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    if os.path.exists(probe):
        os.unlink(probe)
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "nexus", "--no-web", "--session", session],
                   env=env, check=True, capture_output=True, timeout=120)
    events = {}
    for e in map(json.loads, open(probe)):
        events.setdefault(e["event"], e)
    return {"first_paint": events["first_paint"]["t"] - t0, "history": events["history"]["t"] - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, empty = os.path.join(tmp, "long.db"), os.path.join(tmp, "empty.db")
        emb = RandomVectors()
        rng = random.Random(5)
        sentences = markdown_pool(rng)
        vecs = emb.embed_batch([t for _, q, a in sentences for t in (q, a)])
        t = time.perf_counter()
        build_session(big, args.exchanges, emb, sentences, vecs, rng)
        build = time.perf_counter() - t
        data = os.path.join(tmp, "data")
        runs_big, runs_empty = [], []
        for _ in range(args.runs):  # interleaved: machine load hits both alike
            if os.path.exists(empty):
                os.unlink(empty)
            runs_empty.append(one_run(empty, data, os.path.join(tmp, "probe-empty.jsonl")))
            runs_big.append(one_run(big, data, os.path.join(tmp, "probe-big.jsonl")))
    med = {name: {key: statistics.median(r[key] for r in runs) for key in ("first_paint", "history")}
           for name, runs in (("long", runs_big), ("empty", runs_empty))}
    extra = med["long"]["history"] - med["empty"]["history"]
    after_paint = statistics.median(r["history"] - r["first_paint"] for r in runs_big)
    res = {
        "exchanges": args.exchanges,
        "runs": args.runs,
        "build_s": build,
        "long_history_on_screen_s_median": med["long"]["history"],
        "empty_session_open_s_median": med["empty"]["history"],
        "long_first_paint_s_median": med["long"]["first_paint"],
        "empty_first_paint_s_median": med["empty"]["first_paint"],
        "extra_s": extra,
        "long_history_after_its_first_paint_s_median": after_paint,
        "ratio": med["long"]["history"] / med["empty"]["history"],
        "runs_long": runs_big,
        "runs_empty": runs_empty,
    }
    print(f"{args.exchanges:,}-exchange session: history on screen {med['long']['history']:.2f} s after start "
          f"({after_paint:.2f} s after its first frame); empty session open {med['empty']['history']:.2f} s "
          f"(medians of {args.runs}); difference {extra:.2f} s (ratio {res['ratio']:.2f}); first frame "
          f"{med['long']['first_paint']:.2f} s / {med['empty']['first_paint']:.2f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()

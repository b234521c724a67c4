"""Nexus start-up: time to first paint and to ready (embedder loaded), median of 5.

    python -m bench.startup [--runs 5] [--json OUT]

Each run starts ``python -m nexus`` in a fresh process (headless, a new session file,
no server needed: nothing is sent) with NEXUS_STARTUP_PROBE set; the app records the
wall-clock time of its first drawn frame and of the embedder becoming ready, and exits.
Times are from just before the process is spawned. Baseline in the same run: a bare
``python -c "import textual.app"`` process (the floor any Textual app stands on).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(tmp: str, k: int) -> dict:
    probe = os.path.join(tmp, f"probe{k}.jsonl")
    env = {**os.environ, "NEXUS_STARTUP_PROBE": probe, "NEXUS_DATA_DIR": os.path.join(tmp, "data"),
           "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "nexus", "--no-web", "--session", os.path.join(tmp, f"s{k}.db")],
                   env=env, check=True, capture_output=True, timeout=120)
    events = {e["event"]: e for e in map(json.loads, open(probe))}
    return {"first_paint": events["first_paint"]["t"] - t0, "ready": events["ready"]["t"] - t0,
            "torch_at_first_paint": events["first_paint"]["torch"],
            "sentence_transformers_at_first_paint": events["first_paint"]["sentence_transformers"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_run(tmp, k) for k in range(args.runs)]
    bare = []
    for _ in range(args.runs):
        t0 = time.time()
        subprocess.run([sys.executable, "-c", "import textual.app"], check=True)
        bare.append(time.time() - t0)
    res = {
        "first_paint_s_median": statistics.median(r["first_paint"] for r in runs),
        "ready_s_median": statistics.median(r["ready"] for r in runs),
        "bare_textual_import_s_median": statistics.median(bare),
        "torch_imported_at_first_paint": any(r["torch_at_first_paint"] for r in runs),
        "runs": runs,
    }
    print(f"first paint {res['first_paint_s_median']:.2f} s, ready {res['ready_s_median']:.2f} s "
          f"(median of {args.runs}); bare 'import textual.app' process {res['bare_textual_import_s_median']:.2f} s; "
          f"torch imported at first paint: {res['torch_imported_at_first_paint']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()

"""Time of one reorganize() with the embedding judge on trees of 100, 1,000 and 10,000 topics.

    python -m bench.reorganize [--sizes 100,1000,10000] [--json OUT]

The trees are synthetic: each topic holds two exchanges about one of 240 subjects
(one of 8 question templates about one of 30 objects, with a random detail), so many
topics are near-duplicates (merged: the expensive case), some share words only
(vetoed or merged by the masked rule). Texts are embedded with the real MiniLM before the clock starts;
the topics are laid out in a balanced tree (max 5 children). Timed: one
``reorganize()`` (phases 1-5, the veto's embeddings included), in memory and with a
session file (one transaction). Baseline in the same run: the naive O(n²) Python
double loop over pairs, for the pair phase alone, on the 1,000-topic tree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

import numpy as np

from bench.synthetic import layout_balanced
from trace_core import CTree, VectorDatabase
from trace_core.embedders import MiniLMEmbedder, normalise
from trace_core.nodes import MessageNode, TopicNode
from trace_core.reorganize import similar_pairs

TEMPLATES = [
    "How do I fix the {o}?", "What's the best way to clean the {o}?", "Where can I buy a new {o}?",
    "My {o} makes a strange noise.", "How much does a {o} cost?", "Can you compare brands of {o}?",
    "How long does a {o} last?", "Is it safe to repair the {o} myself?",
]
OBJECTS = [
    "dishwasher", "bicycle chain", "espresso machine", "garden hose", "laptop battery", "car radiator",
    "vinyl record player", "sourdough starter", "aquarium filter", "electric guitar", "sewing machine",
    "kayak paddle", "tent zipper", "running shoes", "drone propeller", "3D printer nozzle", "piano pedal",
    "ceiling fan", "snowboard binding", "chess clock", "beehive frame", "telescope mount", "violin bow",
    "pressure cooker", "skateboard bearing", "wood stove", "motorcycle clutch", "rice cooker",
    "baby stroller", "camera lens",
]
DETAILS = ["today", "this weekend", "after the move", "for my sister", "on a budget", "before winter",
           "as a beginner", "quickly", "with basic tools", "for the third time"]


def synthetic_topics(n: int, rng: random.Random) -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for _ in range(n):
        o = rng.choice(OBJECTS)
        t = rng.choice(TEMPLATES)
        talk = []
        for _k in range(2):
            q = t.format(o=o) + " " + rng.choice(DETAILS)
            talk.append((q, f"For the {o}: start by checking the manual, then {rng.choice(DETAILS)}."))
        out.append((f"{o.title()} Questions", talk))
    return out


def build(n: int, emb, rng: random.Random, max_children: int = 5) -> CTree:
    tree = CTree(judge="embedding", embed_fn=emb, max_children=max_children)
    topics = synthetic_topics(n, rng)
    texts = [t for _, talk in topics for u, a in talk for t in (u, a)]
    vecs = emb.embed_batch(texts)
    leaves = []
    idx = 0
    for name, talk in topics:
        topic = TopicNode(name, created_index=idx)
        for u, a in talk:
            m = MessageNode(idx, [{"role": "user", "content": u}, {"role": "assistant", "content": a}],
                            "2024-01-01T00:00:00")
            topic.add_child(m)
            tree.structure.register(m, normalise(vecs[2 * idx] + vecs[2 * idx + 1]))
            idx += 1
        topic.recompute_range()
        topic.summary = tree.judges.summarize(talk)
        leaves.append(topic)
    layout_balanced(tree, leaves, max_children)
    return tree


def naive_pairs(vectors: np.ndarray, threshold: float) -> int:
    n, count = len(vectors), 0
    for i in range(n):
        for j in range(i + 1, n):
            if float(vectors[i] @ vectors[j]) >= threshold:
                count += 1
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--json")
    args = ap.parse_args()
    emb = MiniLMEmbedder()
    emb.load()
    rng = random.Random(42)
    results = {}
    for n in [int(s) for s in args.sizes.split(",")]:
        tree = build(n, emb, rng)
        t = time.perf_counter()
        res = tree.reorganize(similarity_threshold=0.55)
        mem = time.perf_counter() - t
        tree2 = build(n, emb, random.Random(n))
        with tempfile.TemporaryDirectory() as tmp:
            tree2.vdb = VectorDatabase(os.path.join(tmp, "s.db"))
            t = time.perf_counter()
            res2 = tree2.reorganize(similarity_threshold=0.55)
            disk = time.perf_counter() - t
            tree2.vdb.close()
        results[n] = {"topics": n, "seconds_in_memory": mem, "seconds_with_session_file": disk,
                      "merged": res["merged"], "vetoed": res["vetoed"], "pairs": res["pairs"],
                      "merged_with_session_file": res2["merged"]}
        print(f"{n:>6} topics: reorganize() {mem:.2f} s in memory, {disk:.2f} s with a session file; "
              f"{res['pairs']} pairs ≥ 0.55, {res['merged']} merged, {res['vetoed']} vetoed", flush=True)
        if n == 1000:
            vecs = tree.summary_vectors([t for t in tree.iter_topics() if t.message_children][:1000])
            t = time.perf_counter()
            similar_pairs(vecs, 0.55)
            fast = time.perf_counter() - t
            t = time.perf_counter()
            naive_pairs(vecs, 0.55)
            slow = time.perf_counter() - t
            results["pair_phase_1000"] = {"vectorised_s": fast, "python_double_loop_s": slow, "ratio": slow / fast}
            print(f"        pair phase on 1,000 topics: vectorised {fast * 1000:.1f} ms vs Python double loop "
                  f"{slow * 1000:.0f} ms ({slow / fast:.0f}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()

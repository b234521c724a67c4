"""Synthesis time and session open time at 1,000, 10,000 and 100,000 stored exchanges.

    python -m bench.scale [--sizes 1000,10000,100000] [--queries 60] [--json OUT]

How the sessions are made: 3,000 distinct question/answer pairs are generated from
templates (40 subjects x 25 patterns with random details; "Alex: …" asks, "Sam: …"
answers, as in a transcript) and embedded once with the real MiniLM. Each synthetic
exchange is one such pair, so its vectors are real MiniLM vectors of its real text.
Every message also gets its context part (the message read after the one before it,
``textutil.message_parts``), whose vector here is the normalised sum of the two
messages' vectors: a stand-in that costs retrieval the same reads, without embedding
200,000 more texts. Exchanges are grouped five per topic, topics laid out as a
balanced tree (max 5 children), leaf topics frozen with extractive summaries, and
everything is written to a real session file through the store's own calls
(messages, conversation vectors, parts, FTS5, nodes, topic summaries) in one
transaction, which is what a long conversation leaves behind.

Measured: ``CTree.open()`` of the file (median of 3), then ``memory_block`` per query,
median and p95, query embeddings excluded (the question's, and the focused second
reading's). Queries are drawn from the same templates; half name a speaker, and every
one holds a word found in most exchanges ("Alex", "about", "the"), so all take the
focused path, the costlier one (``focused_queries`` in the JSON). Baseline in the same run: the same queries through a flat dense top-k over all
messages (numpy matrix product + argpartition) at the same size, the cheapest possible
retrieval.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time

import numpy as np

from bench.synthetic import layout_balanced
from trace_core import CTree, PromptSynthesizer, VectorDatabase
from trace_core.embedders import MiniLMEmbedder, normalise
from trace_core.nodes import MessageNode, TopicNode
from trace_core.store import ConversationVector, message_id
from trace_core.synthesis import SynthesisParams
from trace_core.synthesis.candidates import keyword_query
from trace_core.synthesizer import RetrievalReport

SUBJECTS = [
    "sourdough bread", "marathon training", "kubernetes clusters", "tomato plants", "jazz records", "income taxes",
    "my cat Miso", "the kitchen renovation", "a trip to Lisbon", "python decorators", "guitar lessons",
    "the wedding plans", "my sister's allergy", "home solar panels", "chess openings", "the electric bike",
    "a job interview", "learning Japanese", "the vegetable garden", "retirement savings", "a broken laptop",
    "the book club", "rock climbing", "the new puppy", "a dentist appointment", "photography gear",
    "the family reunion", "coffee brewing", "a leaking roof", "board games night", "the camping trip",
    "a car insurance claim", "yoga practice", "the science fair", "a birthday surprise", "wine tasting",
    "the podcast launch", "a moving company", "piano practice", "the charity run",
]
QUESTIONS = [
    "What should I know about {s} {d}?", "Can you help me plan {s} {d}?", "I'm worried about {s} {d}.",
    "How much time does {s} take {d}?", "Any tips for {s} {d}?",
]
ANSWERS = [
    "For {s}, start small and keep notes {d}.", "With {s}, the key is consistency {d}.",
    "Budget some extra time for {s} {d}.", "A checklist helps a lot with {s} {d}.",
    "Ask an expert about {s} if unsure {d}.",
]
DETAILS = ["this week", "next month", "on a budget", "with the kids", "after work", "before the holidays",
           "for the first time", "in the rain", "with friends", "this weekend"]


def pool(rng: random.Random, n: int = 3000) -> list[tuple[str, str, str]]:
    out = set()
    while len(out) < n:
        s = rng.choice(SUBJECTS)
        d = rng.choice(DETAILS)
        out.add((s, "Alex: " + rng.choice(QUESTIONS).format(s=s, d=d), "Sam: " + rng.choice(ANSWERS).format(s=s, d=d)))
    return sorted(out)


def make_queries(rng: random.Random, n: int) -> list[str]:
    """Questions from the templates; half ask what a speaker said."""
    out = []
    for k in range(n):
        s, d = rng.choice(SUBJECTS), rng.choice(DETAILS)
        out.append(f"What did Alex say about {s} {d}?" if k % 2 else rng.choice(QUESTIONS).format(s=s, d=d))
    return out


def build_session(path: str, n: int, emb, sentences, vecs, rng: random.Random) -> None:
    tree = CTree(judge="embedding", embed_fn=emb)
    db = VectorDatabase(path)
    db.check_embedder(emb.name, emb.dim)
    leaves: list[TopicNode] = []
    with db.transaction():
        idx = 0
        prev = None
        while idx < n:
            k = rng.randrange(len(sentences))
            subject = sentences[k][0]
            topic = TopicNode(subject.title(), created_index=idx)
            for _ in range(min(5, n - idx)):
                k = rng.randrange(len(sentences))
                _s, q, a = sentences[k]
                ts = f"2024-{1 + idx % 12:02d}-{1 + idx % 28:02d}T10:00:00"
                m = MessageNode(idx, [{"role": "user", "content": q}, {"role": "assistant", "content": a}], ts)
                topic.add_child(m)
                db.append_messages(idx, 2 * idx, m.messages, ts)
                path_s = f"ROOT → {topic.topic_name}"
                parts = []
                for r, (role, text) in enumerate((("user", q), ("assistant", a))):
                    v = vecs[2 * k + r]
                    db.add_conversation_message(ConversationVector(
                        message_id(idx, role), 2 * idx + r, role, text, v, ts, path_s, node_id=m.node_id, exchange_index=idx))
                    if prev is not None:  # the message read after its cue (see message_parts)
                        parts.append((message_id(idx, role), 0, f"{prev[0]} {text}", normalise(prev[1] + v)))
                    prev = (text, v)
                db.add_message_parts(parts)
                tree.structure.register(m, normalise(vecs[2 * k] + vecs[2 * k + 1]))
                idx += 1
            topic.recompute_range()
            topic.summary = tree.judges.summarize([(x.user, x.assistant) for x in topic.message_children])
            leaves.append(topic)
        layout_balanced(tree, leaves)
        db.save_nodes(tree.structure.rows())
        frozen = [t for t in tree.root.iter_topics() if t is not tree.root and t not in set(tree.active_path())]
        for t, v in zip(frozen, tree.summary_vectors(frozen)):
            db.upsert_topic_summary(t.node_id, t.topic_name, t.summary, v, t.start_index, t.end_index)
        db.set_meta("current_node", tree.current_node.node_id)
        db.set_meta("max_children", "5")
        db.set_meta("parts_indexed", str(n))
    db.close()


CANDIDATES = SynthesisParams().candidates
KEYWORD_HITS = SynthesisParams().keyword_candidates


def shortcut_agreement(tree: CTree, synth: PromptSynthesizer, queries: list[str], qvecs) -> dict[str, float]:
    """What the two shortcuts of a large session give up, whatever the size: the share of
    the projected first pass's best messages (``VectorIndex.top``) whose exact cosine
    reaches the exact best ``CANDIDATES``' lowest, and the share of ranks at which the
    numpy BM25 (``MessagePostings``) gives FTS5's own score, for the same keyword
    queries. Ties count as found: the synthetic sessions repeat texts, and which of two
    equal messages comes first is arbitrary."""
    index, vdb = tree.vdb.conversation_index(), tree.vdb
    found, shared = [], []
    for q, qv in zip(queries, qvecs):
        exact = index.similarities(qv)
        kth = np.partition(exact, len(exact) - CANDIDATES)[len(exact) - CANDIDATES]
        rows = index.top(qv, CANDIDATES, approximate_from=0)[0]
        found.append(float(np.mean(exact[rows] >= kth - 1e-6)))
        words = keyword_query(q, synth.word_stats, SynthesisParams().common_word_share)
        fts = [s for _, s in vdb.fts_ranked_messages(words, KEYWORD_HITS)]
        ours = [s for _, s in vdb.postings_search(words, KEYWORD_HITS)]
        if fts:
            shared.append(float(np.mean([abs(a - b) <= 1e-6 * abs(a) for a, b in zip(fts, ours + [0.0] * len(fts))])))
    return {"projected_found": statistics.mean(found), "bm25_same_score": statistics.mean(shared) if shared else 1.0}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = random.Random(11)
    emb = MiniLMEmbedder()
    emb.load()
    sentences = pool(rng)
    vecs = emb.embed_batch([t for _, q, a in sentences for t in (q, a)])
    queries = make_queries(rng, args.queries)
    qvecs = emb.embed_batch(queries)
    results = {}
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "scale.db")
            t = time.perf_counter()
            build_session(path, n, emb, sentences, vecs, random.Random(n))
            build = time.perf_counter() - t
            opens = []
            tree = None
            for _ in range(3):
                if tree is not None:
                    tree.vdb.close()
                t = time.perf_counter()
                tree = CTree.open(path, judge="embedding", embed_fn=emb)
                opens.append(time.perf_counter() - t)
            synth = PromptSynthesizer(ctree=tree)
            synth.memory_block(queries[0], qvecs[0], [], 3, 2, 0.5, 1000, RetrievalReport(""))  # warm caches
            times, flat = [], []
            focused = []
            for q, qv in zip(queries, qvecs):
                report = RetrievalReport(q)
                t = time.perf_counter()
                synth.memory_block(q, qv, [], 3, 2, 0.5, 1000, report)
                times.append(time.perf_counter() - t - report.embed_seconds)  # query embeddings excluded
                focused.append(report.embed_seconds > 0)
                index = tree.vdb.conversation_index()
                t = time.perf_counter()
                sims = index.similarities(qv)
                [index.ids[k] for k in np.argpartition(-sims, 24)[:25]]
                flat.append(time.perf_counter() - t)
            agree = shortcut_agreement(tree, synth, queries, qvecs)
            tree.vdb.close()
        r = {"exchanges": n, "build_s": build, "open_s_median": statistics.median(opens),
             "synthesis_ms_median": statistics.median(times) * 1000, "synthesis_ms_p95": pct(times, 0.95) * 1000,
             "flat_dense_ms_median": statistics.median(flat) * 1000, "focused_queries": sum(focused), **agree}
        results[n] = r
        print(f"{n:>7} exchanges: open {r['open_s_median']:.2f} s; synthesis median {r['synthesis_ms_median']:.1f} ms, "
              f"p95 {r['synthesis_ms_p95']:.1f} ms; flat dense top-25 median {r['flat_dense_ms_median']:.1f} ms "
              f"(built in {build:.0f} s); projected pass found {r['projected_found']:.3f} of the exact best "
              f"{CANDIDATES}; numpy BM25 gives FTS5's score at {r['bm25_same_score']:.3f} of the best {KEYWORD_HITS} ranks", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()

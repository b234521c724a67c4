"""Retrieval on LoCoMo: TRACE's memory block against flat RAG at the same token budget.

    python -m bench.locomo --data DIR [--budgets 500,1000,2000] [--json OUT]

For each conversation: ingest its turns through ``CTree`` (``judge="embedding"``,
MiniLM), run the idle-time sentence index (``CTree.index_pending``, timed apart), then
for every question of categories 1-4 take the memory block
``PromptSynthesizer`` would inject at each budget (query = the question, no recent
window) and measure evidence recall: the fraction of the question's evidence turns
whose text is in the block (whitespace-normalised; a turn longer than 300 characters
counts when its first 200 characters are there).

Baselines, same run, same turns, same embedder, same token count, same per-turn
clipping: fill the budget with top-ranked single turns by dense cosine, by BM25
(SQLite FTS5, the same query builder as ours), and by their reciprocal-rank fusion
(k=60). Nothing depends on conversation ids, question text or answers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import tempfile
import time

import numpy as np

from bench.locomo_data import Conversation, default_data_dir, load_dir
from trace_core import CTree, PromptSynthesizer
from trace_core.embedders import MiniLMEmbedder
from trace_core.store import fts_query
from trace_core.synthesizer import RetrievalReport, clip_text, short_date
from trace_core.tokens import count_tokens

CATEGORIES = {1, 2, 3, 4}
MAX_CHARS = 480  # per message, for ours and the baselines alike


def norm(text: str) -> str:
    return " ".join(text.split())


def turn_in(block: str, turn: str) -> bool:
    turn = norm(turn)
    if len(turn) > 300:
        turn = turn[:200]
    return turn in block


def evidence_ids(q: dict, turns: dict[str, str]) -> list[str]:
    ids = []
    for ev in q.get("evidence", []):
        for part in re.split(r"[;,]", str(ev)):
            part = part.strip()
            if part in turns:
                ids.append(part)
    return list(dict.fromkeys(ids))


def fill(order: list[int], lines: list[str], budget: int) -> str:
    """A flat baseline's block: top-ranked turns while they fit."""
    out, used = [], 0
    for i in order:
        c = count_tokens(lines[i]) + 1
        if used + c > budget:
            continue
        out.append(lines[i])
        used += c
    return "\n".join(out)


class FlatBaselines:
    def __init__(self, conv: Conversation, emb) -> None:
        self.ids: list[str] = []
        self.lines: list[str] = []
        texts = []
        for x in conv.exchanges:
            for did in x.dia_ids:
                self.ids.append(did)
                texts.append(x.turn_texts[did])
                self.lines.append(f"- [{short_date(x.timestamp)}] {clip_text(x.turn_texts[did], MAX_CHARS)}")
        self.vectors = emb.embed_batch(texts)
        self.fts = sqlite3.connect(":memory:")
        self.fts.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61')")
        self.fts.executemany("INSERT INTO t(rowid, text) VALUES(?, ?)", [(i, t) for i, t in enumerate(texts)])

    def dense(self, qvec) -> list[int]:
        return [int(i) for i in np.argsort(-(self.vectors @ qvec), kind="stable")]

    def bm25(self, query: str) -> list[int]:
        q = fts_query(query)
        if not q:
            return []
        rows = self.fts.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t)", (q,)).fetchall()
        return [r[0] for r in rows]

    def rrf(self, dense: list[int], bm25: list[int]) -> list[int]:
        score: dict[int, float] = {}
        for order in (dense, bm25):
            for rank, i in enumerate(order):
                score[i] = score.get(i, 0.0) + 1.0 / (60 + rank + 1)
        return sorted(score, key=lambda i: -score[i])


def turn_ranking(report: RetrievalReport, conv: Conversation) -> list[str]:
    out = []
    for i, role in report.ranking:
        did = conv.exchanges[i].role_ids.get(role)
        if did:
            out.append(did)
    return out


def run(data: str, budgets: list[int]) -> dict:
    emb = MiniLMEmbedder()
    emb.load()
    convs = load_dir(data)
    methods = ["trace", "dense", "bm25", "rrf"]
    recall = {b: {m: [] for m in methods} for b in budgets}
    tokens = {b: {m: [] for m in methods} for b in budgets}
    r_at = {5: [], 10: [], 25: []}
    synth_times: list[float] = []
    ingest_secs = index_secs = 0.0
    embed_times: list[float] = []
    n_questions = dropped = 0
    history_tokens = []
    with tempfile.TemporaryDirectory() as tmp:
        for conv in convs:
            t0 = time.perf_counter()
            tree = CTree.open(os.path.join(tmp, f"{conv.name}.db"), judge="embedding", embed_fn=emb)
            for x in conv.exchanges:
                tree.add(x.messages(), timestamp=x.timestamp)
            ingest_secs += time.perf_counter() - t0
            t0 = time.perf_counter()
            tree.index_pending()  # the idle-time sentence index (Nexus runs it after each reply)
            index_secs += time.perf_counter() - t0
            synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb, max_message_chars=MAX_CHARS)
            flat = FlatBaselines(conv, emb)
            qs = [q for q in conv.questions if q.get("category") in CATEGORIES]
            qvecs = emb.embed_batch([q["question"] for q in qs])
            for q, qvec in zip(qs, qvecs):
                ev = evidence_ids(q, conv.turns)
                if not ev:
                    dropped += 1
                    continue
                n_questions += 1
                d = flat.dense(qvec)
                k = flat.bm25(q["question"])
                orders = {"dense": d, "bm25": k, "rrf": flat.rrf(d, k)}
                for b in budgets:
                    t = time.perf_counter()
                    report = RetrievalReport(query=q["question"], memory_token_budget=b)
                    block = synth.memory_block(q["question"], qvec, [], 3, 2, 0.50, b, report)
                    if b == 1000 or len(budgets) == 1:
                        # query embeddings excluded: the question's (given) and its focused
                        # reading's (timed apart)
                        synth_times.append(time.perf_counter() - t - report.embed_seconds)
                        if report.embed_seconds:
                            embed_times.append(report.embed_seconds)
                    blocks = {"trace": block}
                    for m, order in orders.items():
                        blocks[m] = fill(order, flat.lines, b)
                    for m, text in blocks.items():
                        nb = norm(text)
                        recall[b][m].append(sum(turn_in(nb, conv.turns[e]) for e in ev) / len(ev))
                        tokens[b][m].append(count_tokens(text))
                ranked = turn_ranking(report, conv)
                for kk in r_at:
                    top = set(ranked[:kk])
                    r_at[kk].append(sum(e in top for e in ev) / len(ev))
            history_tokens.append(synth.full_history_tokens())
            tree.vdb.close()
    res = {
        "conversations": [c.name for c in convs],
        "questions": n_questions,
        "questions_without_known_evidence": dropped,
        "ingest_seconds": ingest_secs,
        "sentence_index_seconds": index_secs,
        "focused_query_embedding_ms_median": statistics.median(embed_times) * 1000 if embed_times else 0.0,
        "focused_query_share": len(embed_times) / max(len(synth_times), 1),
        "full_history_tokens_mean": statistics.mean(history_tokens),
        "synthesis_ms_median": statistics.median(synth_times) * 1000,
        "synthesis_ms_p95": sorted(synth_times)[int(0.95 * (len(synth_times) - 1))] * 1000,
        "trace_turn_recall_at": {str(k): statistics.mean(v) for k, v in r_at.items()},
        "budgets": {
            str(b): {m: {"recall": statistics.mean(recall[b][m]), "tokens": statistics.mean(tokens[b][m])}
                     for m in methods}
            for b in budgets
        },
    }
    return res


def print_table(res: dict) -> None:
    print(f"LoCoMo: {', '.join(res['conversations'])}; {res['questions']} questions (categories 1-4); "
          f"full history ≈ {res['full_history_tokens_mean']:.0f} tokens per conversation")
    print(f"{'budget':>7} | {'method':<6} | {'recall':>6} | {'tokens':>6}")
    for b, row in res["budgets"].items():
        for m, v in row.items():
            print(f"{b:>7} | {m:<6} | {v['recall']:6.3f} | {v['tokens']:6.0f}")
    r = res["trace_turn_recall_at"]
    print(f"TRACE turn-level R@5 {r['5']:.3f}  R@10 {r['10']:.3f}  R@25 {r['25']:.3f}")
    print(f"ingest {res['ingest_seconds']:.1f} s (add) + {res['sentence_index_seconds']:.1f} s (idle sentence index); "
          f"synthesis per query, query embeddings excluded: median {res['synthesis_ms_median']:.1f} ms, "
          f"p95 {res['synthesis_ms_p95']:.1f} ms; focused query embedded for "
          f"{res['focused_query_share']:.0%} of questions, median {res['focused_query_embedding_ms_median']:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=default_data_dir())
    ap.add_argument("--budgets", default="500,1000,2000")
    ap.add_argument("--json")
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    res = run(args.data, budgets)
    print_table(res)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()

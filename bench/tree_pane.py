"""The tree pane and the inspector on a large session, beside a small one in the same run.

    python -m bench.tree_pane [--sizes 100,10000] [--samples 40] [--json OUT] [--sessions DIR]

``--sessions DIR`` keeps the built session files there and reuses them in later runs
(building 10,000 exchanges takes about half a minute).

How the sessions are made: exchanges from the templates of bench/scale.py (40 subjects,
a run of 3-7 exchanges per subject), added one by one with the real ``CTree.add()``
(embedding judge, fan-out, frozen summaries) and a fast bag-of-words hash embedder
(meaning does not matter here, structure does), then written to a real session file
(``tree.vdb = VectorDatabase(path)``) with its sentence parts indexed. Nexus then
opens that file headless (``App.run_test``) exactly as a user's session.

Measured, per size, median and p95 over ``--samples`` random targets, as wall time and
as this process's CPU time (on a shared machine under load the wall time mostly counts
waiting for a core):

- expand: a collapsed topic (its ancestors opened first, not timed) is expanded and
  the pane has handled the events it caused and drawn its visible lines; the pane is
  folded again after each sample (``collapse_all`` below ROOT: a pane reopens what was
  open below a node, so without it every sample would reopen all the earlier ones);
- open inspector: the inspector closed, a topic selected, until it shows the detail
  and has been laid out (the chat beside it narrows: the screen is laid out again);
- inspect topic / inspect exchange: with the inspector open, from the selection until
  it shows the detail (read under the tree's lock in a worker, then rendered);
- new exchange: ``add()`` of one exchange (not timed), then the pane's update until
  it has drawn its visible lines; ``rebuilt`` counts child lists rebuilt (0-2 when updated in
  place). Beside it: the same update done as a full rebuild (the pane cleared and
  filled again with the same nodes open), the cost the in-place update avoids.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import statistics
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
from textual.geometry import Region

from bench.scale import pool
from trace_core import CTree, VectorDatabase
from trace_core.embedders import Embedder


class HashEmbedder(Embedder):
    """Bag of words hashed into 256 dimensions (stable across processes)."""

    name = "bench-hash-256"

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(w.encode()) % 256] += 1.0
            out[i, 0] += 0.01
        return out

    @property
    def dim(self) -> int:
        return 256


def build_session(path: str, n: int, emb: Embedder, rng: random.Random) -> float:
    """``n`` exchanges through the real ``add()``, written to a real session file."""
    t0 = time.perf_counter()
    sentences = pool(rng)
    by_subject: dict[str, list[tuple[str, str]]] = {}
    for s, q, a in sentences:
        by_subject.setdefault(s, []).append((q, a))
    subjects = sorted(by_subject)
    tree = CTree(judge="embedding", embed_fn=emb)
    i = 0
    while i < n:
        s = rng.choice(subjects)
        for _ in range(rng.randint(3, 7)):
            if i >= n:
                break
            q, a = rng.choice(by_subject[s])
            tree.add([{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                     timestamp=f"2024-{1 + i // 28 % 12:02d}-{1 + i % 28:02d}T10:00:00")
            i += 1
    tree.vdb = VectorDatabase(path)  # an empty file receives the whole tree
    tree.index_pending()
    tree.vdb.close()
    return time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class Samples:
    """Wall time and this process's CPU time (all its threads) per operation. The CPU
    figure does not count time spent waiting for a core: on a shared, loaded machine
    it is the operation's own cost; on an idle one the two agree."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def start(self) -> None:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.wall.append(time.perf_counter() - self.wall0)
        self.cpu.append(time.process_time() - self.cpu0)

    def stats(self) -> dict:
        return {"median_ms": statistics.median(self.wall) * 1000, "p95_ms": pct(self.wall, 0.95) * 1000,
                "cpu_median_ms": statistics.median(self.cpu) * 1000, "cpu_p95_ms": pct(self.cpu, 0.95) * 1000,
                "n": len(self.wall), "wall_ms": [round(w * 1000, 1) for w in self.wall]}


async def measure(path: str, emb: Embedder, samples: int, rng: random.Random) -> dict:
    from nexus.app import NexusApp
    from nexus.config import load_config
    from nexus.inspector import NodeInspector
    from nexus.widgets import MemoryTree

    cfg = load_config(env={}, user_file=Path(path).parent / "none.toml")
    cfg.set("memory", "judge", "embedding")
    cfg.set("memory", "idle_reorganize_seconds", 0)
    cfg.set("web", "enabled", False)
    app = NexusApp(cfg, path, embed_fn=emb)
    out: dict = {}
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one(MemoryTree)
        inspector = app.query_one(NodeInspector)
        for _ in range(2000):
            if app.session is not None and app.embedder_state == "ready" and pane.snapshot is not None:
                break
            await asyncio.sleep(0.01)
        tree = app.session.tree
        topics = [t for t in tree.iter_topics() if t is not tree.root]
        # the first second after opening mounts the chat history and starts the embedder:
        # measure once the app is quiet
        for _ in range(3):
            await pilot.pause(1.0)
        while any(not w.is_finished for w in app.workers):
            await asyncio.sleep(0.1)

        async def settle() -> None:
            """The pane and the inspector have handled what the operation posted to them and
            drawn their visible lines. (Waiting for the whole screen would time the chat
            pane's hundreds of history widgets too, and pilot.pause() waits for the process
            to go idle: up to a second.)"""
            for w in (pane, inspector):
                done = asyncio.Event()
                w.call_later(done.set)  # runs after the messages already in its queue
                await done.wait()
                if w.display and w.size.area:
                    w.render_lines(Region(0, 0, w.size.width, w.size.height))

        async def open_path(t) -> None:
            for a in tree.get_ancestors(t)[:-1]:
                node = pane._topic_nodes.get(a.node_id)
                if node is not None and not node.is_expanded:
                    node.expand()
                    await settle()

        # expand
        expand = Samples()
        for t in rng.sample(topics, min(samples, len(topics))):
            await open_path(t)
            node = pane._topic_nodes[t.node_id]
            if node.is_expanded:
                node.collapse()
                await settle()
            expand.start()
            node.expand()
            await settle()
            expand.stop()
            for top in list(pane.root.children):  # each sample from a folded tree (the pane
                top.collapse_all()  # reopens what was open below a node when it opens again)
            await settle()
        out["expand"] = expand.stats()

        async def inspect(data, done, into: Samples) -> None:
            into.start()
            inspector.inspect(tree, data, None, app.session.synth)
            while not done() or not inspector.size.width:  # shown, and laid out when it opens
                if time.perf_counter() - into.wall0 > 30:
                    raise RuntimeError(f"the inspector did not show {data!r} in 30 s; workers: "
                                       f"{[(w.name, w.state.name, w.error) for w in app.workers]}")
                await asyncio.sleep(0.002)
            await settle()
            into.stop()

        # opening: the inspector closed before each sample (the screen is laid out again:
        # the chat beside it narrows); then selections with it open
        opening = Samples()
        for t in rng.sample(topics, min(samples, len(topics))):
            inspector.close()
            await settle()
            await inspect(t.node_id, lambda t=t: getattr(inspector.detail, "node_id", None) == t.node_id, opening)
        out["open_inspector"] = opening.stats()
        topic_s, exchange_s = Samples(), Samples()
        for t in rng.sample(topics, min(samples, len(topics))):
            await inspect(t.node_id, lambda t=t: getattr(inspector.detail, "node_id", None) == t.node_id, topic_s)
        xs = [x for x in tree.exchanges if x.parent is not None]
        for x in rng.sample(xs, min(samples, len(xs))):
            await inspect(x, lambda x=x: getattr(inspector.detail, "index", -1) == x.index, exchange_s)
        out["inspect_topic"] = topic_s.stats()
        out["inspect_exchange"] = exchange_s.stats()

        # a new exchange: in place, and the full rebuild it avoids
        inplace, full, rebuilt = Samples(), Samples(), []
        for k in range(samples):
            q = f"One more question about the bench, number {k}?"
            await asyncio.to_thread(tree.add, [{"role": "user", "content": q},
                                               {"role": "assistant", "content": "Noted."}])
            r0 = pane.rebuilt
            inplace.start()
            pane.refresh_tree(tree)
            await settle()
            inplace.stop()
            rebuilt.append(pane.rebuilt - r0)
            full.start()
            pane._reset(tree)  # the same tree shown afresh: every child list made again
            pane.refresh_tree(tree)
            await settle()
            full.stop()
        out["new_exchange"] = inplace.stats() | {"child_lists_rebuilt_max": max(rebuilt)}
        out["new_exchange_full_rebuild"] = full.stats()
        out["topics"] = len(topics)
        out["depth"] = pane.snapshot.depth
        out["shown_nodes"] = len(pane._topic_nodes)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,10000")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--json")
    ap.add_argument("--sessions", help="a folder to keep the built sessions in and reuse them from")
    args = ap.parse_args()
    emb = HashEmbedder()
    results = {}
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        # one data folder for the run (Nexus's log handler lives there), never the user's;
        # every session is built before Nexus first runs
        os.environ["NEXUS_DATA_DIR"] = os.path.join(tmp, "data")
        paths, builds = {}, {}
        for n in sizes:
            paths[n] = os.path.join(tmp, f"pane-{n}.db")
            kept = os.path.join(args.sessions, f"pane-{n}.db") if args.sessions else ""
            if kept and os.path.exists(kept):
                builds[n] = 0.0  # built by an earlier run; measured on a copy (the run adds exchanges)
            else:
                builds[n] = build_session(kept or paths[n], n, emb, random.Random(n))
            if kept:
                shutil.copyfile(kept, paths[n])
        for n in sizes:
            r = asyncio.run(measure(paths[n], emb, args.samples, random.Random(7)))
            r["exchanges"] = n
            r["build_s"] = builds[n]
            results[n] = r
            print(f"{n:>6} exchanges ({r['topics']} topics, depth {r['depth']}, built in {builds[n]:.0f} s):",
                  flush=True)
            for op in ("expand", "open_inspector", "inspect_topic", "inspect_exchange", "new_exchange", "new_exchange_full_rebuild"):
                s = r[op]
                print(f"    {op:<26} wall median {s['median_ms']:6.1f} ms  p95 {s['p95_ms']:6.1f} ms   "
                      f"cpu median {s['cpu_median_ms']:6.1f} ms  p95 {s['cpu_p95_ms']:6.1f} ms", flush=True)
        for h in list(logging.getLogger().handlers):  # Nexus's file log, in the folder about to go
            logging.getLogger().removeHandler(h)
            h.close()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()

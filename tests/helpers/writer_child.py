"""Child process for the one-writer tests: reads commands on stdin, answers one line each.

``open`` / ``open-ro`` / ``add TEXT`` / ``close`` / ``contend N PREFIX`` (open, add one
exchange, close; N times, retrying while another process holds the lock). An exchange
is acknowledged (``ACK index text``) only after ``add()`` returned."""

import sys
import time

import numpy as np

from trace_core import CTree, ReadOnlySessionError, SessionLockedError


class HashEmbedder:
    name = "hash-bow-64"

    def __call__(self, text):
        v = np.zeros(64, dtype=np.float32)
        for w in text.lower().split():
            v[sum(map(ord, w)) % 64] += 1.0
        v[0] += 0.01
        return v.tolist()


def add(tree, text: str) -> None:
    node = tree.add([{"role": "user", "content": text}, {"role": "assistant", "content": f"noted: {text}"}])
    print(f"ACK {node.index} {text}", flush=True)


def main() -> None:
    path = sys.argv[1]
    tree = None
    print("READY", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd in ("open", "open-ro"):
                tree = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), max_children=3,
                                  read_only=cmd == "open-ro")
                print(f"OPEN {len(tree.exchanges)}", flush=True)
            elif cmd == "add":
                add(tree, arg)
            elif cmd == "close":
                tree.vdb.close()
                tree = None
                print("CLOSED", flush=True)
            elif cmd == "contend":
                n, prefix = arg.split(" ", 1)
                done = 0
                while done < int(n):
                    try:
                        t = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), max_children=3)
                    except SessionLockedError:
                        print("REFUSED", flush=True)
                        time.sleep(0.01)
                        continue
                    try:
                        add(t, f"{prefix} {done}")
                    finally:
                        t.vdb.close()
                    done += 1
                print("DONE", flush=True)
        except SessionLockedError as exc:
            print(f"LOCKED {exc.pid} {exc}", flush=True)
        except ReadOnlySessionError as exc:
            print(f"READONLY {exc}", flush=True)


if __name__ == "__main__":
    main()

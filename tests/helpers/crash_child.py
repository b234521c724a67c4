"""Child process for the crash tests: open a session, add exchanges, acknowledge each
one on stdout after ``add()`` returned, until killed."""

import sys

import numpy as np

from trace_core import CTree


class HashEmbedder:
    name = "hash-bow-64"

    def __call__(self, text):
        v = np.zeros(64, dtype=np.float32)
        for w in text.lower().split():
            v[sum(map(ord, w)) % 64] += 1.0
        v[0] += 0.01
        return v.tolist()


def main() -> None:
    path = sys.argv[1]
    tree = CTree.open(path, judge="embedding", embed_fn=HashEmbedder(), max_children=3)
    n = len(tree.exchanges)
    print(f"START {n}", flush=True)
    while True:
        tree.add([{"role": "user", "content": f"exchange {n} about topic {n % 7} " + "filler " * (n % 13)},
                  {"role": "assistant", "content": f"answer {n}"}])
        print(f"ACK {n}", flush=True)
        n += 1


if __name__ == "__main__":
    main()

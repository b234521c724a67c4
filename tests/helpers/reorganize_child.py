"""Child for the kill-midway test: open a session, run a reorganisation whose veto
judge is slowed by argv[2] seconds per pair, so a kill can land in the middle."""

import sys
import time

from trace_core import CTree
from trace_core.embedders import MiniLMEmbedder
from trace_core.judges import EmbeddingJudge


class SlowJudge(EmbeddingJudge):
    delay: float = 0.0

    def approve_merge(self, a, b, embed):
        time.sleep(self.delay)
        return super().approve_merge(a, b, embed)


def main() -> None:
    judge = SlowJudge()
    judge.delay = float(sys.argv[2])
    tree = CTree.open(sys.argv[1], judge="embedding", embed_fn=MiniLMEmbedder(), embedding_judge=judge)
    print("READY", flush=True)
    tree.reorganize(similarity_threshold=0.5, prune_trivial_leaves=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()

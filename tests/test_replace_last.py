"""CTree.replace_last: /retry and /edit replace the newest exchange (issue 12)."""

from __future__ import annotations

import pytest


def test_replace_last_swaps_the_newest_exchange_everywhere(tmp_path, minilm):
    """/retry and /edit: the newest exchange is replaced in the tree, the store, the
    message index and the sentence index — never duplicated."""
    from trace_core import CTree

    path = tmp_path / "r.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My dog is called Rex."}, {"role": "assistant", "content": "Nice."}])
    tree.add([{"role": "user", "content": "What is the capital of Peru?"},
              {"role": "assistant", "content": "Bogota, I think."}])
    tree.index_pending()
    node = tree.replace_last([{"role": "user", "content": "What is the capital of Peru?"},
                              {"role": "assistant", "content": "Lima is the capital of Peru."}])
    assert node.index == 1 and len(tree.exchanges) == 2
    assert tree.exchanges[1].assistant == "Lima is the capital of Peru."
    assert [m["content"] for m in tree.conversation][-1] == "Lima is the capital of Peru."
    assert tree.pending_parts() == 1  # its sentences are embedded again at idle time
    hits = tree.vdb.search_conversation(minilm.embed("capital of Peru Bogota"), top_k=10, min_similarity=0.0)
    texts = [h.text for h in hits]
    assert "Lima is the capital of Peru." in texts and "Bogota, I think." not in texts
    assert tree.vdb.keyword_search_messages("Bogota") == []
    tree.index_pending()
    tree.vdb.close()
    again = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    assert [x.assistant for x in again.exchanges] == ["Nice.", "Lima is the capital of Peru."]
    assert again.pending_parts() == 0
    again.vdb.close()


def test_replace_last_needs_an_exchange(tmp_path, minilm):
    from trace_core import CTree

    tree = CTree.open(str(tmp_path / "e.db"), judge="embedding", embed_fn=minilm)
    with pytest.raises(ValueError, match="no exchange"):
        tree.replace_last([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    tree.vdb.close()

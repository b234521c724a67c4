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
                              {"role": "assistant", "content": "Lima is the capital of Peru."}],
                             timestamp="2026-12-03T07:52:00+00:00")
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
    assert again.exchanges[1].timestamp == "2026-12-03T07:52:00+00:00"  # the edit's time, in every row
    stamps = again.vdb.con.execute("SELECT DISTINCT timestamp FROM messages WHERE exchange_index = 1").fetchall()
    assert stamps == [("2026-12-03T07:52:00+00:00",)]  # what the chat's history shows
    assert again.pending_parts() == 0
    again.vdb.close()


def test_replace_last_needs_an_exchange(tmp_path, minilm):
    from trace_core import CTree

    tree = CTree.open(str(tmp_path / "e.db"), judge="embedding", embed_fn=minilm)
    with pytest.raises(ValueError, match="no exchange"):
        tree.replace_last([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    tree.vdb.close()


def test_an_edited_exchange_alone_in_its_topic_names_it_again(tmp_path, minilm):
    """/edit of a topic's only exchange: the topic was named from the old text ("Long
    Story Cat" over a story about a dog, found in a new-user trial); it is named again from
    the new one, in the file too. A topic holding other exchanges keeps its name."""
    from trace_core import CTree

    path = tmp_path / "n.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "How do I keep a sourdough starter alive?"},
              {"role": "assistant", "content": "Feed the starter flour and water daily."}])
    tree.add([{"role": "user", "content": "Tell me a long story about a cat."},
              {"role": "assistant", "content": "Once upon a time a cat sailed the seas."}])
    topic = tree.exchanges[1].parent
    assert topic is not tree.exchanges[0].parent and "Cat" in topic.topic_name
    tree.replace_last([{"role": "user", "content": "Tell me a short story about a dog."},
                       {"role": "assistant", "content": "A dog named Rex found a bone in the garden."}])
    assert "Cat" not in topic.topic_name and "Dog" in topic.topic_name
    name = topic.topic_name
    assert name in tree.thread_path(tree.exchanges[1])
    tree.vdb.close()
    again = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    assert again.exchanges[1].parent.topic_name == name
    hit = again.vdb.search_conversation(minilm.embed("a dog named Rex"), top_k=1, min_similarity=0.0)[0]
    assert name in hit.thread_path
    again.vdb.close()

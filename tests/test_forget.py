"""Forgetting: an exchange's words gone from memory and from the session file's bytes."""

from __future__ import annotations

import glob
import json

import pytest

from trace_core import CTree, PromptSynthesizer, VectorDatabase
from trace_core.invariants import check_invariants
from trace_core.nodes import FORGOTTEN
from trace_core.reorganize import UndoError

SECRET = "97531"  # a number: FTS keeps it as written, so the file's bytes can be searched for it

TALK = [("My sister Ana lives in Porto.", "Nice, Porto is lovely."),
        (f"My gym locker code is {SECRET}, remember it.", f"Got it: your gym locker code is {SECRET}."),
        ("I train at the gym on Mondays.", "Mondays at the gym, noted."),
        ("My cat is called Miso.", "Miso is a cute name."),
        ("Ana is an architect.", "An architect in Porto, great.")]


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def build(path, minilm, talk=TALK, **kw) -> CTree:
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm, **kw)
    for u, a in talk:
        tree.add(ex(u, a))
    tree.index_pending()  # the idle sentence index: parts hold a message read after the one before
    return tree


def file_bytes(path) -> bytes:
    return b"".join(open(f, "rb").read() for f in sorted(glob.glob(f"{path}*")) if not f.endswith(".lock"))


def test_forgotten_words_leave_memory_names_and_the_file(tmp_path, minilm):
    path = tmp_path / "f.db"
    tree = build(path, minilm)
    locker = tree.exchanges[1]
    assert "Locker" in locker.parent.topic_name  # named after the words to forget
    assert SECRET.encode() in file_bytes(path)

    res = tree.forget([locker])
    check_invariants(tree)
    assert res.forgotten == [1]
    assert locker.archived and locker.forgotten and locker.user == FORGOTTEN
    assert [old for old, _ in res.renamed] and not any("Locker" in new for _, new in res.renamed)
    assert "locker" not in tree.render_tree().lower()
    assert tree.vdb.keyword_search_messages(SECRET) == []
    with PromptSynthesizer(ctree=tree, vector_db=tree.vdb) as synth:
        block = synth.synthesize_prompt("what is my gym locker code?", None, None, [])
    assert SECRET not in block and "Mondays" in block  # the rest of the gym is still remembered
    # the next message's sentence parts (it read after the forgotten reply) are made again
    parts = tree.vdb.message_parts(["x2-user"])
    assert parts and not any(SECRET in t for t in parts["x2-user"][0])
    tree.close()
    data = file_bytes(path)
    assert SECRET.encode() not in data and b"locker" not in data.lower()

    reopened = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    check_invariants(reopened)
    x = reopened.exchanges[1]
    assert x.forgotten and [m["content"] for m in x.messages] == [FORGOTTEN, FORGOTTEN]
    assert reopened.restore_archived() == []  # nothing of it is left to restore
    assert [y.user for y in reopened.exchanges if not y.archived] == [u for i, (u, _) in enumerate(TALK) if i != 1]
    assert reopened.forget([x]).forgotten == []  # again: nothing to do
    reopened.close()


def test_forgetting_drops_the_undo_record_that_holds_the_old_names(tmp_path, minilm):
    talk = [("How do I start a sourdough starter?", "Mix flour and water and feed it daily."),
            ("My sourdough starter smells sour.", "That's normal, feed it more often."),
            ("How do I roll back a Kubernetes deployment?", "Use kubectl rollout undo."),
            ("What flour is best for a sourdough starter?", "Whole rye flour gets a sourdough starter going fast."),
            ("How often should I feed my sourdough starter?", "Feed the starter twice a day at room temperature."),
            ("When is the income tax deadline?", "Mid-April usually.")]
    path = tmp_path / "u.db"
    tree = build(path, minilm, talk)
    assert tree.reorganize(similarity_threshold=0.5)["merged"]
    res = tree.forget([tree.exchanges[2]])
    assert res.undo_dropped
    with pytest.raises(UndoError):
        tree.undo_reorganize()
    tree.close()
    assert b"kubernetes" not in file_bytes(path).lower()


def test_a_tree_without_a_store_forgets_in_its_json_export(tmp_path, minilm):
    out = tmp_path / "auto.json"
    tree = CTree(judge="embedding", embed_fn=minilm, auto_save_path=str(out))
    for u, a in TALK:
        tree.add(ex(u, a))
    assert SECRET in out.read_text()
    tree.forget([tree.exchanges[1]])
    text = out.read_text()
    assert SECRET not in text and "locker" not in text.lower()
    assert json.loads(text)["archived"]
    loaded = CTree.load(str(out), embed_fn=minilm, judge="embedding")
    assert loaded.exchanges[1].forgotten


def test_an_exchange_archived_before_takes_its_words_out_of_the_names(tmp_path, minilm):
    """Archived first (/reorganize --prune): its topic, found by where it was archived
    from, kept the name "Sourdough Starter Wobblewick" (a trial)."""
    talk = [("My sourdough starter is called Wobblewick.", "Wobblewick is a fine name for a starter."),
            ("How often should I feed my sourdough starter?", "Feed it twice a day."),
            ("My sourdough starter smells of acetone.", "Feed it more often.")]
    path = tmp_path / "w.db"
    tree = build(path, minilm, talk)
    assert "Wobblewick" in tree.render_tree()
    tree.archive([tree.exchanges[0]])
    res = tree.forget([tree.exchanges[0]])
    assert res.renamed and "wobblewick" in res.words and "sourdough" not in res.words  # others hold that
    assert "wobblewick" not in tree.render_tree(show_messages=True).lower()
    tree.close()
    assert b"wobblewick" not in file_bytes(path).lower()


def test_a_reader_keeps_the_old_log_pages_until_the_next_open_and_the_result_says_so(tmp_path, minilm):
    path = tmp_path / "r.db"
    tree = build(path, minilm)
    reader = CTree.open(str(path), judge="embedding", embed_fn=minilm, read_only=True)  # another window
    res = tree.forget([tree.exchanges[1]], meta={"app.copy": None, "app.note": "kept"})
    assert res.forgotten == [1] and not res.file_purged
    assert tree.vdb.get_meta("app.note") == "kept"
    tree.close()
    reader.close()  # last, and read-only: it cannot empty the log
    assert SECRET.encode() in file_bytes(path)
    again = CTree.open(str(path), judge="embedding", embed_fn=minilm)  # the next open empties the log
    assert SECRET.encode() not in file_bytes(path)
    again.close()
    solo = build(tmp_path / "s.db", minilm)
    assert solo.forget([solo.exchanges[1]]).file_purged
    solo.close()


def test_once_the_reader_has_left_the_next_write_empties_the_log(tmp_path, minilm):
    """The old pages stayed in the log as long as the writing window stayed open (a re-trial)."""
    path = tmp_path / "w.db"
    tree = build(path, minilm)
    reader = CTree.open(str(path), judge="embedding", embed_fn=minilm, read_only=True)
    assert not tree.forget([tree.exchanges[1]]).file_purged
    reader.close()
    assert SECRET.encode() in file_bytes(path)
    tree.add(ex("My cat likes tuna.", "Miso and tuna, noted."))
    assert SECRET.encode() not in file_bytes(path)
    tree.close()


def test_archive_restore_forget_name_what_they_take(tmp_path, hash_embed):
    """archive([5]) said "'int' object has no attribute 'archived'"; replace_last after a
    forget said "restore it", which a forgotten exchange cannot be (a developer's trial)."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}])
    other = CTree(judge="embedding", embed_fn=hash_embed)
    other.add([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}])
    for call in (tree.archive, tree.restore_archived, tree.forget):
        for bad in ([5], ["x"], [other.exchanges[0]]):
            with pytest.raises(TypeError, match="takes this tree's exchanges"):
                call(bad)
    tree.forget([tree.exchanges[0]])
    with pytest.raises(ValueError, match="is forgotten: there is nothing to replace"):
        tree.replace_last([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])


def test_the_whole_history_count_follows_a_replace_and_a_forget(hash_embed):
    """/stats' "whole history" stayed at its count from before a /forget or a /retry: it
    was cached by the number of messages alone (a trial)."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    tree.add([{"role": "user", "content": "one " * 50}, {"role": "assistant", "content": "two " * 50}])
    tree.add([{"role": "user", "content": "three"}, {"role": "assistant", "content": "four " * 80}])
    synth = PromptSynthesizer(ctree=tree)
    first = synth.full_history_tokens()
    tree.replace_last([{"role": "user", "content": "three"}, {"role": "assistant", "content": "short"}])
    replaced = synth.full_history_tokens()
    assert replaced < first - 70
    tree.forget([tree.exchanges[0]])
    assert synth.full_history_tokens() < replaced - 40
    synth.close()


def test_meta_with_a_lone_surrogate_or_a_number_loses_no_forget(tmp_path, hash_embed):
    """A lone surrogate in ``meta`` (a JSON client's "\\ud800") failed the file's write
    with UnicodeEncodeError after the tree had forgotten: the tree said "[forgotten]", the
    file still held the words, and they were back when it was opened again. A number was
    stored as one (get_meta read back 5)."""
    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    for u, a in TALK:
        tree.add(ex(u, a))
    with pytest.raises(ValueError, match="texts or None"):
        tree.forget([tree.exchanges[1]], meta={"myapp.copy": 5})
    assert not tree.exchanges[1].forgotten and SECRET in tree.exchanges[1].user
    tree.forget([tree.exchanges[1]], meta={"myapp.copy": "cleaned \ud800", "myapp.gone": None})
    tree.vdb.set_meta("myapp.other", "x \udc80")
    tree.save(str(tmp_path / "e.json"), meta={"myapp.copy": "saved \ud800"})
    with pytest.raises(ValueError, match="texts to texts"):
        tree.save(str(tmp_path / "f.json"), meta={"myapp.copy": 5})
    tree.close()
    tree = CTree.open(path, judge="embedding", embed_fn=hash_embed)
    assert tree.exchanges[1].forgotten and SECRET not in file_bytes(tmp_path / "s.db").decode("latin-1")
    assert tree.vdb.get_meta("myapp.copy") == "cleaned \ufffd" and tree.vdb.get_meta("myapp.other") == "x \ufffd"
    tree.close()
    loaded = CTree.load(str(tmp_path / "e.json"), embed_fn=hash_embed)
    loaded.use_store(VectorDatabase(str(tmp_path / "l.db")))
    assert loaded.vdb.get_meta("myapp.copy") == "saved \ufffd"
    loaded.close()


def test_a_japanese_name_forgotten_leaves_the_topic_name(tmp_path, minilm):
    """After /forget #0, the topic stayed named "名前 ポチ 柴犬": the dog's name it had
    forgotten. A name takes the words between a Japanese sentence's particles, and the
    forgotten words were the whole unspaced sentences (a trial)."""
    talk = [("私の犬の名前はポチです。柴犬です。", "かわいい柴犬ですね。"),
            ("柴犬は毎朝公園を散歩します。", "公園の散歩はいいですね。"),
            ("柴犬のごはんは何がいいですか？", "ドッグフードがいいです。")]
    tree = build(tmp_path / "s.db", minilm, talk)
    topic = tree.exchanges[1].parent
    assert tree.exchanges[0].parent is topic and "ポチ" in topic.topic_name.split()
    res = tree.forget([tree.exchanges[0]])
    assert "ポチ" not in topic.topic_name and "名前" not in topic.topic_name, topic.topic_name
    assert res.renamed and {"ポチ", "名前"} <= res.words and "柴犬" not in res.words  # 柴犬 is still said
    tree.close()

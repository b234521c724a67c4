"""Text in every language: words, names, summaries, search terms and sentence parts are
Unicode-aware (German, French, Japanese exchanges)."""

from __future__ import annotations

from trace_core import CTree, PromptSynthesizer
from trace_core.store import fts_query
from trace_core.textutil import extractive_name, query_terms, sentence_parts, speaker_label, tokens, words_of

GERMAN = ("Ich habe gestern in München ein grünes Fahrrad gekauft.",
          "Ein grünes Fahrrad aus München klingt großartig!")
FRENCH = ("Cet été, nous irons à Besançon voir la cathédrale.",
          "Besançon en été : la cathédrale Saint-Jean vaut le détour.")
JAPANESE = ("先週、東京タワーに行きました。とても高かったです。夜景がきれいでした。",
            "東京タワーの夜景は有名ですね。また行きたいですか。")


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def test_words_and_search_terms_keep_every_letter():
    assert "münchen" in words_of(GERMAN[0]) and "großartig" in words_of(GERMAN[1])
    assert {"été", "besançon", "cathédrale"} <= set(query_terms(FRENCH[0]))
    assert "saint" in query_terms(FRENCH[1]) and "jean" in query_terms(FRENCH[1])  # FTS5 splits at "-"
    assert tokens(JAPANESE[0])[0] == "先週"  # a run of CJK is one token, as FTS5's unicode61 reads it
    assert fts_query("l’été à Zürich") == '"zürich" OR "été"'


def test_names_and_labels_in_other_scripts():
    assert "München" in extractive_name(" ".join(GERMAN))
    assert "Besançon" in extractive_name(" ".join(FRENCH))
    name = extractive_name(" ".join(JAPANESE))
    assert name != "Conversation Notes" and "東京タワー" in name
    assert speaker_label("Zoë Müller: salut") == "Zoë Müller: " and speaker_label("さくら: こんにちは") == "さくら: "
    assert speaker_label("note: lower case is no name") == ""


def test_japanese_sentences_are_parts():
    assert sentence_parts(JAPANESE[0]) == ["先週、東京タワーに行きました。", "とても高かったです。", "夜景がきれいでした。"]


def test_exchanges_in_three_languages_are_named_found_and_recalled(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "u.db"), judge="embedding", embed_fn=minilm)
    for u, a in (GERMAN, FRENCH, JAPANESE):
        tree.add(ex(u, a))
    tree.index_pending()
    names = " ".join(t.topic_name for t in tree.iter_topics())
    assert "München" in names or "Fahrrad" in names
    assert {m for m, _ in tree.vdb.keyword_search_messages("Besançon")} == {"x1-user", "x1-assistant"}
    assert {m for m, _ in tree.vdb.keyword_search_messages("großartig")} == {"x0-assistant"}
    synth = PromptSynthesizer(ctree=tree)
    prompt = synth.synthesize_prompt("Fahrrad in München?", None, None, [])
    assert "grünes Fahrrad" in prompt
    prompt = synth.synthesize_prompt("cathédrale de Besançon", None, None, [])
    assert "Saint-Jean" in prompt
    tree.close()


def test_a_japanese_sentence_names_a_topic_by_its_words_not_whole():
    """Unspaced, "犬の名前はビスケットです" was one word and named a topic whole (a trial);
    the kanji and katakana between particles are its words."""
    from trace_core.textutil import extractive_name

    name = extractive_name("My dog: 犬の名前はビスケットです。ビスケットは毎朝公園を散歩します。")
    assert "ビスケット" in name.split() and "犬の名前はビスケットです" not in name, name
    assert all(len(w) <= 6 for w in name.split()), name

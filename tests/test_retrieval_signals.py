"""The retrieval signals beyond TRACE's: sentence parts, dates named in a question, the
focused query, transcript speaker labels."""

from __future__ import annotations

import numpy as np
import pytest

from trace_core import CTree, PromptSynthesizer
from trace_core.dates import DateSpec, dates_in
from trace_core.embedders import FunctionEmbedder
from trace_core.synthesizer import RetrievalReport
from trace_core.textutil import message_parts, sentence_parts


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def test_sentence_parts_keep_the_speaker_label():
    text = "Melanie: Thanks!  BTW, I had a setback last month. I hurt my knee running and paused pottery."
    assert sentence_parts(text) == [
        "Melanie: BTW, I had a setback last month.",
        "Melanie: I hurt my knee running and paused pottery.",
    ]
    assert sentence_parts("One sentence only, nothing to split here.") == []
    assert sentence_parts("Hi! Ok. Sure.") == []  # short sentences are not parts
    huge = " ".join(f"Sentence number {i} is here." for i in range(1000))
    parts = sentence_parts(huge)
    assert len(parts) == 16 and all(len(p) <= 300 for p in parts)


def test_sentences_are_cut_by_a_segmenter_not_at_every_full_stop():
    """The regex cut at "Dr." and "Mr.": "My teacher is called Mr." was a part and a
    summary's sentence, and "Weber" was lost (a trial); issue 15: "Dr. Smith said the
    U.S. plan…" is one sentence."""
    from trace_core.textutil import extractive_summary, split_sentences

    assert split_sentences("Dr. Smith said the U.S. plan works. I agree! Do you?") == [
        "Dr. Smith said the U.S. plan works.", "I agree!", "Do you?"]
    assert sentence_parts("My teacher is called Mr. Weber. The tooth fairy came last night.") == [
        "My teacher is called Mr. Weber.", "The tooth fairy came last night."]
    assert sentence_parts("Meine Oma wohnt in Lübeck, z.B. im Winter. Sie backt dort Marzipan.") == [
        "Meine Oma wohnt in Lübeck, z.B. im Winter.", "Sie backt dort Marzipan."]
    assert split_sentences("日本語を勉強しています。来年京都に行きます！") == ["日本語を勉強しています。", "来年京都に行きます！"]
    assert "Mr. Weber" in extractive_summary([("My teacher is called Mr. Weber. He teaches maths at school.", "Noted.")])
    long = "word " * 1500 + "end of it. Then another sentence here."  # past the segmented head: the regex
    assert split_sentences(long)[-1] == "Then another sentence here." and len(split_sentences(long)) == 2


def test_message_parts_add_the_message_read_after_its_cue():
    parts = message_parts("Melanie: Seven years now.", "Caroline: How long have you been painting?")
    assert parts == ["Caroline: How long have you been painting? Melanie: Seven years now."]
    assert message_parts("Melanie: Seven years now.", "(no message)") == []
    long = message_parts("y " * 400, "x " * 400)
    assert len(long) == 1 and len(long[0]) <= 601
    # the app's marks are no words of the message (a trial found "…model in my [reply
    # cancelled]" among a topic's indexed parts)
    cut = "The sea rises twice a day. The moon pulls the water toward it\n\n[reply cancelled]"
    assert sentence_parts(cut) == ["The sea rises twice a day.", "The moon pulls the water toward it"]
    assert "cancelled" not in " ".join(message_parts("Thanks, that helps a lot.", cut))


def test_dates_named_in_a_question():
    assert dates_in("What did Melanie show on October 13, 2023?") == [DateSpec(2023, 10, 13)]
    assert dates_in("What did Gina find on 1 February, 2023?") == [DateSpec(2023, 2, 1)]
    assert dates_in("What setback did she face in October 2023?") == [DateSpec(2023, 10, None)]
    assert dates_in("When did Melanie go camping in June?") == [DateSpec(None, 6, None)]
    assert dates_in("How many times did she go to the beach in 2023?") == [DateSpec(2023, None, None)]
    assert dates_in("What happened on 2024-02-30 and 2024-13-01?") == [DateSpec(2024, 2, 30)]
    assert dates_in("I may go hiking. What did we say last week?") == []
    # a name that begins with a month's abbreviation names no month ("of Mar" + "ia's")
    assert dates_in("What is the name of Maria's second puppy?") == []
    assert dates_in("What did we plan on Augustine's birthday?") == []
    assert dates_in("What did she buy in Jan. 2023?") == [DateSpec(2023, 1, None)]
    # a day without its year, of any year: "on November 8th" named no date and "the 8th
    # of November" the whole month (a trial)
    assert dates_in("What did I tell you on November 8th?") == [DateSpec(None, 11, 8)]
    assert dates_in("What did we say on the 8th of November?") == [DateSpec(None, 11, 8)]
    assert dates_in("Anything on 3 Feb or Feb 4?") == [DateSpec(None, 2, 3), DateSpec(None, 2, 4)]
    assert dates_in("I may 3 times a week go running.") == [] and dates_in("at 10:30") == []
    assert DateSpec(None, 11, 8).matches("2026-11-08T09:00") and DateSpec(None, 11, 8).matches("2024-11-08T09:00")
    spec = DateSpec(2023, 10, None)
    assert spec.matches("2023-10-13T18:00") and not spec.matches("2023-11-01T10:00")
    assert not spec.matches("undated") and DateSpec(None, 6).matches("2022-06-30")


def labelled_tree(tmp_path, minilm, talk):
    tree = CTree.open(str(tmp_path / "t.db"), judge="embedding", embed_fn=minilm)
    for u, a, ts in talk:
        tree.add(ex(u, a), timestamp=ts)
    return tree


FILLER = [
    ("Caroline: How was your week, Melanie?", "Melanie: Busy with the kids, but good!"),
    ("Caroline: I read a new novel this weekend.", "Melanie: Which one? I love a good story."),
    ("Caroline: The weather has been lovely lately.", "Melanie: Yes, we went to the park twice."),
    ("Caroline: Any plans for the holidays?", "Melanie: Visiting my parents up north."),
    ("Caroline: I started a painting class.", "Melanie: Painting is such a calm hobby."),
] * 5


def test_index_pending_embeds_sentences_off_the_add_path(tmp_path, minilm):
    tree = labelled_tree(tmp_path, minilm, [(u, a, "2023-05-01T10:00") for u, a in FILLER[:4]] + [
        ("Caroline: Thanks for the tip. BTW, I had a setback last month. I hurt my knee and stopped running.",
         "Melanie: Oh no, take care of that knee!", "2023-05-02T10:00")])
    assert tree.pending_parts() == 5
    # batch=0 did nothing and said 0, as if nothing were left; "2" said "'<' not supported…"
    for bad in ({"batch": 0}, {"max_exchanges": -1}, {"max_exchanges": "2"}, {"batch": None}):
        with pytest.raises(ValueError, match="must be a whole number"):
            tree.index_pending(**bad)
    # numpy's ints are whole numbers too (np.int64 was refused as "must be a whole number")
    assert tree.index_pending(max_exchanges=np.int64(2)) == 2 and tree.pending_parts() == 3
    assert tree.index_pending() == 3 and tree.pending_parts() == 0 and tree.index_pending() == 0
    parts = tree.vdb.message_parts(["x4-user", "x0-user"])
    assert list(parts) == ["x4-user"]  # the first message: one sentence, nothing before it
    texts, mat = parts["x4-user"]
    assert texts[1] == "Caroline: BTW, I had a setback last month."
    assert texts[3].startswith("Melanie: Visiting my parents up north. Caroline: Thanks")  # read after its cue
    assert mat.shape == (4, minilm.dim) and np.allclose(np.linalg.norm(mat, axis=1), 1.0, atol=1e-4)
    # the index survives reopening, and goes on from where it stopped
    tree.vdb.close()  # one writer per file: the reopened tree writes next
    reopened = CTree.open(tree.vdb.path, judge="embedding", embed_fn=minilm)
    assert reopened.pending_parts() == 0
    reopened.add(ex("Caroline: One more thing. I also adopted a cat last week.", "Melanie: Congrats!"))
    assert reopened.pending_parts() == 1 and reopened.index_pending() == 1


def test_a_fact_inside_a_long_message_scores_by_its_sentence(tmp_path, minilm):
    long = ("Melanie: Thanks so much, Caroline, that is really kind of you and the kids say hi too! "
            "We have been busy with school runs, swimming lessons and the garden all week. "
            "By the way, I broke my wrist skating last month. "
            "Anyway, I hope your art show goes wonderfully and that lots of people come to see it!")
    tree = labelled_tree(tmp_path, minilm, [(u, a, "2023-05-01T10:00") for u, a in FILLER[:6]] + [
        ("Caroline: How are things with you?", long, "2023-05-02T10:00")])
    query = "How did Melanie get injured?"
    qvec = minilm.embed(query)

    def score(synth):
        report = RetrievalReport(query=query, memory_token_budget=1000)
        synth.memory_block(query, qvec, [], 3, 2, 0.5, 1000, report)
        return next(x.vector for x in report.exchanges if x.index == 6)

    before = score(PromptSynthesizer(ctree=tree))
    tree.index_pending()
    after = score(PromptSynthesizer(ctree=tree))
    assert after > before + 0.05  # the wrist sentence, not the whole chatty message
    assert score(PromptSynthesizer(ctree=tree, use_parts=False)) == before


def test_a_date_in_the_question_lifts_that_days_exchanges(tmp_path, minilm):
    talk = [
        ("Caroline: I want to share my new painting with you!", "Melanie: What a lovely painting, Caroline.",
         "2023-08-14T10:00"),
        ("Caroline: Here is what I made today.", "Melanie: The lake scene is beautiful.", "2023-10-13T10:00"),
        ("Caroline: Another painting done.", "Melanie: That forest looks so calm.", "2023-09-02T10:00"),
    ]
    tree = labelled_tree(tmp_path, minilm, talk)
    query = "What painting did Caroline share on October 13, 2023?"

    def exchange_order(weight):
        synth = PromptSynthesizer(ctree=tree, date_weight=weight)
        synth.synthesize_prompt(query, minilm.embed(query), None, [])
        return list(dict.fromkeys(i for i, _ in synth.last_report.ranking))

    assert exchange_order(0.0).index(1) > exchange_order(0.0).index(2)  # on words alone: below
    assert exchange_order(1.0).index(1) < exchange_order(1.0).index(2)  # the named day lifts it


def test_focused_query_drops_words_found_in_most_exchanges(tmp_path, minilm):
    tree = labelled_tree(tmp_path, minilm, [(u, a, "2023-05-01T10:00") for u, a in FILLER[:20]])
    synth = PromptSynthesizer(ctree=tree)
    focused = synth._focused_query_vector("What hobby did Melanie start?")
    plain = minilm.embed("What hobby did start?")
    assert focused is not None and float(focused @ plain) > 0.999
    assert synth._focused_query_vector("What hobby did she start?") is None  # nothing to drop
    assert PromptSynthesizer(ctree=tree, focus_query=False)._focused_query_vector("Melanie hobby") is None


def test_transcript_lines_are_not_given_a_role_label(tmp_path, minilm):
    # a transcript: the speaker's name opens their messages, the neighbouring one's too
    tree = labelled_tree(tmp_path, minilm, [("Caroline: I adopted a cat named Miso.", "Miso is a nice name for a cat!",
                                             "2023-05-01"),
                                            ("Caroline: She sleeps all day.", "Cats do that.", "2023-05-01")])
    synth = PromptSynthesizer(ctree=tree)
    prompt = synth.synthesize_prompt("cat Miso", minilm.embed("cat Miso"), None, [])
    assert "- Caroline: I adopted a cat named Miso." in prompt
    assert "Assistant: Miso is a nice name for a cat!" in prompt


def test_a_failing_second_embedding_costs_only_the_focused_reading(tmp_path, minilm):
    tree = labelled_tree(tmp_path, minilm, [(u, a, "2023-05-01T10:00") for u, a in FILLER[:20]])
    synth = PromptSynthesizer(ctree=tree)
    query = "What hobby did Melanie start?"
    qvec = minilm.embed(query)

    def down(text):
        raise ConnectionError("embedding server down")

    broken = FunctionEmbedder(down)
    broken._dim = minilm.dim
    tree.embed_fn = broken
    prompt = synth.synthesize_prompt(query, qvec, None, [])
    assert "painting class" in prompt and synth.last_report.embed_seconds < 1.0

"""An app's own marks on a line of their own ("[reply cancelled]") are not words of the
conversation: topic names, summaries and the model's prompt are made without them."""

from __future__ import annotations

from trace_core import CTree, PromptSynthesizer
from trace_core.textutil import extractive_name, extractive_summary

CUT = ("My name is Ada and I live in Porto.", "Lovely, Porto is\n\n[reply cancelled]")


def test_a_mark_line_names_nothing():
    name = extractive_name("\n".join(CUT))
    assert "Cancelled" not in name and "Reply" not in name
    assert "Porto" in name and "Ada" in name


def test_a_mark_line_is_not_summarised():
    summary = extractive_summary([CUT])
    assert "[reply cancelled]" not in summary and "Porto" in summary


def test_brackets_inside_text_still_count():
    assert "Postgres" in extractive_name("See [the Postgres docs](http://x) about indexes")
    assert "Checklist" in extractive_name("[x] Checklist item for the Postgres upgrade")


def test_the_model_is_not_shown_a_mark_as_its_own_words(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": CUT[0]}, {"role": "assistant", "content": CUT[1]}])
    tree.add([{"role": "user", "content": "Anything new about the weather?"},
              {"role": "assistant", "content": "Sunny.\n\n[reply cut at max_tokens]"}])
    with PromptSynthesizer(ctree=tree, vector_db=tree.vdb) as synth:
        recent = [dict(m) for m in tree.exchanges[-1].messages]
        prompt = synth.synthesize_prompt("Where do I live?", recent_messages=recent)
    assert "Porto" in prompt and "Sunny." in prompt  # the memory block and the recent window
    assert "[reply cancelled]" not in prompt and "[reply cut at max_tokens]" not in prompt
    assert "[reply cancelled]" in tree.exchanges[0].assistant  # stored as it was


def test_a_replys_own_bracketed_lines_are_its_text_only_the_end_holds_marks():
    """A model's "[2019-12-05]" or "[Chorus]" line was taken for a mark: hidden from the
    reply on screen and shown under it as a note. Marks are the app's lines at the end."""
    from nexus.widgets import PastExchangeView
    from trace_core.nodes import MessageNode
    from trace_core.textutil import marks, without_marks

    song = "[2019-12-05]\nVerse one [1]\n[Chorus]\n[1]\nLa la la"
    assert without_marks(song) == song and marks(song) == []
    cut = song + "\n\n[reply cut at max_tokens]"
    assert without_marks(cut) == song and marks(cut) == ["reply cut at max_tokens"]
    view = PastExchangeView(MessageNode(index=0, messages=[{"role": "user", "content": "Sing"},
                                                  {"role": "assistant", "content": cut}]))
    assert "[2019-12-05]" in view.source and "[Chorus]" in view.source
    assert view.marks == ["reply cut at max_tokens"]
    # nor at the end: a reply that ends with a date line keeps it after a reopen (it showed
    # "2026-12-03" as a note under an empty reply; found in a new-user trial)
    for own in ("Today is\n[2026-12-03]", "[2026-12-03]", "See the note.\n[1]"):
        assert without_marks(own) == own and marks(own) == []
    assert marks("[2026-12-03]\n\n[reply cancelled]") == ["reply cancelled"]

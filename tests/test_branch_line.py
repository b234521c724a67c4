"""The log's line for an injected branch says which topics fed it (a trial read "branch
ROOT → Started Sourdough · Running Sunday" for a wedding question as sourdough recalled)."""

from nexus.engine_view import branch_line
from trace_core.synthesis.report import InjectedExchange, InjectedPath

GROUP = "Started Sourdough · Running Sunday"


def entry(index: int, path: str) -> InjectedExchange:
    return InjectedExchange(index, f"m{index}", path, "2026-12-04T03:00:00", 0.5, 0.0, 0.3, 1.0)


def test_a_group_names_the_topics_its_entries_came_from():
    path = InjectedPath("g1", GROUP, "", 0.4, 0.0, 2, entries=(0, 1), best_entry=0.47)
    xs = [entry(0, f"{GROUP} → Getting Married Porto"), entry(1, f"{GROUP} → Getting Married Porto"),
          entry(7, f"{GROUP} → Sourdough Starter")]  # not shown under this branch
    line = branch_line(path, xs)
    assert line.startswith(f"  branch {GROUP} (from its topic Getting Married Porto)  best entry cos 0.47"), line
    assert line.endswith("(2 exchanges)")
    both = branch_line(path, [entry(0, f"{GROUP} → Getting Married Porto"), entry(1, f"{GROUP} → Wedding Speech")])
    assert "(from its topics Getting Married Porto, Wedding Speech)" in both


def test_a_topic_shown_as_itself_names_nothing_more():
    path = InjectedPath("t1", "Cat Miso", "", 0.4, 0.0, 1, entries=(0,), best_entry=0.6)
    assert branch_line(path, [entry(0, "Cat Miso")]).startswith("  branch Cat Miso  best entry")


def test_an_entry_that_came_for_a_shared_word_says_so():
    """"best entry cos 0.07" read as injected against the evidence rule (a trial): the entry
    shared a word with the question."""
    path = InjectedPath("t1", "Sourdough Starter", "", 0.06, 0.0, 1, entries=(3,), best_entry=0.07)
    far = InjectedExchange(3, "m3", "Sourdough Starter", "2026-12-04T03:00:00", 0.07, 2.31, 0.06, 1.0)
    line = branch_line(path, [far])
    assert "best entry cos 0.07 (an entry shares a word with the question: bm25 2.31), topic score 0.06" in line
    assert "shares a word" not in branch_line(path, [entry(3, "Sourdough Starter")])

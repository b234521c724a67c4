"""PromptSynthesizer: the cross-branch test of the TRACE README, ranking, budget, dedupe,
supersession, archive exclusion, the report."""

from __future__ import annotations

import pytest

from trace_core import CTree, PromptSynthesizer, VectorDatabase
from trace_core.tokens import count_tokens


def ex(user: str, assistant: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


CROSS_BRANCH = [
    ("My friend Sarah is severely allergic to peanuts.",
     "Thanks for telling me. A peanut allergy can be life-threatening, so Sarah must avoid peanuts entirely."),
    ("What's the weather like in Tokyo this week?",
     "Tokyo expects rain on Tuesday and sunshine at 22 °C later in the week."),
    ("I'm planning Sarah's surprise birthday party and I'll bake a cake for it.",
     "Lovely! Plan the guest list, decorations and a cake she will enjoy."),
    ("How do I fix a flat bike tire?",
     "Remove the wheel, find the puncture in the inner tube, patch it and reinflate."),
    ("Can you give me a Thai peanut butter cake recipe?",
     "Sure: flour, sugar, eggs, coconut milk and a cup of peanut butter; bake at 175 °C for 35 minutes."),
]


@pytest.fixture
def cross_tree(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "cross.db"), judge="embedding", embed_fn=minilm)
    for i, (u, a) in enumerate(CROSS_BRANCH):
        tree.add(ex(u, a), timestamp=f"2024-06-0{i + 1}T12:00:00")
    return tree


def test_cross_branch_recall(cross_tree, minilm):
    synth = PromptSynthesizer(ctree=cross_tree, vector_db=cross_tree.vdb)
    query = "I'm making the Peanut Butter Cake for Sarah's party. Good idea?"
    prompt = synth.synthesize_prompt(query, minilm.embed(query), cross_tree.current_node, [])
    assert "allergic to peanuts" in prompt
    assert "surprise birthday party" in prompt
    assert "peanut butter cake recipe" in prompt
    assert "Tokyo" not in prompt
    assert "bike" not in prompt
    report = synth.last_report
    injected = {x.index for x in report.exchanges}
    assert injected == {0, 2, 4}
    assert all(x.timestamp.startswith("2024-06-0") for x in report.exchanges)
    assert "[2024-06-01]" in prompt  # injected exchanges are dated
    assert report.memory_tokens <= 1000 < report.full_history_tokens * 10
    assert report.paths and all(p.path.startswith("ROOT → ") for p in report.paths)


def test_report_scores_and_ranking(cross_tree, minilm):
    synth = PromptSynthesizer(ctree=cross_tree)
    query = "peanut allergy"
    synth.synthesize_prompt(query, minilm.embed(query), None, [])
    r = synth.last_report
    top = r.exchanges[0]
    assert top.index == 0  # the allergy exchange ranks first
    assert top.vector > 0.4 and top.keyword > 0 and top.fused == max(x.fused for x in r.exchanges)
    assert r.ranking[0][0] == 0
    assert r.seconds >= 0 and r.full_history_tokens == sum(
        count_tokens(f"{m['role']}: {m['content']}\n") for m in cross_tree.conversation)


def test_budget_is_a_hard_cap(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "b.db"), judge="embedding", embed_fn=minilm)
    for i in range(40):
        tree.add(ex(f"Tell me fact number {i} about the ocean and whales " + "and more detail " * 10,
                    f"Whales fact {i}: " + "they are large marine mammals that breathe air " * 6))
    synth = PromptSynthesizer(ctree=tree)
    q = "whales in the ocean"
    for budget in (150, 500, 1000):
        synth.synthesize_prompt(q, minilm.embed(q), None, [], memory_token_budget=budget)
        assert 0 < synth.last_report.memory_tokens <= budget
    synth.synthesize_prompt(q, minilm.embed(q), None, [], memory_token_budget=10)
    assert synth.last_report.memory_tokens == 0  # nothing fits: no half entries


def test_recent_window_is_not_repeated_in_memory(cross_tree, minilm):
    synth = PromptSynthesizer(ctree=cross_tree)
    recent = ex(*CROSS_BRANCH[4])
    q = "peanut butter cake"
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, recent)
    assert prompt.count("a cup of peanut butter") == 1  # once, in the recent window
    assert 4 not in {x.index for x in synth.last_report.exchanges}
    assert "Most recent exchanges:" in prompt


def test_excluded_exchanges_are_never_injected(cross_tree, minilm):
    """``exclude``: a regenerated reply is asked as if the exchange it replaces had not
    happened (Nexus's /retry)."""
    synth = PromptSynthesizer(ctree=cross_tree)
    q = "peanut butter cake"
    synth.synthesize_prompt(q, minilm.embed(q), None, [])
    shown = {x.index for x in synth.last_report.exchanges}
    assert 4 in shown
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [], exclude={4})
    assert "a cup of peanut butter" not in prompt
    assert 4 not in {x.index for x in synth.last_report.exchanges}
    # exclude=4 said "'int' object is not iterable"; a text or a single message for the
    # recent window was dropped without a word
    for kwargs, words in (({"exclude": 4}, "exclude is a collection of exchange indices"),
                          ({"exclude": ["4"]}, "exclude is a collection of exchange indices"),
                          ({"recent_messages": "User: hi"}, "recent_messages is a list of messages, not a str"),
                          ({"recent_messages": {"role": "user", "content": "hi"}}, "not a dict")):
        with pytest.raises(TypeError, match=words):
            synth.synthesize_prompt(q, minilm.embed(q), None, **kwargs)


def test_shared_ancestors_are_deduplicated(cross_tree, minilm):
    synth = PromptSynthesizer(ctree=cross_tree)
    q = "Sarah peanut cake party"
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    headers = [line for line in prompt.splitlines() if line.startswith("## ")]
    assert len(headers) == len(set(headers))  # each branch once, its exchanges under it
    assert len(synth.last_report.paths) == len({p.node_id for p in synth.last_report.paths})


def test_each_branch_reports_the_evidence_of_its_own_entries(cross_tree, minilm):
    """A branch whose topic has no summary yet scores 0 as a topic; the report (and
    Nexus's log) also gives the best cosine of the entries shown under it."""
    synth = PromptSynthesizer(ctree=cross_tree, vector_db=cross_tree.vdb)
    query = "I'm making the Peanut Butter Cake for Sarah's party. Good idea?"
    synth.synthesize_prompt(query, minilm.embed(query), cross_tree.current_node, [])
    report = synth.last_report
    vector = {x.index: x.vector for x in report.exchanges}
    assert report.paths and sum(len(p.entries) for p in report.paths) == len(report.exchanges)
    for p in report.paths:
        assert p.entries and p.best_entry == max(vector[i] for i in p.entries)
    assert max(p.best_entry for p in report.paths) >= 0.5  # "allergic to peanuts" is shown, and close


def test_newer_fact_supersedes_older(tmp_path, minilm):
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add(ex("Sarah is allergic to peanuts.", "Noted: no peanuts for Sarah."), timestamp="2024-01-01T10:00")
    tree.add(ex("What's a good name for a goldfish?", "How about Bubbles?"), timestamp="2024-01-02T10:00")
    tree.add(ex("Actually, Sarah is no longer allergic to peanuts; she can eat nuts now.",
                "Good news: Sarah can eat peanuts now."), timestamp="2024-03-01T10:00")
    synth = PromptSynthesizer(ctree=tree)
    q = "Can Sarah eat peanuts?"
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    lines = [line for line in prompt.splitlines() if line.startswith("- ")]  # entries, not headers
    old = next(line for line in lines if "Sarah is allergic to peanuts." in line)
    new = next(line for line in lines if "no longer allergic" in line)
    assert "[superseded]" in old and "[current]" in new
    assert synth.last_report.supersessions == [(0, 2)]
    assert {x.index: x.status for x in synth.last_report.exchanges}[2] == "current"


def test_an_exchange_edited_into_a_correction_supersedes_after_the_edit(tmp_path, minilm):
    """Which exchanges read as corrections was cached by index as if texts never changed:
    an exchange edited (/edit, /retry: ``replace_last``) into "Actually, … no longer …"
    after a block had been made corrected nothing, and one edited out of it still did."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add(ex("Sarah is allergic to peanuts.", "Noted: no peanuts for Sarah."), timestamp="2024-01-01T10:00")
    tree.add(ex("What's a good name for a goldfish?", "How about Bubbles?"), timestamp="2024-01-02T10:00")
    tree.add(ex("Sarah likes peanuts in her salad.", "Nice."), timestamp="2024-03-01T10:00")
    synth = PromptSynthesizer(ctree=tree)
    q = "Can Sarah eat peanuts?"
    synth.synthesize_prompt(q, minilm.embed(q), None, [])
    assert synth.last_report.supersessions == []
    tree.replace_last(ex("Actually, Sarah is no longer allergic to peanuts; she can eat nuts now.",
                         "Good news: Sarah can eat peanuts now."), timestamp="2024-03-01T10:00")
    synth.synthesize_prompt(q, minilm.embed(q), None, [])
    assert synth.last_report.supersessions == [(0, 2)]
    tree.replace_last(ex("Sarah likes peanuts in her salad.", "Nice."), timestamp="2024-03-01T10:00")
    synth.synthesize_prompt(q, minilm.embed(q), None, [])
    assert synth.last_report.supersessions == []


@pytest.mark.parametrize("fact, chat, update, question", [
    ("Meine Abgabefrist für die Masterarbeit ist am 14. März.", "Wie heißt ein guter Name für einen Goldfisch?",
     "Meine Abgabefrist für die Masterarbeit wurde auf den 2. April verschoben.", "Wann ist meine Abgabefrist?"),
    ("Ma réunion avec le notaire est lundi à dix heures.", "Quel est un bon nom pour un poisson rouge ?",
     "En fait, ma réunion avec le notaire est reportée à mardi.", "Quand est ma réunion avec le notaire ?"),
])
def test_a_correction_in_german_or_french_supersedes_the_fact(minilm, fact, chat, update, question):
    """The correction cues were English only: "…wurde auf den 2. April verschoben" was
    tagged neither way, and the model was shown two deadlines as true (a trial)."""
    tree = CTree(judge="embedding", embed_fn=minilm)
    tree.add(ex(fact, "Notiert." if "Abgabe" in fact else "Noté."), timestamp="2024-01-01T10:00")
    tree.add(ex(chat, "Bubbles?"), timestamp="2024-01-02T10:00")
    tree.add(ex(update, "Gut zu wissen." if "Abgabe" in fact else "D'accord."), timestamp="2024-03-01T10:00")
    synth = PromptSynthesizer(ctree=tree)
    synth.synthesize_prompt(question, minilm.embed(question), None, [])
    assert synth.last_report.supersessions == [(0, 2)]


def test_a_branch_header_does_not_state_a_superseded_fact_as_its_summary(minilm):
    """The header of the old fact's branch read "— Sarah is allergic to peanuts." (its
    extractive summary) above the line marking it superseded (a trial)."""
    tree = CTree(judge="embedding", embed_fn=minilm)
    tree.add(ex("Sarah is allergic to peanuts.", "Noted: no peanuts for Sarah."), timestamp="2024-01-01T10:00")
    tree.add(ex("What's a good name for a goldfish?", "How about Bubbles?"), timestamp="2024-01-02T10:00")
    tree.add(ex("Actually, Sarah is no longer allergic to peanuts; she can eat nuts now.",
                "Good news: Sarah can eat peanuts now."), timestamp="2024-03-01T10:00")
    q = "Can Sarah eat peanuts?"
    shown = PromptSynthesizer(ctree=tree, topic_threshold=0.0)  # every matched branch shows its summary
    prompt = shown.synthesize_prompt(q, minilm.embed(q), None, [])
    assert "[superseded] User: Sarah is allergic to peanuts." in prompt
    assert not [line for line in prompt.splitlines() if line.startswith("## ") and "allergic to peanuts." in line]
    # a summary that repeats no superseded fact is still shown
    q = "What did we call the goldfish?"
    assert "## Name Goldfish — What's a good name" in shown.synthesize_prompt(q, minilm.embed(q), None, [])


def test_a_plain_correction_that_names_the_subject_supersedes(tmp_path, minilm):
    """ "Actually, my deadline moved to Friday." was no update of "My project deadline is
    Wednesday the 10th." (cosine 0.52, under 0.65; a trial): a correction naming a rarer
    word of the fact it corrects counts from 0.45. One that names nothing of it does not."""
    from trace_core.synthesis.selection import Supersessions

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add(ex("My project deadline is Wednesday the 10th.", "Noted: Wednesday the 10th."))
    tree.add(ex("I work as a bicycle mechanic.", "A good trade."))
    tree.add(ex("Actually, my deadline moved to Friday.", "Noted: Friday."))
    tree.add(ex("Actually, I prefer tea to coffee.", "Tea it is."))
    synth = PromptSynthesizer(ctree=tree)
    q = "When is my project deadline?"
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    lines = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert "[superseded]" in next(line for line in lines if "Wednesday the 10th" in line)
    assert "[current]" in next(line for line in lines if "moved to Friday" in line)
    assert synth.last_report.supersessions == [(0, 2)]
    # the one threshold alone (the rule before) finds no update here
    strict = Supersessions(0.65).find([0, 1], tree.exchange_view(), tree.exchange_vector,
                                      message_vector=synth.message_vector_lookup())
    assert strict == {}
    # asking about the deadline since does not undo it: the word is counted up to the
    # correction (it flipped back to "not superseded" after a few questions: a re-trial)
    for k in range(6):
        tree.add(ex(f"When is my project deadline, again ({k})?", "Friday."))
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    assert (0, 2) in synth.last_report.supersessions


def test_a_moved_deadline_supersedes_the_one_it_replaces(tmp_path, minilm):
    """ "Priya moved the draft deadline to Thursday noon." left "Priya wants a draft by
    Wednesday" untagged: both shown as true (a trial). A change of plan is a correction."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add(ex("My manager Priya wants a draft of the report by Wednesday.", "Wednesday it is."))
    tree.add(ex("I adopted a grey cat called Miso last week.", "Lovely."))
    tree.add(ex("Priya moved the draft deadline to Thursday noon.", "Noted: Thursday noon."))
    synth = PromptSynthesizer(ctree=tree)
    q = "When is the draft due for Priya?"
    lines = [line for line in synth.synthesize_prompt(q, minilm.embed(q), None, []).splitlines()
             if line.startswith("- ")]
    assert "[superseded]" in next(line for line in lines if "by Wednesday" in line)
    assert "[current]" in next(line for line in lines if "Thursday noon" in line)
    assert synth.last_report.supersessions == [(0, 2)]


def test_a_correction_supersedes_what_it_corrects_not_its_neighbours_on_the_subject(tmp_path, minilm):
    """ "Actually, my flight to Lisbon moved to Friday" also marked the trip's plan ("a
    trip to Lisbon with my partner Jonas in March", cosine 0.60 against the flight's 0.79)
    superseded: the model was told to disregard who goes and for how long (a trial). A
    correction supersedes the exchanges closest to it only; a fact said twice, both."""
    def flight_tree(name: str, facts: list[str]) -> tuple[CTree, PromptSynthesizer, list[str]]:
        tree = CTree.open(str(tmp_path / name), judge="embedding", embed_fn=minilm)
        tree.add(ex("I'm planning a trip to Lisbon with my partner Jonas in March. We want about five days there.",
                    "That trip sounds lovely."))
        for fact in facts:
            tree.add(ex(fact, "Noted the flight details."))
        tree.add(ex("I'm building a modular synth.", "Nice."))
        tree.add(ex("Actually, my flight to Lisbon moved to Friday the 13th of March, now departing 10:15.",
                    "Noted the flight details."))
        synth = PromptSynthesizer(ctree=tree)
        q = "When is my flight to Lisbon?"
        prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
        return tree, synth, [line for line in prompt.splitlines() if line.startswith("- ")]

    flight = "My flight to Lisbon is on Thursday the 12th of March, TAP flight from Hamburg at 7:40 in the morning."
    _, synth, lines = flight_tree("a.db", [flight])
    assert "[superseded]" not in next(line for line in lines if "partner Jonas" in line)
    assert "[superseded]" in next(line for line in lines if "TAP flight" in line)
    assert synth.last_report.supersessions == [(1, 3)]
    again = "My flight to Lisbon is on Thursday the 12th of March, TAP from Hamburg, 7:40 in the morning."
    _, synth, lines = flight_tree("b.db", [flight, again])  # the same fact said twice: both corrected
    assert sorted(synth.last_report.supersessions) == [(1, 4), (2, 4)]
    assert "[superseded]" not in next(line for line in lines if "partner Jonas" in line)


def test_in_a_chat_a_reply_comes_with_what_it_answers_and_a_question_with_its_answer(tmp_path, minilm):
    """ "What have I told you about my family?" got five lines of "Assistant: That's good to
    know about your family." and one fact: the facts they answered were left out (a trial).
    In a chat, a reply brings the message it answers, and a question its answer."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    facts = ["My brother Tom is a pilot for TAP.", "My mother Ingrid turns 70 in January.",
             "Jonas and I are expecting a baby boy, we will call him Felix.", "My godmother calls every Sunday.",
             "My sister Anna moved to Porto last spring."]
    for fact in facts:
        tree.add(ex(fact, "That's good to know about your family."))
    for k in range(6):
        tree.add(ex(f"Can you suggest a bass guitar exercise number {k}?", f"Try scales in position {k}."))
    tree.add(ex("Where does my sister live?", "Your sister Anna lives in Porto."))
    synth = PromptSynthesizer(ctree=tree)
    q = "What have I told you about my family?"
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    lines = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert lines and all("User: " in line for line in lines if "Assistant: " in line), lines
    assert sum(any(f in line for line in lines) for f in facts) >= 4, lines
    question = next((line for line in lines if "Where does my sister live?" in line), None)
    assert question is None or "Anna lives in Porto" in question  # a question shown with its answer


def test_a_question_about_the_memory_itself_gets_its_outline(tmp_path, minilm):
    """ "Tell me everything you know about me." got an empty memory block in a session of a
    dozen facts: no message reaches the evidence floor (a re-trial). A question about what
    the memory holds, with nothing relevant found, gets the topics, largest first."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    for text in ("My sister Anna moved to Porto last spring.", "I work as a nurse at the city hospital.",
                 "I'm learning to play the bass guitar on weekends.", "My cat Miso is allergic to chicken."):
        tree.add(ex(text, "Noted."))
    synth = PromptSynthesizer(ctree=tree)
    q = "Tell me everything you know about me."
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    assert "What this conversation has covered so far" in prompt
    assert all(fact in prompt for fact in ("Porto", "nurse", "bass guitar", "Miso")), prompt
    assert synth.last_report.memory_tokens > 0
    q = "What is the capital of Australia?"  # nothing relevant, and no question about the memory: nothing
    assert "covered so far" not in synth.synthesize_prompt(q, minilm.embed(q), None, [])
    synth.synthesize_prompt("What do you know about me?", None, None, [], memory_token_budget=40)
    assert 0 < synth.last_report.memory_tokens <= 40  # within its budget


def test_the_outline_says_what_the_user_said_before_a_summary_of_the_replies(tmp_path, minilm):
    """ "What do you know about me?" got an outline whose topics read as the small model's
    rambling replies (their summaries): "Tax Report March (1): I will not be able to pay you
    if you do not take care of me as a father…" — the deadline the user gave was in none
    of it (a trial). Each topic leads with what the user said there."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    rambling = ("I will not be able to pay you if you do not take care of me as a father, so that we can live "
                "together without paying money on each other. I am going to get paid for by you and I want to "
                "buy a new house with your help because I am saving money for the apartment.")
    for text in ("My tax report is due on March 14.", "I have a cat called Mochi.",
                 "I'm learning to play the bass guitar on weekends.", "I work as a nurse at the city hospital."):
        tree.add(ex(text, rambling))
    assert any(t.summary and "father" in t.summary for t in tree.iter_topics())  # the replies' words summarise
    synth = PromptSynthesizer(ctree=tree)
    prompt = synth.synthesize_prompt("What do you know about me?", None, None, [])
    assert "What this conversation has covered so far" in prompt
    assert all(fact in prompt for fact in ("March 14", "Mochi", "bass guitar", "nurse")), prompt

    # what the user said is not said again when the summary holds it too ("What is the weather
    # in Graz today? Tell me a long story… — What is the weather in Graz today? Мне нужен…")
    from trace_core.synthesizer import overview_line
    said = ["What is the weather in Graz today?", "Tell me a story about my cat Mochi."]
    line = overview_line(said, "What is the weather in Graz today? You are my landlord.")
    assert line == "What is the weather in Graz today? Tell me a story about my cat Mochi. — You are my landlord."
    assert overview_line(said[:1], "What is the weather in Graz today?") == said[0]
    assert overview_line([], "You are my landlord.") == "You are my landlord."


def test_archived_exchanges_never_appear(cross_tree, minilm):
    cross_tree.archive([cross_tree.exchanges[0]])
    synth = PromptSynthesizer(ctree=cross_tree)
    q = "Is Sarah allergic to peanuts?"
    prompt = synth.synthesize_prompt(q, minilm.embed(q), None, [])
    assert "allergic" not in prompt
    assert 0 not in {x.index for x in synth.last_report.exchanges}
    assert all(i != 0 for i, _ in synth.last_report.ranking)


def test_empty_tree_gives_a_valid_prompt(tmp_path, minilm):
    tree = CTree(judge="embedding", embed_fn=minilm)
    tree.vdb = VectorDatabase(str(tmp_path / "e.db"))
    synth = PromptSynthesizer(ctree=tree, vector_db=tree.vdb)
    prompt = synth.synthesize_prompt("hello?", minilm.embed("hello?"), tree.current_node, [])
    assert prompt.startswith("You are a helpful assistant")
    assert synth.last_report.memory_tokens == 0 and synth.last_report.exchanges == []


def test_works_without_a_store(minilm):
    tree = CTree(judge="embedding", embed_fn=minilm)
    for u, a in CROSS_BRANCH:
        tree.add(ex(u, a))
    synth = PromptSynthesizer(ctree=tree)
    q = "bike puncture repair"
    prompt = synth.synthesize_prompt(q, None, None, [])
    assert "flat bike tire" in prompt

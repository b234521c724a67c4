"""Names the embedding judge gives: made of what the user talked about, not of a long
reply's connectives."""

from trace_core.judges import EmbeddingJudge
from trace_core.textutil import exchange_sides, extractive_name, salient_words

USER = "My sister Ingrid keeps bees near Trondheim."
REPLY = (
    "However, keeping bees so far north is hard. Winters there are long. However, "
    "insulated hives help. Additionally, winters need sugar stores. Overall, colonies "
    "survive winters when they are strong. However, mites matter more than winters."
)


def test_the_users_subject_names_the_exchange():
    name = extractive_name(exchange_sides([(USER, REPLY)]))
    assert "Ingrid" in name and "Trondheim" in name, name
    for connective in ("However", "Additionally", "Overall"):
        assert connective not in name, name


def test_the_judge_names_a_new_topic_from_both_sides():
    judge = EmbeddingJudge()
    assert judge.name_topic([(USER, REPLY)]) == extractive_name(exchange_sides([(USER, REPLY)]), df=judge.doc_freq)
    assert "Ingrid" in judge.name_topic([(USER, REPLY)])


def test_weights_say_how_much_of_the_topic_each_part_is():
    judge = EmbeddingJudge()
    parts = [("Unrelated Australia Canberra", ""), ("Sourdough Starter Baking", "")]
    assert set(judge.name_topic(parts).split()) & {"Unrelated", "Australia", "Canberra"}
    assert not set(judge.name_topic(parts, [1, 8]).split()) & {"Unrelated", "Australia", "Canberra"}


def test_a_group_is_named_after_the_bulk_of_its_exchanges(minilm, tmp_path):
    """The inspector fixture's last group: sourdough (4 exchanges), marathon (4) and a
    one-exchange aside about Canberra, which used to name the whole group
    "Unrelated Australia Canberra"."""
    from test_nexus_inspect import TALK, build_session

    from trace_core import CTree

    build_session(tmp_path / "s.db", minilm, TALK)
    tree = CTree.open(str(tmp_path / "s.db"), embed_fn=minilm)
    aside = {"Unrelated", "Australia", "Canberra"}
    groups = [t for t in tree.structure.root.iter_topics()
              if t.is_group and any(set(c.topic_name.split()) & aside for c in t.topic_children)]
    assert groups, "the fixture no longer makes a group holding the aside"
    for g in groups:
        assert g.message_count >= 4 and not set(g.topic_name.split()) & aside, g.topic_name


def test_possessives_and_adverbs_name_nothing():
    name = extractive_name("Should I listen to Coltrane's ballads? I play them regularly and exclusively.")
    assert "Coltrane" in name.split(), name
    for word in ("Coltrane's", "Regularly", "Exclusively"):
        assert word not in name.split(), name


def test_a_group_that_loses_a_part_to_a_merge_is_named_again(minilm, tmp_path):
    """After /reorganize the fixture's last group held only the Canberra aside, still
    named after the sourdough and marathon parts merged away."""
    from test_nexus_inspect import TALK, build_session

    from trace_core import CTree

    build_session(tmp_path / "s.db", minilm, TALK)
    tree = CTree.open(str(tmp_path / "s.db"), embed_fn=minilm, judge="embedding")
    res = tree.reorganize(similarity_threshold=0.5)
    assert res["merged"]
    for t in tree.structure.root.iter_topics():
        if t.is_group:
            parts = set()
            for c in t.topic_children:
                parts |= set(c.topic_name.split())
            assert set(t.topic_name.split()) & parts, (t.topic_name, [c.topic_name for c in t.topic_children])
    tree.vdb.close()
    reopened = CTree.open(str(tmp_path / "s.db"), embed_fn=minilm, judge="embedding")  # the names are stored
    assert sorted(t.topic_name for t in reopened.structure.root.iter_topics()) == \
        sorted(t.topic_name for t in tree.structure.root.iter_topics())
    reopened.vdb.close()


def test_a_replys_odd_words_do_not_name_what_the_user_asked():
    """Under --local, gemma-270m's replies repeat long odd words ("mendatang"): counted
    three times and ten letters long, they outscored the user's "plant" and "shady"
    (counted twice) and named the topic "Garden Corner Mendatang"."""
    user = "Which plant grows well in a shady garden corner?"
    reply = ("Mendatang, hostas grow well. Ferns mendatang like shade. Mendatang, "
             "(.*)model says impatiens bloom in shade too.")
    name = extractive_name(exchange_sides([(user, reply)]))
    assert set(name.lower().split()) <= {"plant", "grows", "shady", "garden", "corner"}, name
    assert "Mendatang" not in name and "Model" not in name, name


def test_reply_words_fill_a_name_the_users_words_leave_short():
    name = extractive_name(exchange_sides([("Kombucha?", "Kombucha needs a SCOBY, sweet tea and patience.")]))
    assert name.split()[0] == "Kombucha" and len(name.split()) == 3, name
    # "Any ideas?" says nothing of its subject: the reply names it
    name = extractive_name(exchange_sides([("Any ideas?", "Sourdough starters need rye flour and patience.")]))
    assert set(name.split()) <= {"Sourdough", "Starters", "Flour", "Patience"}, name


def test_two_words_of_the_user_are_a_name_a_reply_word_does_not_fill():
    """"What is my dog's name?" with the bundled model's "I was in an airplane…" named its
    topic "Dog Name Airplane" in a trial: two words of the user's are a name."""
    name = extractive_name(exchange_sides([("What is my dog's name?", "I was in an airplane when I saw that cat.")]))
    assert name == "Dog Name", name


def test_changing_the_subject_names_the_new_subject_not_the_change():
    """From a new-user trial: "Switching Subjects October" (for marathon training), "Let
    Talk Records" (a typographic apostrophe split "Let’s"), "Quick Flour Sourdough", and a
    merge reason counting "assistant" as a subject word (a small model echoes "Assistant:")."""
    cases = {
        "Switching subjects: I'm training for a marathon in October.": ("Marathon",),
        "Let’s talk about jazz records for a bit.": ("Jazz", "Records"),
        "Quick question: can I use rye flour in my sourdough?": ("Rye", "Flour", "Sourdough"),
        "Assistant: the best tyres for a 1967 Mustang?": ("Mustang",),
        # and what flags a message as worth keeping ("Important Sister Porto", a trial)
        "Important: my sister Ana lives in Porto.": ("Sister", "Ana", "Porto"),
        "Please remember: my dentist appointment is on Tuesday.": ("Dentist", "Appointment"),
        "Reminder - the boiler service is due, FYI.": ("Boiler", "Service"),
    }
    for user, wanted in cases.items():
        name = extractive_name(exchange_sides([(user, "Sure.")]))
        for word in ("Switching", "Subjects", "Let", "Talk", "Quick", "Assistant", "Important", "Please",
                     "Remember", "Reminder", "FYI"):
            assert word not in name.split(), (user, name)
        assert any(w in name for w in wanted), (user, name)


def test_a_token_or_run_on_word_names_nothing_and_a_models_name_is_bounded():
    """A URL's 320-character token named a topic ("Https Example A1b2c3d4…", 330+
    characters, in the tree pane and the log) and a 6,000-character word a 6,017-character
    name (trial)."""
    from trace_core.textutil import clean_name

    url = "https://example.com/api/v2/items?token=" + "a1b2c3d4" * 40 + "&page=2"
    name = extractive_name(f"why does this link fail: {url}")
    assert "a1b2" not in name.lower() and len(name) < 40
    assert len(extractive_name("x" * 6000)) < 40
    assert "Donaudampfschifffahrtsgesellschaft" in extractive_name("Die Donaudampfschifffahrtsgesellschaft fuhr gestern")
    assert len(clean_name("word " * 3 + "y" * 500)) <= 60 and clean_name("y" * 500).endswith("…")


def test_a_path_a_url_or_a_command_names_nothing():
    """An ingested image was named by its path ("Ingest HA-files Red"), a link by its URL
    ("Https Example Items"), in a trial: the description, and the words around, name it."""
    image = exchange_sides([("/ingest /tmp/hA-files/red.png",
                             "A red bicycle leaning against a blue door, with a sign reading OPEN.")])
    name = extractive_name(image)
    assert "Bicycle" in name and not {"Ingest", "Tmp", "HA-files", "Png"} & set(name.split())
    assert extractive_name("why does this link fail: https://example.com/api/v2/items?page=2") == "Link Fail"


def test_a_long_run_without_spaces_is_named_in_linear_time():
    """The path rule's regex (\\S*/\\S*) took quadratic time on a run without spaces: a
    200,000-character paste held add() for 52 s and a shared server's every client (a
    trial). Doubling the run no longer quadruples the time."""
    import time

    def took(n: int) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            salient_words("x" * n + " sourdough starter")
            best = min(best, time.perf_counter() - start)
        return best

    assert took(200_000) < 0.5  # 0.003 s here; quadratic took 5 s at 100,000
    assert salient_words("/ingest /tmp/hA-files/red.png the red picture") == ["red", "picture"]


def test_prepositions_are_no_subject_words():
    """A reorganisation merged "Ilse Live Graz" and "Tax Report March" "(cosine 0.27; still
    0.39 without the shared without)": two rambling replies shared "without", which counted
    as a subject word of both (a trial)."""
    text = ("I will not be able to pay you without paying money. We can live together without "
            "a house, within a month, towards town.")
    words = salient_words(text, n=8)
    assert not {"without", "within", "towards"} & {w.lower() for w in words}, words


def test_german_function_words_name_nothing():
    """A German trial's topics were "Wie Deutsch Coffee" and "Welches Deutsche Bedeutet", and
    their group "Welches Deutsche · 日本 ラーメン": the question words named them."""
    asked = [('Wie sagt man auf Deutsch "I would like a coffee, please"?', "I would like a coffee, please?"),
             ('Welches deutsche Wort bedeutet "cozy"?', "You should show your sister in Berlin."),
             ('Was ist der Unterschied zwischen "seit" und "für"?', "I want to learn English.")]
    names = [extractive_name(exchange_sides([x])).split() for x in asked]
    for name in names:
        assert not {w.lower() for w in name} & {"wie", "man", "welches", "bedeutet", "was", "ist", "zwischen"}, names
    assert names[0][:2] == ["Deutsch", "Coffee"] and names[1] == ["Deutsche", "Wort", "Cozy"], names
    # a word German and English share is dropped from German only
    assert "Man" in extractive_name("The man who won the war wore a hat.").split()

"""Names the embedding judge gives: made of what the user talked about, not of a long
reply's connectives."""

from trace_core.judges import EmbeddingJudge
from trace_core.textutil import exchange_sides, extractive_name

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

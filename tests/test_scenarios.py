"""The five TRACE stress scenarios, with the embedding judge and with a scripted
server answering as a good model would."""

from __future__ import annotations

import io

import pytest
from scenario_oracle import label_table, oracle

from trace_core import scenarios as S

NAMES = list(S.SCENARIOS)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_with_the_embedding_judge(name, minilm):
    out = io.StringIO()
    (v,) = S.run([name], judge="embedding", embed_fn=minilm, out=out)
    assert v.passed, out.getvalue()
    assert f"PASS  {name}" in out.getvalue() and "ROOT [" in out.getvalue()


@pytest.mark.parametrize("name", NAMES)
def test_scenario_with_a_good_model(name, minilm, server):
    server.respond(oracle(label_table()))
    out = io.StringIO()
    (v,) = S.run([name], judge="llm", base_url=server.base_url, model="good-model", embed_fn=minilm, out=out)
    assert v.passed, out.getvalue()
    assert server.chat_requests(), "the LLM judge was asked"


def test_cli_runs_and_reports(minilm, capsys):
    assert S.main(["multihop", "--quiet"]) == 0
    assert "PASS  multihop" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(S.TALKS))
def test_a_filler_exchange_is_numbered_by_its_place_in_the_tree(name):
    # "(#12)" on screen is the tree's #12: the needle's filler after #9 read one less
    talk = S.TALKS[name]()
    numbers = [(i, u.rsplit("(#", 1)[1].rstrip(")")) for i, (_l, u, _a) in enumerate(talk) if "(#" in u]
    assert numbers or name == "multihop"
    assert all(str(i) == n for i, n in numbers)


@pytest.mark.parametrize("name", sorted(S.CLOSING))
def test_the_closing_exchange_is_dated_after_the_talk(name, minilm):
    """A kept scenario's closing exchange was dated today, after a year of 2024 (a trial)."""
    tree = S._tree("embedding", None, None, minilm, None)
    S.SCENARIOS[name](tree)
    stamps = [x.timestamp for x in tree.exchanges]
    assert stamps[-1] > max(stamps[:-1]) and stamps[-1].startswith("2024-"), stamps[-3:]

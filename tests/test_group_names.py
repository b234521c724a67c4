"""A grouping topic is named again when its largest parts change (a topic filed into
it grew past the part that named it), in add()'s transaction: the node row, the
exchanges' thread paths, and the name the tree pane and retrieval read."""

from __future__ import annotations

import sqlite3

from trace_core import CTree
from trace_core import events as ev
from trace_core.group_names import GroupNames, largest_parts
from trace_core.nodes import MessageNode, TopicNode

TALK = [
    ("How do I repot my basil plant?", "Use a slightly bigger pot with fresh soil."),
    ("What is the capital of Peru?", "Lima."),
    ("Can you recommend a jazz album by Coltrane?", "A Love Supreme."),
    ("How do I fix a flat bicycle tyre?", "Patch the inner tube."),
    ("Which telescope is good for beginners?", "A 130 mm reflector."),
] + [(f"Tell me more about Coltrane's saxophone solos on record {k}.",
      f"Coltrane's saxophone on record {k} is modal jazz.") for k in range(8)]


def exchange(u: str, a: str) -> list[dict]:
    return [{"role": "user", "content": u}, {"role": "assistant", "content": a}]


def group_of(tree: CTree, index: int) -> TopicNode:
    node = tree.exchanges[index].parent
    while not node.is_group:
        node = node.parent
    return node


def test_the_largest_parts_hold_two_thirds_of_the_exchanges():
    def topic(n: int) -> TopicNode:
        t = TopicNode(f"t{n}")
        for k in range(n):
            t.add_child(MessageNode(k, exchange("u", "a")))
        return t

    parts = [topic(1), topic(6), topic(2), topic(1)]
    assert largest_parts(parts) == [1, 2]  # 8 of 10 exchanges; the one-exchange asides name nothing
    assert largest_parts([topic(1), topic(1)]) == [0, 1]


def test_a_group_is_named_again_when_a_topic_in_it_outgrows_the_one_that_named_it(tmp_path, minilm):
    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm, max_children=3)
    renamed: list[ev.GroupRenamed] = []
    tree.on_event(lambda e: renamed.append(e) if isinstance(e, ev.GroupRenamed) else None)
    names = []
    for u, a in TALK:
        tree.add(exchange(u, a))
        if len(tree.exchanges) > 4 and tree.exchanges[4].parent.parent.is_group:
            names.append(group_of(tree, 4).topic_name)
    group = group_of(tree, 4)  # the group the telescope question was filed in
    # named after the telescope topic when the fan-out made the group (telescope + the
    # first Coltrane question), then after the Coltrane topic once it outgrew it
    assert any("Telescope" in n for n in names), names
    assert "Coltrane" in group.topic_name and "Telescope" not in group.topic_name, (names, tree.render_tree())
    assert renamed and renamed[-1].after == group.topic_name and renamed[-1].node_id == group.node_id
    tree.vdb.close()

    # on disk: the node row, and the thread paths of the exchanges under it (retrieval shows them)
    con = sqlite3.connect(path)
    paths = dict(con.execute("SELECT node_id, path FROM thread_paths"))
    con.close()
    assert group.topic_name in paths[tree.exchanges[4].node_id]
    assert "Telescope Beginners Reflector" not in paths[tree.exchanges[12].node_id].split(" → ")[1]
    reopened = CTree.open(str(path), judge="embedding", embed_fn=minilm, max_children=3, read_only=True)
    assert group_of(reopened, 4).topic_name == group.topic_name
    assert reopened.thread_path(reopened.exchanges[4]) == paths[tree.exchanges[4].node_id]
    reopened.vdb.close()


def test_a_group_is_not_named_again_while_its_largest_parts_stay_the_same():
    calls = []

    def name_topic(texts, weights):
        calls.append(texts)
        return "Named " + str(len(calls))

    names = GroupNames(name_topic)
    group = TopicNode("Original", node_id="g1")
    big, small, other = TopicNode("Big"), TopicNode("Small"), TopicNode("Other")
    for k in range(4):
        big.add_child(MessageNode(k, exchange("u", "a")))
    small.add_child(MessageNode(4, exchange("u", "a")))
    other.add_child(MessageNode(5, exchange("u", "a")))
    for part in (big, small, other):
        group.add_child(part)
    assert names.refresh(group) is False  # the first look records what named it (Big and Small)
    small.add_child(MessageNode(6, exchange("u", "a")))
    assert names.refresh(group) is False and not calls  # Big and Small still hold two thirds
    for k in range(7, 12):
        other.add_child(MessageNode(k, exchange("u", "a")))
    assert names.refresh(group) is True and group.topic_name == "Named 1"
    assert calls == [[("Big", ""), ("Other", "")]]


def test_a_group_is_named_by_two_parts_even_when_one_holds_most_of_it():
    """A group named by its one large part bore that part's name: a tomato topic's copy
    hid "Sarah Negative Peanuts" beside it."""
    from trace_core.judges import group_name

    names = GroupNames(lambda texts, weights: "unused", group_name)
    group = TopicNode("Original", node_id="g2")
    big, small = TopicNode("Tomato Seedlings Outside"), TopicNode("Sarah Negative Peanuts")
    for k in range(5):
        big.add_child(MessageNode(k, exchange("u", "a")))
    small.add_child(MessageNode(5, exchange("u", "a")))
    group.add_child(small)
    group.add_child(big)
    assert names.name(list(group.children)) == "Sarah Negative · Tomato Seedlings"


def test_a_group_of_subtopics_is_named_by_its_two_heaviest_parts_side_by_side():
    """The three best words across two equal parts read as a third subject: sourdough
    and marathon parts named their group "Weights Training October"."""
    from trace_core.judges import EmbeddingJudge, group_name

    assert group_name(["Sourdough Starter Weights", "Training Marathon October"], [4, 4]) == \
        "Sourdough Starter · Training Marathon"
    # the heaviest two, in conversation order; a word the first shows is not repeated
    assert group_name(["Tomato Seedlings Outside", "Tomato Leaves Yellow", "Listen Jazz Coltrane"], [1, 3, 4]) == \
        "Tomato Leaves · Listen Jazz"
    assert group_name(["Tomato Seedlings Outside", "Tomato Leaves Yellow"], [2, 3]) == "Tomato Seedlings · Leaves Yellow"
    assert group_name(["Sourdough Starter Weights"], [4]) == "Sourdough Starter Weights"
    assert EmbeddingJudge().name_group(["A b c", "D e f"], [1, 1]) == "A b · D e"
    # a part that is itself a group: its words, never its separator ("Sourdough Starter · · Listen")
    assert group_name(["Sourdough Starter", "Sourdough Starter · Listen Jazz"], [4, 4]) == \
        "Sourdough Starter · Listen Jazz"
    assert group_name(["Sourdough Starter · Training Marathon", "Sourdough Starter · Listen Jazz"], [5, 4]) == \
        "Sourdough Starter · Listen Jazz"
    # a copy of a part's name takes the next part's words too: groups over groups nested into
    # "Sourdough Starter · Training Marathon → Sourdough Starter · Training Marathon → …" (a trial)
    assert group_name(["Sourdough Starter · Training Marathon", "Training Marathon October", "Suggest Seafood Main"],
                      [10, 5, 3]) == "Sourdough Starter · Training Marathon · Suggest Seafood"
    # two parts only: the lighter one's words the copy does not show ("a · b → a · b" in a trial)
    assert group_name(["Sourdough Starter · Training Marathon", "Training Marathon October"], [5, 4]) == \
        "Sourdough Starter · October"


def test_the_inspector_fixtures_groups_name_their_largest_parts(minilm, tmp_path):
    from test_nexus_inspect import TALK as INSPECT_TALK
    from test_nexus_inspect import build_session

    build_session(tmp_path / "s.db", minilm, INSPECT_TALK)
    tree = CTree.open(str(tmp_path / "s.db"), embed_fn=minilm, judge="embedding")
    groups = [t for t in tree.structure.root.iter_topics() if t.is_group]
    assert groups
    for g in groups:
        sides = g.topic_name.split(" · ")
        parts = [c.topic_name for c in g.topic_children]
        assert len(sides) == 2 and all(any(side.split()[0] in p.split() for p in parts) for side in sides), \
            (g.topic_name, parts)
    tree.vdb.close()


def test_after_a_reorganisation_no_group_is_named_by_parts_it_no_longer_holds(minilm, tmp_path):
    """The theseus scenario's reorganisation merged topics out of nested groups; the group
    above them kept "Training Marathon · Roll Kubernetes" over two tax topics. Every group
    above a merge's source or absorber is named again."""
    from trace_core import scenarios as S

    tree = CTree.open(str(tmp_path / "t.db"), judge="embedding", embed_fn=minilm)
    assert S.SCENARIOS["theseus"](tree).passed
    groups = [g for g in tree.structure.root.iter_topics() if g.is_group]
    assert groups
    for g in groups:
        words = {w for c in g.topic_children for w in c.topic_name.split()}
        assert all(side.split()[0] in words for side in g.topic_name.split(" · ")), \
            (g.topic_name, [c.topic_name for c in g.topic_children])
    tree.vdb.close()
    reopened = CTree.open(str(tmp_path / "t.db"), judge="embedding", embed_fn=minilm, read_only=True)
    assert sorted(g.topic_name for g in reopened.structure.root.iter_topics() if g.is_group) == \
        sorted(g.topic_name for g in groups)  # the new names are stored
    reopened.vdb.close()


def test_a_new_subject_filed_in_the_newest_group_is_said_so(tmp_path, minilm):
    """The judge's line said "new topic under ROOT" while the exchange went into the newest
    group (the tree keeps conversation order), where a new user found a tax topic inside
    "Tram Lisbon · Tomato Variety" and took the log for wrong."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm, max_children=3)
    said: list[tuple[ev.JudgeDecided, bool]] = []  # the line, and whether the exchange's topic sits in a group

    def on_event(e) -> None:
        if isinstance(e, ev.JudgeDecided):
            said.append((e, tree.exchanges[e.exchange_index].parent.parent.is_group))

    tree.on_event(on_event)
    for u, a in TALK:
        tree.add(exchange(u, a))
    filed = [(e, in_group) for e, in_group in said if "filed in the newest group" in e.reason]
    assert filed, [e.reason for e, _ in said]
    assert all(e.action == "new" and "under ROOT" in e.reason and in_group for e, in_group in filed)
    tree.vdb.close()



def test_the_judges_line_says_where_the_fan_out_then_put_a_new_topic(tmp_path, minilm):
    """The judge's line said "new topic under Jazz Album · Flat Bicycle"; the same add()
    split that group, and the "stored in ROOT → Telescope Beginners · Coltrane Saxophone → …"
    line after it read as a contradiction (a trial, with a group named again as well)."""
    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm, max_children=3)
    lines: list[tuple[ev.JudgeDecided, str]] = []  # the judge's line and the group its topic sits in
    tree.on_event(lambda e: lines.append((e, tree.exchanges[e.exchange_index].parent.parent.topic_name))
                  if isinstance(e, ev.JudgeDecided) else None)
    for u, a in TALK:
        tree.add(exchange(u, a))
    moved = [(e, group) for e, group in lines if "the fan-out then split" in e.reason]
    assert moved, [e.reason for e, _ in lines]
    assert all(e.reason.endswith(f"it sits in {group}") for e, group in moved), moved
    # a new topic the fan-out left where the judge put it says nothing more
    assert all("is now named" not in e.reason and "split" not in e.reason for e, _ in lines[:5])
    tree.vdb.close()


def test_the_judges_line_says_when_the_group_it_named_was_named_again():
    from trace_core.placement import moved_note

    root, group, topic = TopicNode("ROOT"), TopicNode("German Steuerberater · Wedding Speech"), TopicNode("Tax")
    root.add_child(group)
    group.add_child(topic)
    group.topic_name = "Remind City · Name Tax"
    assert moved_note(group, topic, [(group, "German Steuerberater · Wedding Speech")]) == \
        "; German Steuerberater · Wedding Speech is now named Remind City · Name Tax"
    assert moved_note(group, topic, []) == ""
    assert moved_note(root, group, []) == ""  # under ROOT, and still there: nothing to say
    # filed under ROOT, which then overflowed and grouped its topics: said where it went
    # (the next line read "… in ROOT → Learning Guitar · Biscuit Chasing → …", a trial)
    assert moved_note(root, topic, []) == \
        "; the fan-out then grouped ROOT's topics: it sits in Remind City · Name Tax"


def test_a_group_left_with_one_part_by_forget_or_archive_gives_way_to_it(tmp_path, minilm):
    """After /forget, "Dana Sister Porto" held only "Dana Sister Porto" (a trial): a group
    whose other parts were emptied by archive or forget gives way to its last part, as
    after a merge, and the file says so too."""
    from trace_core.invariants import check_invariants

    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=minilm, max_children=3)
    for u, a in TALK:
        tree.add(exchange(u, a))
    group = next(g for g in tree.structure.root.iter_topics()
                 if g.is_group and len(g.children) == 2 and g is not tree.current_node.parent)
    keep, *others = group.children
    for part in others:  # every exchange of every part but one
        tree.forget([x for x in tree.exchanges if not x.archived and part in tree.structure.get_ancestors(x)])
    assert group.parent is None and keep.parent is not None and keep.parent is not group
    assert not [g for g in tree.structure.root.iter_topics() if g.is_group and len(g.children) == 1]
    check_invariants(tree)
    shape = tree.render_tree()
    tree.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=minilm, read_only=True)
    assert reopened.render_tree() == shape
    reopened.close()

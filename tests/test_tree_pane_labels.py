"""The tree pane's rows and title as a new user saw them in a real terminal (tmux): a ★
score, a count or the inspector cut by the pane's edge, and a scenario's scratch tree
not named as one. Each test reads the screen as drawn (scrollbars included)."""

from __future__ import annotations

import re

import test_nexus_inspect
from test_nexus_inspect import command, make_config, ready, select, topic_nodes, wait_for

from nexus.app import NexusApp
from nexus.inspector import NodeInspector
from nexus.treesnap import TreeSnapshot
from nexus.widgets import MemoryTree

data_dir, session_file = test_nexus_inspect.data_dir, test_nexus_inspect.session_file  # its fixtures
paced_scenarios = test_nexus_inspect.paced_scenarios
COUNT = re.compile(r" \(\d+\)$")


def on_screen(app, widget) -> list[str]:
    """``widget``'s visible content as the terminal shows it: the screen's composited rows
    (its scrollbar over the last cells), cut to the widget's content region."""
    region = widget.scrollable_content_region
    strips = app.screen._compositor.render_strips()
    return [s.crop(region.x, region.right).text.rstrip() for s in strips[region.y:region.bottom]]


def topic_rows(lines: list[str]) -> list[str]:
    return [line for line in lines if ("▶ " in line or "▼ " in line) and "ROOT (" not in line]


async def open_all(pilot, pane: MemoryTree) -> None:
    for node in topic_nodes(pane):
        node.expand()
    await pilot.pause(0.2)


async def test_a_starred_branch_keeps_its_count_and_score_at_every_pane_width(server, tmp_path, minilm, data_dir,
                                                                            session_file):
    """In the 42-column pane "★ Flying Lisbon Five [2:3] (2)  ★" lost its score and a group
    row all of it: the name now gives way to the count and a short score, at any width."""
    for size, widen in (((150, 45), 0), ((150, 45), 6), ((80, 24), 0), ((70, 20), 0)):
        rows = await starred_rows(make_config(server.base_url, tmp_path), session_file, minilm, size, "ctrl+right",
                                  widen)
        assert rows and all(row.endswith(") ★3.2") and COUNT.search(row[:-5]) for row in rows), (size, rows)
        # where the room allows, the range stays too (the name is cut first)
        if size[0] > 100:
            assert all(re.search(r" \[\d+:\d+\] \(\d+\) ★3\.2$", row) for row in rows), rows


async def starred_rows(config, session_file, minilm, size, key: str, presses: int) -> list[str]:
    """The topic rows on screen with every branch starred (score 3.2), the pane resized
    by ``presses`` of ``key`` first."""
    app = NexusApp(config, session_file, embed_fn=minilm)
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        for _ in range(presses):
            await pilot.press(key)
        await pilot.pause(0.2)
        pane.refresh_tree(pane.ctree, {tid: 3.1985 for tid in pane.snapshot.topics})
        await open_all(pilot, pane)
        return topic_rows(on_screen(app, pane))


async def test_a_pane_narrowed_by_hand_drops_whole_parts_never_half_of_one(server, tmp_path, minilm, data_dir,
                                                                          session_file):
    """Ctrl+← down to 16-22 columns cut rows to "S… (4" and "(1) ★3" (a trial): where the
    count and score cannot fit beside a letter of the name, the score goes whole (the ★ in
    front still marks the branch), then the count."""
    whole = re.compile(r"(…|\w)( \(\d+\))?( ★3\.2)?$")
    for size, narrower in (((150, 45), 5), ((150, 45), 8), ((100, 30), 2)):
        rows = await starred_rows(make_config(server.base_url, tmp_path), session_file, minilm, size, "ctrl+left",
                                  narrower)
        assert rows and all(whole.search(row) for row in rows), (size, narrower, rows)
        assert all("★" in row for row in rows), rows  # every fed branch still marked


async def test_the_root_row_keeps_its_whole_count_in_a_narrow_pane(server, tmp_path, minilm, data_dir,
                                                                  session_file):
    """At 16 columns the root row read "▼ ROOT (12 ex" (a trial): "ROOT (12)" there."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        assert any(re.search(r"ROOT \(\d+ exchanges\)$", line) for line in on_screen(app, pane))
        for _ in range(8):
            await pilot.press("ctrl+left")
        await pilot.pause(0.3)
        root = [line for line in on_screen(app, pane) if "ROOT" in line]
        assert root and re.search(r"ROOT \(\d+\)$", root[0]), root


async def test_in_a_narrow_terminal_every_topic_keeps_its_whole_count(server, tmp_path, minilm, data_dir,
                                                                     session_file):
    """70 × 20: the active-path row showed "└─ ▶ ● Write V… (1" (a name kept at 8 cells
    pushed the count under the scrollbar); the name now shrinks below that."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(70, 20)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        await open_all(pilot, pane)
        active = next(tid for tid in reversed(pane.snapshot.active_ids) if tid in pane._topic_nodes)
        pane.scroll_to_node(pane._topic_nodes[active], animate=False)
        await pilot.pause(0.1)
        rows = topic_rows(on_screen(app, pane))
        assert any("● " in row for row in rows), rows
        assert rows and all(COUNT.search(row) for row in rows), rows


async def test_in_a_narrow_terminal_the_inspector_takes_the_chats_width(server, tmp_path, minilm, data_dir,
                                                                       session_file):
    """70 × 20: the inspector was 45% of the 46 columns left of the tree pane (20), so
    "range" and "[0:6]" stood on two lines; it now covers the chat, beside the pane."""
    for size, width in (((70, 20), 46), ((80, 24), 46), ((150, 45), 46)):
        app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
        async with app.run_test(size=size) as pilot:
            await ready(app, pilot)
            pane = app.query_one(MemoryTree)
            inspector = app.query_one(NodeInspector)
            await select(pilot, pane, topic_nodes(pane)[0])
            await wait_for(pilot, lambda i=inspector: i.display and i.detail is not None, what="inspector")
            await pilot.pause(0.1)
            assert inspector.region.right == pane.region.x
            assert inspector.outer_size.width == min(width, app.query_one("#chat").outer_size.width), size
            assert any(re.match(r"range +\[\d+:\d+\]", line) for line in on_screen(app, inspector)), size
            if size == (70, 20):  # 9 lines of it show: PageDown in the tree scrolls it (nothing reached the rest)
                assert inspector.max_scroll_y > 0 and app.focused is pane
                await pilot.press("pagedown")
                await wait_for(pilot, lambda i=inspector: i.scroll_y > 0, what="inspector scrolled")
                await pilot.press("pageup")
                await wait_for(pilot, lambda i=inspector: i.scroll_y == 0, what="inspector back at its top")


def test_a_scenarios_title_names_its_scratch_tree_in_any_room():
    snap = TreeSnapshot(dict.fromkeys(map(str, range(60))), "0", 141, 0, 5, 3, (4, 20, 35), {})
    assert snap.title() == "depth 3 · 59 topics · 141 exchanges"
    assert snap.title(None, "needle") == "scenario needle (scratch) · 141 exchanges · 59 topics"
    assert snap.title(41, "needle") == "scenario needle (scratch) · 141 exchanges"
    assert snap.title(38, "needle") == "needle (scratch) · 141 exchanges"  # the default 42-column pane
    assert snap.title(24, "needle") == "scratch · 141 exchanges"  # a narrow one


async def test_the_pane_title_says_a_running_scenario_is_its_scratch_tree(server, tmp_path, minilm, data_dir,
                                                                        session_file, paced_scenarios):
    """It read "depth 3 · 59 topics · 141 exchanges" while the app's title named the
    user's session; the user's title comes back when the scenario ends."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        title = pane.border_title
        assert title.startswith("depth ")
        await command(pilot, app, "/scenario needle")
        await wait_for(pilot, lambda: pane.showing_scenario and pane.snapshot is not None
                       and pane.snapshot.exchanges >= 3, what="scratch tree growing")
        assert re.fullmatch(r"needle \(scratch\) · \d+ exchanges", pane.border_title), pane.border_title
        await pilot.resize_terminal(240, 45)  # a pane wide enough for the whole title
        await wait_for(pilot, lambda: pane.border_title.startswith("scenario "), what="the wider title")
        assert re.fullmatch(r"scenario needle \(scratch\) · \d+ exchanges · \d+ topics?", pane.border_title), \
            pane.border_title
        assert app.scenarios.cancel()
        await wait_for(pilot, lambda: not pane.showing_scenario, what="cancelled")
        await wait_for(pilot, lambda: pane.border_title == title, what="the user's title back")


async def test_a_reorganisation_that_merged_takes_the_last_replys_stars_away(server, tmp_path, minilm, data_dir,
                                                                           session_file):
    """★ scores are the branches of the tree the last reply read: after merges they
    stood on branches that had since taken others in (a trial)."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        pane.refresh_tree(pane.ctree, {tid: 3.1985 for tid in pane.snapshot.topics})
        await open_all(pilot, pane)
        assert any("★" in row for row in topic_rows(on_screen(app, pane)))
        pane.mark_reorganization({})  # nothing merged: the stars stay
        await pilot.pause(0.2)
        assert any("★" in row for row in topic_rows(on_screen(app, pane)))
        first = next(iter(pane.snapshot.topics))
        pane.mark_reorganization({first: "absorbed Something (cos 0.70)"})
        await pilot.pause(0.2)
        rows = topic_rows(on_screen(app, pane))
        assert rows and not any("★" in row for row in rows), rows


def test_a_name_cut_at_a_space_or_a_wide_character_ends_in_a_plain_ellipsis():
    """"Ünïcödé Façade" became "Ünïcödé …" and "東京 天気 ミソ" "東京 天 …" in an 80-column
    terminal: the cut fell on a space, or a double-width character's padding, and read
    as a word and a lone "…" (a new-user trial)."""
    from rich.text import Text

    from nexus.treepane import NameFit

    for name, room, want in (("Ünïcödé Façade", 19, "Ünïcödé…"), ("東京 天気 ミソ", 19, "東京 天…"),
                             ("Slow Story Harbour", 19, "Slow Sto…"),
                             ("Flying Lisbon · Cat Miso", 26, "Flying Lisbon…")):
        label = Text(f"{name} [2:4] (3)")
        fit = NameFit(0, len(name), label.cell_len, 1)
        out = fit.fitted(label, room).plain
        assert out == f"{want} [2:4] (3)", (name, out)


def test_a_narrow_panes_title_keeps_the_exchange_count_whole():
    """At 50 columns the title read "130 exchange…" (cut mid-word, the topics gone with it
    anyway): where the counts do not fit together, the exchanges alone, then the number."""
    snap = TreeSnapshot(dict.fromkeys(map(str, range(63))), "0", 130, 0, 5, 4, (2, 20, 40), {})
    assert snap.title(30) == "130 exchanges · 62 topics"
    assert snap.title(14) == "130 exchanges"
    assert snap.title(8) == "130"
    assert snap.title(8, "needle") == "scratch · 130 exchanges"  # as before: a scenario's tree is named so

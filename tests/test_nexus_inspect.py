"""Pilot tests of the tree pane, the node inspector, /check, /find, reorganisation
marks and /scenario (issue 13). Sessions are real files built with the real MiniLM."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from scenario_oracle import label_table, oracle
from scripted_server import Reply
from textual.geometry import Region

from nexus.app import NexusApp
from nexus.config import load_config
from nexus.history import when
from nexus.inspector import NodeInspector
from nexus.widgets import EventLog, MemoryTree, Notice
from trace_core import CTree
from trace_core import scenarios as S

# topics that come back: sourdough twice, so a reorganisation has something to merge
TALK = [(u, a) for _label, u, a in S.filler(24)] + [(u, a) for _label, u, a in S.filler(8, start=6)] + [
    ("Unrelated: what's the capital of Australia?", "Canberra.")]


def make_config(base_url: str, tmp_path: Path, **over):
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    cfg.set("server", "base_url", base_url)
    cfg.set("server", "api_key", "sk-test")
    cfg.set("models", "chat", "test-model")
    cfg.set("memory", "judge", "embedding")
    cfg.set("memory", "idle_reorganize_seconds", 0)
    cfg.set("web", "enabled", False)
    for (section, key), value in over.items():
        cfg.set(section, key, value)
    return cfg


def build_session(path: Path, embed, talk=TALK) -> None:
    """A real session file, as Nexus would have written it (fixed dates)."""
    tree = CTree.open(str(path), judge="embedding", embed_fn=embed)
    for i, (u, a) in enumerate(talk):
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": a}],
                 timestamp=f"2025-{3 + i // 28:02d}-{1 + i % 28:02d}T09:00:00")
    tree.index_pending()
    tree.vdb.close()


async def wait_for(pilot, cond, timeout: float = 30.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"not reached: {what}\nnotices:\n{notices(pilot.app)}\nlog:\n{log_text(pilot.app)}")
        await pilot.pause(0.05)


async def ready(app, pilot) -> None:
    await wait_for(pilot, lambda: app.session is not None and app.embedder_state == "ready"
                   and app.query_one(MemoryTree).snapshot is not None, what="session ready")


async def command(pilot, app, text: str) -> None:
    app.query_one("#prompt").focus()
    app.run_command(text)
    await pilot.pause()


def log_text(app) -> str:
    return "\n".join(t for _, t in app.query_one(EventLog).history)


def notices(app) -> str:
    return "\n".join(n.plain for n in app.query(Notice))


def inspector_text(app) -> str:
    return str(app.query_one(NodeInspector).body.render())


def pane_labels(pane: MemoryTree) -> list[str]:
    out, stack = [], [pane.root]
    while stack:
        n = stack.pop()
        out.append(str(n.label))
        stack.extend(n.children)
    return out


async def select(pilot, pane: MemoryTree, node) -> None:
    pane.focus()
    pane.move_cursor(node)
    await pilot.pause()
    await pilot.press("enter")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def session_file(tmp_path, minilm):
    path = tmp_path / "s.db"
    build_session(path, minilm)
    return path


@pytest.fixture
def paced_scenarios(monkeypatch):
    """A scenario at a pace a test can watch: needle's 200 exchanges took 2.0 s on a quiet
    machine, over before the test saw it run (each exchange waits 30 ms more)."""
    import time

    from nexus.scenario_runner import CancellableTree

    add = CancellableTree.add

    def paced(self, messages, timestamp=None):
        time.sleep(0.03)
        return add(self, messages, timestamp)

    monkeypatch.setattr(CancellableTree, "add", paced)


def topic_nodes(pane: MemoryTree):
    return [n for n in pane.root.children if isinstance(n.data, str)]


async def test_inspector_shows_a_topic_and_an_exchange_and_esc_closes_it(server, tmp_path, minilm, data_dir,
                                                                        session_file):
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        tree = app.session.tree
        inspector = app.query_one(NodeInspector)
        assert not inspector.display
        # the pane's title: depth, topics, exchanges
        topics = [t for t in tree.iter_topics() if t is not tree.root]
        assert pane.border_title == f"depth {pane.snapshot.depth} · {len(topics)} topics · {len(TALK)} exchanges"

        first = topic_nodes(pane)[1]  # a branch with more than five others outside it
        topic = next(t for t in topics if t.node_id == first.data)
        await select(pilot, pane, first)
        await wait_for(pilot, lambda: inspector.display and inspector.detail is not None, what="topic inspector")
        text = inspector_text(app)
        assert topic.topic_name in text and f"[{topic.start_index}:{topic.end_index}]" in text
        assert "depth" in text and "frozen" in text
        assert f"{len(topic.topic_children)}/5 topics, {len(topic.message_children)}/5 exchanges" in text
        assert f"{topic.message_count} below" in text
        # what the user said in it, beside the summary (which can leave it out)
        first_user = " ".join(tree.exchanges[topic.start_index].user.split())
        assert "you said" in text and first_user[:60] in text.replace("\n", " ")
        d = inspector.detail
        assert len(d.nearest) == 5 and topic.node_id not in {n.node_id for n in d.nearest}
        # the nearest branches really are the nearest by centroid cosine
        ancestors = {t.node_id for t in tree.get_ancestors(topic)}
        below = {t.node_id for t in topic.iter_topics()}
        others = [t for t in topics if t.node_id not in ancestors | below]
        v = tree.node_vector(topic)
        best = sorted(others, key=lambda t: -float(tree.node_vector(t) @ v))[:5]
        assert [n.node_id for n in d.nearest] == [t.node_id for t in best]
        assert "nearest branches" in text and f"{d.nearest[0].cosine:+.3f}" in text
        assert "fed the last reply" not in text  # no reply yet
        # drawn over the chat (which keeps its width), right beside the tree pane, also
        # after the pane is widened
        chat = app.query_one("#chat")
        assert chat.region.right == pane.region.x and inspector.region.right == pane.region.x
        app.query_one("#prompt").focus()
        await pilot.press("ctrl+right")
        await wait_for(pilot, lambda: pane.region.x == chat.region.right and inspector.region.right == pane.region.x
                       and chat.region.right < 150 - 42, what="inspector beside the widened pane")
        pane.focus()

        # a topic's summary line (↳) inspects that topic (Enter on it did nothing)
        pane.move_cursor(first)
        await pilot.press("space")
        await wait_for(pilot, lambda: first.is_expanded and first.children, what="expanded")
        summary_line = next(c for c in first.children if str(c.label).startswith("↳"))
        inspector.close()
        await select(pilot, pane, summary_line)
        await wait_for(pilot, lambda: inspector.display and getattr(inspector.detail, "node_id", None) == topic.node_id,
                       what="the summary's topic inspected")
        await pilot.press("space")  # closed again, as the rest of the test found it
        pane.move_cursor(first)
        await pilot.press("space")
        await wait_for(pilot, lambda: not first.is_expanded, what="collapsed")

        # an exchange: both messages in full, date, branch, status, sentence parts
        node = first
        while True:  # expand (space) down to a topic holding exchanges
            pane.move_cursor(node)
            await pilot.press("space")
            await wait_for(pilot, lambda node=node: node.is_expanded and node.children, what="expanded")
            leaves = [c for c in node.children if c.data is not None and not isinstance(c.data, str)]
            if leaves:
                break
            node = next(c for c in node.children if isinstance(c.data, str))
        leaf = leaves[0]
        x = leaf.data
        await select(pilot, pane, leaf)
        await wait_for(pilot, lambda: getattr(inspector.detail, "index", None) == x.index, what="exchange inspector")
        text = inspector_text(app)
        assert x.user in text and x.assistant in text
        assert when(x.timestamp) in text and tree.thread_path(x) in text
        assert "in the tree, not superseded" in text
        parts = tree.vdb.message_parts([f"x{x.index}-user"])
        assert parts and all(" ".join(p.split()) in text for p in parts[f"x{x.index}-user"][0])

        # Esc closes the inspector first; nothing else happens
        await pilot.press("escape")
        await wait_for(pilot, lambda: not inspector.display, what="inspector closed")
        assert app.session is not None


async def test_the_keyboard_reaches_the_tree_and_the_inspector(server, tmp_path, minilm, data_dir, session_file):
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        inspector = app.query_one(NodeInspector)
        prompt = app.query_one("#prompt")
        await pilot.press("ctrl+t")  # hidden: Ctrl+B shows it too
        await wait_for(pilot, lambda: not app.query_one("#tree").display, what="tree hidden")
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: app.focused is pane and app.query_one("#tree").display, what="tree focused")
        await pilot.press("down", "enter")  # the first branch under ROOT
        await wait_for(pilot, lambda: inspector.display and inspector.detail is not None, what="inspector open")
        first = topic_nodes(pane)[0]
        assert inspector.detail.node_id == first.data
        await pilot.press("escape")  # the inspector first, then back to the input
        await wait_for(pilot, lambda: not inspector.display, what="inspector closed")
        # → and ← open and close a branch, as in a file manager (they scrolled the pane sideways)
        first.collapse()
        await pilot.pause()
        scroll = pane.scroll_x
        await pilot.press("right")
        assert first.is_expanded and pane.cursor_node is first and pane.scroll_x == scroll
        await pilot.press("right")
        assert pane.cursor_node is first.children[0]
        await pilot.press("left")
        assert pane.cursor_node is first  # a closed branch or a leaf: ← goes to the parent
        await pilot.press("left")
        assert not first.is_expanded and pane.cursor_node is first and pane.scroll_x == scroll
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.focused is prompt, what="back at the input")
        # the pane's last update may arrive as the app shuts down, the inspector gone: nothing
        # to read again (it raised NoMatches through the handler, once in CI)
        await inspector.remove()
        app.reinspect(app.session.tree)


@pytest.mark.parametrize("size,stays", [((70, 20), False), ((160, 40), True)])
async def test_a_command_run_beside_the_inspector_is_not_hidden_under_it(server, tmp_path, minilm, data_dir,
                                                                         session_file, size, stays):
    """At 70 columns the inspector covered the whole chat: /help ran unseen under it
    (trial). Submitting closes it where it hides most of the chat; a wide one stays."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        inspector = app.query_one(NodeInspector)
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: app.focused is pane, what="tree focused")
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: inspector.display and inspector.detail is not None, what="inspector open")
        prompt = app.query_one("#prompt")
        prompt.focus()
        prompt.value = "/help"
        await pilot.press("enter")
        await wait_for(pilot, lambda: "/undo-reorganize" in notices(app))
        assert inspector.display is stays


async def test_click_inspects_and_esc_closes_the_inspector_before_cancelling_a_reply(server, tmp_path, minilm,
                                                                                  data_dir, session_file):
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply("", chunks=[f"word{i} " for i in range(200)], chunk_delay=0.05)

    server.respond(respond)
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        inspector = app.query_one(NodeInspector)
        # a click on the first topic's row (line 1 under ROOT; the pane has a top edge)
        await pilot.click(MemoryTree, offset=(12, 2))
        await wait_for(pilot, lambda: inspector.display and inspector.detail is not None, what="click inspects")
        assert inspector.detail.node_id == topic_nodes(pane)[0].data
        # a reply streams; the first Esc closes the inspector, the second cancels the reply
        app.query_one("#prompt").focus()
        app.query_one("#prompt").value = "count for me about sourdough"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.current_reply is not None and "word3" in app.current_reply.text,
                       what="reply streams")
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not inspector.display
        assert app.turn is not None and "word199" not in app.current_reply.text  # still streaming
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == len(TALK) + 1, what="cancelled reply stored")
        assert "word199" not in app.session.tree.exchanges[-1].assistant


async def test_the_branches_that_fed_a_reply_show_their_scores(server, tmp_path, minilm, data_dir, session_file):
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("Feed it more often.", chunk_delay=0.0))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        app.query_one("#prompt").value = "My sourdough starter smells odd again, what should I do?"
        app.query_one("#prompt").focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == len(TALK) + 1, what="reply stored")
        await wait_for(pilot, lambda: pane.injected, what="injected branches")
        report = app.session.synth.last_report
        tid = next(t for t in pane.injected if t in {p.node_id for p in report.paths})
        for a in app.session.tree.get_ancestors(app.session.tree.find(tid))[1:-1]:  # open its branch
            pane._topic_nodes[a.node_id].expand()
            await pilot.pause()
        await wait_for(pilot, lambda: tid in pane._topic_nodes, what="branch shown")
        assert "★" in str(pane._topic_nodes[tid].label)
        await select(pilot, pane, pane._topic_nodes[tid])
        inspector = app.query_one(NodeInspector)
        await wait_for(pilot, lambda: getattr(inspector.detail, "node_id", None) == tid, what="inspector")
        r = inspector.detail.retrieval
        p = next(p for p in report.paths if p.node_id == tid)
        assert r is not None and r.similarity == p.similarity and r.injected >= 1
        assert abs(r.best_fused - pane.injected[tid]) < 1e-9
        text = inspector_text(app)
        assert "fed the last reply" in text and f"branch cos {p.similarity:.3f}" in text
        # the evidence of what it injected, in absolute terms (the fused score is relative)
        mine = [x for x in report.exchanges if tid in {t.node_id for t in app.session.tree.get_ancestors(
            app.session.tree.exchange_view()[x.index])}]
        best = max(x.vector for x in mine)
        assert best >= 0.3 or max(x.keyword for x in mine) > 0
        assert f"their best message: cos {best:.2f}, bm25 {max(x.keyword for x in mine):.2f}" in text


async def test_check_reports_health_and_names_a_corrupted_node(server, tmp_path, minilm, data_dir, session_file):
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        tree = app.session.tree
        await command(pilot, app, "/check")
        await wait_for(pilot, lambda: "Tree check" in notices(app), what="/check")
        text = notices(app)
        assert "all invariants hold" in text
        snap = app.query_one(MemoryTree).snapshot
        assert f"depth {snap.depth}" in text and "per level      " + " ".join(map(str, snap.per_level)) in text
        assert f"{len(TALK)} in the tree, 0 archived" in text and "fan-out" in text
        assert sum(snap.per_level) == snap.topic_count == sum(snap.fanout.values())
        fan = sorted(snap.fanout.items())  # in words: "3 topics with 2 children, 1 with 4 children"
        k, n = fan[0]
        assert f"fan-out        {n} topic{'s' if n > 1 else ''} with {k} child" in text
        assert "→ topics:" not in text
        # on a narrow chat the fan-out line goes on under its value, not under its label
        # ("  children, 1 with 5 children" at the notice's edge, a trial at 80x24)
        import os

        from rich.console import Console

        note = [n for n in app.query(Notice) if "Tree check" in n.plain][-1]
        narrow = Console(width=50, color_system=None, record=True, file=open(os.devnull, "w"))
        narrow.print(note.content)
        drawn = narrow.export_text().splitlines()
        row = next(i for i, line in enumerate(drawn) if line.lstrip().startswith("fan-out"))
        column = drawn[row].index(f"{n} topic")
        assert drawn[row + 1][:column].strip() == "" and drawn[row + 1].strip(), drawn

        # corrupt the live tree: one exchange in two topics
        topics = [t for t in tree.iter_topics() if t is not tree.root and t.message_children]
        a, b = topics[0], topics[-1]
        x = a.message_children[0]
        b.children.append(x)
        await command(pilot, app, "/check")
        await wait_for(pilot, lambda: "Tree check FAILED" in notices(app), what="violation")
        failed = [n for n in app.query(Notice) if "FAILED" in n.plain][-1]
        assert "error" in failed.classes
        wide = Console(width=200, color_system=None, record=True, file=open(os.devnull, "w"))
        wide.print(failed.content)  # what is drawn
        assert f"{x.node_id} is a child of {b.topic_name}" in wide.export_text()
        b.children.remove(x)

        # a cycle: the check names the node and returns (no endless walk)
        a.children.append(tree.root)
        await command(pilot, app, "/check")
        await wait_for(pilot, lambda: "reached twice" in notices(app), what="cycle reported")
        assert "'ROOT' (root) is reached twice" in notices(app)
        a.children.remove(tree.root)
        await command(pilot, app, "/check")
        await wait_for(pilot, lambda: notices(app).count("all invariants hold") == 2, what="healthy again")


async def test_find_highlights_and_expands_matching_topics(server, tmp_path, minilm, data_dir, session_file):
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        tree = app.session.tree
        want = [t for t in tree.iter_topics() if t is not tree.root
                and "sourdough" in f"{t.topic_name} {t.summary}".lower()]
        assert want
        await command(pilot, app, "/find Sourdough")
        await wait_for(pilot, lambda: "/find Sourdough:" in notices(app), what="/find")
        assert f"{len(want)} topics match" in notices(app)
        assert pane.found == {t.node_id for t in want}
        # a name several topics share is listed once, counted (listed twice over: a trial)
        names = [t.topic_name for t in want]
        listed = notices(app).split("/find Sourdough:")[-1]
        for name in set(names):
            assert listed.count(name + (f" (×{names.count(name)})" if names.count(name) > 1 else "")) >= 1
            assert listed.count(name) == 1 or name in " ".join(n for n in set(names) if n != name), (name, listed)
        for t in want:  # shown, with their ancestors expanded, and highlighted
            node = pane._topic_nodes[t.node_id]
            assert all(pane._topic_nodes[a.node_id].is_expanded for a in tree.get_ancestors(t)[:-1])
            assert any(s.style == "bold black on yellow" for s in node.label.spans)
        await command(pilot, app, "/find zeppelin")
        await wait_for(pilot, lambda: "/find zeppelin: 0 topics match by name or summary" in notices(app),
                       what="no match")
        assert "/search zeppelin searches the messages" in notices(app)
        assert not pane.found


async def test_reorganisation_marks_merges_until_undo_or_the_next_exchange(server, tmp_path, minilm, data_dir,
                                                                          session_file):
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("Sure.", chunk_delay=0.0))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        tree = app.session.tree
        before = tree.snapshot()
        await command(pilot, app, "/reorganize --threshold 0.5")
        await wait_for(pilot, lambda: "Reorganised:" in notices(app), what="reorganised")
        await wait_for(pilot, lambda: pane.marks, what="marks")
        merges = [line for line in log_text(app).splitlines() if line.startswith("merge: ")]
        vetoes = [line for line in log_text(app).splitlines() if line.startswith("veto: ")]
        n_merged = int(notices(app).split("Reorganised: ")[1].split(" merged")[0])
        n_vetoed = int(notices(app).split(" archived, ")[1].split(" vetoed")[0])
        assert len(merges) == n_merged >= 1 and len(vetoes) == n_vetoed
        assert all(re.search(r"absorbed .* \(cos [01]\.\d\d, \w+ judge: .+\)", m) for m in merges)
        # the absorbing branch is marked in the pane with what it absorbed and the cosine
        tid, mark = next(iter(pane.marks.items()))
        assert tid in pane._topic_nodes and f"⇐ {mark}" in str(pane._topic_nodes[tid].label)
        assert re.fullmatch(r"absorbed .+ \(cos [01]\.\d\d\)", mark)
        assert any("⇐ absorbed" in label for label in pane_labels(pane))
        # the inspector says it too, whole (README: the pane cuts it at its edge, "the
        # inspector and the log show it"; it did not: a trial)
        await select(pilot, pane, pane._topic_nodes[tid])
        inspector = app.query_one(NodeInspector)
        await wait_for(pilot, lambda: inspector.display and inspector.subject == tid and inspector.detail is not None,
                       what="the absorber inspected")
        assert f"last /reorganize  {mark}" in inspector_text(app), inspector_text(app)
        await pilot.press("escape")
        # undo: the tree as before, no marks
        await command(pilot, app, "/undo-reorganize")
        await wait_for(pilot, lambda: "was undone" in notices(app), what="undone")
        await wait_for(pilot, lambda: not pane.marks and not any("⇐" in lb for lb in pane_labels(pane)),
                       what="marks cleared")
        assert tree.snapshot() == before
        assert "reorganisation undone: the tree is as it was before it" in log_text(app)  # said in the log too
        # again (once the undo's worker has returned: a loaded machine saw "is running"), then
        # the next exchange clears the marks
        await wait_for(pilot, lambda: app.busy_with_long_command() is None, what="undo finished")
        await command(pilot, app, "/reorganize --threshold 0.5")
        await wait_for(pilot, lambda: notices(app).count("Reorganised:") == 2, what="reorganised again")
        await wait_for(pilot, lambda: pane.marks, what="marks again")
        app.query_one("#prompt").value = "One more thing about marathon tapering."
        app.query_one("#prompt").focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: not pane.marks and not any("⇐" in lb for lb in pane_labels(pane)),
                       what="marks cleared by the next exchange")


async def test_a_new_exchange_updates_the_pane_in_place(server, tmp_path, minilm, data_dir, session_file):
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("Canberra is the capital.", chunk_delay=0.0))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        shown = {id(n): n for n in topic_nodes(pane)}
        rebuilt = pane.rebuilt
        app.query_one("#prompt").value = "And what's the capital of New Zealand?"
        app.query_one("#prompt").focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: pane.snapshot.exchanges == len(TALK) + 1, what="pane updated")
        await pilot.pause(0.2)
        # the topic rows that were on screen are the same widgets' nodes, not new ones
        after = topic_nodes(pane)
        kept = [n for n in after if id(n) in shown]
        assert len(kept) >= len(shown) - 1
        assert pane.rebuilt - rebuilt <= 2
        assert f"ROOT ({len(TALK) + 1} exchanges)" in str(pane.root.label)


def session_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.parent.glob(path.name + "*"))}


async def test_scenario_runs_in_a_scratch_session_and_esc_cancels_it(server, tmp_path, minilm, data_dir,
                                                                     session_file, paced_scenarios):
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        tree = app.session.tree
        await wait_for(pilot, lambda: tree.pending_parts() == 0, what="indexed")
        before_tree = tree.snapshot()
        before_bytes = session_bytes(session_file)
        await command(pilot, app, "/scenario")
        await wait_for(pilot, lambda: "Scenarios (" in notices(app), what="listing")
        for name in ("needle", "overwrite", "drift", "theseus", "multihop"):
            assert f"  {name:<10} not run yet" in notices(app)

        prompt = app.query_one("#prompt")
        await command(pilot, app, "/scenario bogus")
        await wait_for(pilot, lambda: "Usage: /scenario" in notices(app), what="usage")
        assert prompt.text == "/scenario bogus" and prompt.selected_text == prompt.text  # given back to correct
        prompt.value = ""
        await command(pilot, app, "/scenario needle --judge psychic")
        await wait_for(pilot, lambda: notices(app).count("Usage: /scenario") == 2, what="judge usage")
        assert "'psychic' is no judge: embedding, auto, llm" in notices(app)
        prompt.value = ""

        # an inspector open on another tree than the pane's closes (one on a scratch topic
        # stayed after the scenario, showing a branch of a deleted tree beside the user's)
        inspector = app.query_one(NodeInspector)
        await select(pilot, pane, topic_nodes(pane)[1])
        await wait_for(pilot, lambda: inspector.display and inspector.detail is not None, what="inspector")
        # needle: 200 exchanges; the pane shows the scratch tree growing, Esc cancels it
        await command(pilot, app, "/scenario needle")
        await wait_for(pilot, lambda: not inspector.display, what="inspector of the user's tree closed")
        # another scenario meanwhile: said why not, and the line given back (it was thrown away)
        await command(pilot, app, "/scenario multihop")
        assert "The needle scenario is still running (Esc cancels it)" in notices(app)
        assert prompt.text == "/scenario multihop"
        prompt.value = ""
        await wait_for(pilot, lambda: pane.showing_scenario and pane.snapshot is not None
                       and pane.snapshot.exchanges >= 20, what="scratch tree growing")
        assert pane.ctree is not tree and "/nexus-scenario-" in str(pane.ctree.vdb.path)
        grown = pane.snapshot.exchanges
        await wait_for(pilot, lambda: pane.snapshot.exchanges > grown, what="growing live")
        # /find searches the pane's tree and /check the session: each says which (a trial read
        # /find's scratch topic beside /check's count of the user's exchanges)
        await command(pilot, app, "/find Sarah")
        await wait_for(pilot, lambda: "/find Sarah in the needle scenario's tree:" in notices(app), what="find")
        await command(pilot, app, "/check")
        await wait_for(pilot, lambda: f"(your session {session_file.stem}; the tree pane shows the needle "
                       "scenario's)" in notices(app), what="check")
        assert "scenario needle #" in log_text(app) and ": judge embedding: " in log_text(app)
        from datetime import datetime

        pressed = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        await pilot.press("escape")
        await wait_for(pilot, lambda: "needle: cancelled after" in notices(app), what="cancelled")
        from nexus.scenario_runner import load_verdicts

        assert load_verdicts()["needle"]["when"] >= pressed  # when it ended (it listed when it started)
        assert not pane.showing_scenario and pane.ctree is tree

        assert f"ROOT ({len(TALK)} exchanges)" in str(pane.root.label)
        assert app.session.tree is tree and tree.snapshot() == before_tree
        assert session_bytes(session_file) == before_bytes

        # multihop to the end: verdict, what it checked, remembered for the listing
        await command(pilot, app, "/scenario multihop")
        await wait_for(pilot, lambda: "PASS  multihop" in notices(app), timeout=60, what="multihop verdict")
        assert "Checked: allergy, party and cake recipe" in notices(app)
        await command(pilot, app, "/scenario")
        await wait_for(pilot, lambda: "  multihop   PASS (embedding judge" in notices(app), what="last verdict")
        from nexus.scenario_runner import verdicts_path

        assert oct(verdicts_path().stat().st_mode & 0o777) == "0o600"  # private, as the data dir's files are
        # cancelled and not yet ended (its step can wait on a model): it said "Esc cancels it" again
        import threading

        app.scenarios.name, app.scenarios.cancel_event = "drift", threading.Event()
        app.scenarios.cancel_event.set()
        await command(pilot, app, "/scenario multihop")
        assert "The drift scenario is stopping after its current step" in notices(app)
        assert prompt.text == "/scenario multihop"
        app.scenarios.name, app.scenarios.cancel_event, prompt.value = None, None, ""
        listed = notices(app).split("multihop   PASS")[0].rsplit("Scenarios (", 1)[1]
        assert "  needle     no verdict yet: cancelled after " in listed  # it said "not run yet"
        assert tree.snapshot() == before_tree and session_bytes(session_file) == before_bytes
        assert pane.ctree is tree


async def test_scenario_with_the_llm_judge(server, tmp_path, minilm, data_dir, session_file):
    server.respond(oracle(label_table()))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        await command(pilot, app, "/scenario multihop --judge llm")
        await wait_for(pilot, lambda: "multihop (llm judge" in notices(app), timeout=90, what="llm verdict")
        assert "PASS  multihop (llm judge" in notices(app)
        assert "judge llm: new → Sarah's Peanut Allergy" in log_text(app)
        assert any("New exchange:" in r["messages"][-1]["content"] for r in server.chat_requests())


async def test_scenario_with_the_auto_judge(server, tmp_path, minilm, data_dir, session_file):
    """``--judge auto``: the embedding judge decides when it is confident and asks the
    model only when its cosine is within the doubt margin of the threshold (overwrite:
    18 exchanges, a few of them doubtful)."""
    server.respond(oracle(label_table()))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        await command(pilot, app, "/scenario overwrite --judge auto")
        await wait_for(pilot, lambda: "overwrite (auto judge" in notices(app), timeout=90, what="auto verdict")
        assert "PASS  overwrite (auto judge" in notices(app)
        decisions = [line for line in log_text(app).splitlines() if line.startswith("scenario overwrite #")]
        asked = [d for d in decisions if ": judge llm: " in d]
        assert asked and len(asked) < len(decisions)  # some asked the model, not all
        assert any(": judge embedding: " in d and "clear-cut" in d for d in decisions)
        judged = [r for r in server.chat_requests() if "New exchange:" in r["messages"][-1]["content"]]
        assert len(judged) == len(asked)


def test_exchange_status_names_a_real_correction_not_chit_chat(tmp_path, minilm):
    """The inspector's "superseded by" follows retrieval's rule: a correction of the
    same fact counts; "I'll keep you updated" about something else does not."""
    from nexus.treeinfo import exchange_detail
    from trace_core import CTree, PromptSynthesizer

    def ex(user, assistant):
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add(ex("My niece Sarah is allergic to peanuts.", "Noted: no peanuts for Sarah."))
    tree.add(ex("I'm repainting the kitchen this weekend.", "Nice! Keep me updated on the colour."))
    tree.add(ex("Thanks, I'll keep you updated on the kitchen.", "Please do!"))
    tree.add(ex("Actually, Sarah is no longer allergic to peanuts.", "Great news: Sarah can eat peanuts now."))
    with PromptSynthesizer(ctree=tree) as synth:
        assert exchange_detail(tree, 0, synth).status == "superseded by #3"
        assert exchange_detail(tree, 3, synth).status == "updates #0"
        assert exchange_detail(tree, 1, synth).status == ""  # "keep you updated" corrects nothing
        assert exchange_detail(tree, 2, synth).status == ""
    tree.close()


def test_exchange_status_follows_an_edit_into_a_correction(tmp_path, minilm):
    """The status read which exchanges are corrections once, by index: an exchange
    /edit-ed into "Actually, … no longer …" stayed no correction in the inspector."""
    from nexus.treeinfo import exchange_detail
    from trace_core import CTree, PromptSynthesizer

    def ex(user, assistant):
        return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add(ex("My niece Sarah is allergic to peanuts.", "Noted: no peanuts for Sarah."))
    tree.add(ex("What's a good name for a goldfish?", "How about Bubbles?"))
    with PromptSynthesizer(ctree=tree) as synth:
        assert exchange_detail(tree, 0, synth).status == ""
        tree.replace_last(ex("Actually, Sarah is no longer allergic to peanuts.", "Great news: Sarah can eat peanuts now."))
        assert exchange_detail(tree, 0, synth).status == "superseded by #1"
        assert exchange_detail(tree, 1, synth).status == "updates #0"
    tree.close()


async def test_a_long_message_or_summary_is_cut_with_an_ellipsis_in_the_pane(server, tmp_path, minilm, data_dir):
    long = ("My neighbour Ottilie grows San Marzano tomatoes on her balcony in Ghent and wants to know "
            "when to move the seedlings outside this spring")
    path = tmp_path / "long.db"
    build_session(path, minilm, talk=[(long, "After the last frost, in mid-May."), ("Short one.", "Yes.")])
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        for node in topic_nodes(pane):
            node.expand()
        await wait_for(pilot, lambda: any(str(c.label).startswith("#0 ") for n in topic_nodes(pane)
                                          for c in n.children), what="exchanges shown")
        labels = [str(c.label) for n in topic_nodes(pane) for c in n.children]
        first = next(label for label in labels if label.startswith("#0 "))
        assert len(long) > 70 and first.endswith("…") and long.startswith(first[3:-1])
        assert "#1 Short one." in labels  # a short one is shown whole, with no mark


async def test_a_kept_scenario_opens_as_a_session_to_inspect(server, tmp_path, minilm, data_dir, session_file):
    """``/scenario overwrite --keep``: the scratch tree (deleted after a plain run) is
    kept as a session in the sessions folder; /open shows it in the pane, with the
    scenario's exchanges and topics, and the user's own session is untouched."""
    from nexus.sessions import sessions_dir

    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        before_bytes = session_bytes(session_file)
        await command(pilot, app, "/scenario overwrite --keep")
        await wait_for(pilot, lambda: "PASS  overwrite" in notices(app), timeout=60, what="verdict")
        kept = sorted(sessions_dir().glob("scenario-overwrite-*.db"))
        assert len(kept) == 1 and oct(kept[0].stat().st_mode & 0o777) == "0o600"
        assert f"/open {kept[0].stem} to inspect it" in notices(app)
        assert session_bytes(session_file) == before_bytes
        await command(pilot, app, f"/open {kept[0].stem}")
        await wait_for(pilot, lambda: app.session is not None and app.session_path == kept[0], what="opened")
        tree = app.session.tree
        assert len(tree.exchanges) == len(S.TALKS["overwrite"]())
        assert any("Peanut" in t.topic_name for t in tree.root.iter_topics()), tree.render_tree()
        pane = app.query_one(MemoryTree)
        await wait_for(pilot, lambda: f"ROOT ({len(tree.exchanges)} exchanges)" in str(pane.root.label),
                       what="the kept tree in the pane")
    # a plain run keeps nothing
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        await command(pilot, app, "/scenario multihop")
        await wait_for(pilot, lambda: "PASS  multihop" in notices(app), timeout=60, what="verdict")
        assert not list(sessions_dir().glob("scenario-multihop-*.db"))
        assert "to inspect it" not in notices(app)


def test_a_scenario_that_cannot_keep_its_session_still_gives_its_verdict(tmp_path, minilm):
    """A copy that fails (here, a folder that is not there) is said in the log; the
    verdict stands and no half-written file is left."""
    from nexus.scenario_runner import run_scenario

    events = []
    dest = tmp_path / "gone" / "scenario-multihop.db"
    outcome = run_scenario("multihop", embed_fn=minilm, keep_as=dest,
                           on_event=lambda text, level: events.append((level, text)))
    assert outcome.passed and not outcome.kept and "to inspect it" not in outcome.summary()
    assert any(level == "error" and "could not keep its session" in text for level, text in events)
    assert not dest.exists() and not list(tmp_path.rglob("*.part"))
    kept = tmp_path / "kept.db"
    outcome = run_scenario("multihop", embed_fn=minilm, keep_as=kept)
    assert outcome.kept == str(kept) and oct(kept.stat().st_mode & 0o777) == "0o600"
    tree = CTree.open(str(kept), embed_fn=minilm, read_only=True)
    assert len(tree.exchanges) == outcome.exchanges
    tree.vdb.close()
    # a cancelled run's copy says so in its name: it was listed as an ordinary session (trial)
    stop = iter([False, False, True])
    outcome = run_scenario("multihop", embed_fn=minilm, keep_as=tmp_path / "part.db",
                           should_stop=lambda: next(stop, True))
    assert outcome.cancelled and outcome.kept == str(tmp_path / "part-cancelled.db")
    assert (tmp_path / "part-cancelled.db").exists() and not (tmp_path / "part.db").exists()


def test_a_scenario_stops_inside_its_reorganisation_and_counts_its_steps_right(tmp_path, minilm):
    """Esc or quitting while a scenario reorganises (each merge check may ask the memory
    model for seconds) stops it between two checks — it ran on to its verdict, and a
    quit waited two minutes for it; the log counts its closing exchange in its total
    (it said #51/50)."""
    from nexus.scenario_runner import run_scenario
    from trace_core import scenarios as S

    total = S.exchange_count("theseus")
    asked = []

    def should_stop() -> bool:  # one ask per exchange, one as the reorganisation starts, then between its steps
        asked.append(1)
        return len(asked) > total + 1

    events = []
    outcome = run_scenario("theseus", embed_fn=minilm, should_stop=should_stop,
                           on_event=lambda text, level: events.append(text))
    assert outcome.cancelled and outcome.exchanges == total
    assert len(asked) == total + 2  # stopped at the reorganisation's first step, not after it
    steps = [t for t in events if t.startswith("scenario theseus #")]
    assert len(steps) == total and steps[-1].startswith(f"scenario theseus #{total - 1} ({total}/{total}):")
    assert steps[0].startswith("scenario theseus #0 (1/")  # numbered as the tree numbers the exchange


async def test_quitting_stops_a_running_scenario(server, tmp_path, minilm, data_dir, session_file, paced_scenarios):
    """Ctrl+Q while a scenario runs: it stops at its next step (the app's exit waits for
    its thread; it ran on to its end, two minutes under --judge auto), and no verdict is
    recorded for a run that did not finish."""
    from nexus.scenario_runner import load_verdicts

    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        await command(pilot, app, "/scenario needle")
        await wait_for(pilot, lambda: pane.snapshot is not None and pane.showing_scenario
                       and pane.snapshot.exchanges >= 10, what="scratch tree growing")
        scratch = pane.ctree
        await pilot.press("ctrl+q")
    run = load_verdicts().get("needle")  # no verdict: at most a cancelled run, listed as one
    assert run is None or (run["passed"] is None and run["cancelled"])
    assert 10 <= len(scratch.exchange_view()) < S.exchange_count("needle")


def shown_lines(pane: MemoryTree) -> list[str]:
    """The pane's lines as drawn on screen, without its border and padding."""
    outer = pane.outer_size
    strips = pane.render_lines(Region(0, 0, outer.width, outer.height))
    return [strip.text[2:].rstrip() for strip in strips[1:]]


async def test_a_long_topic_name_is_clipped_so_its_count_stays_in_sight(server, tmp_path, minilm, data_dir,
                                                                        session_file):
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        for node in topic_nodes(pane):
            node.expand()
        await pilot.pause(0.2)
        rows = {n.data: pane.snapshot.topics[n.data] for n in topic_nodes(pane)}
        width = pane.scrollable_content_region.width
        long = [r for r in rows.values() if len(f"{r.name} [{r.start}:{r.end}] ({r.exchanges_below})") + 2 + 3 > width]
        assert long, "the fixture has a group whose name is too long for the pane"
        lines = shown_lines(pane)
        for row in rows.values():
            tail = f" [{row.start}:{row.end}] ({row.exchanges_below})"
            line = next(line for line in lines if line.endswith(tail) or row.name in line)
            assert line.endswith(tail), line  # the count is never cut off
            assert len(line) <= width
        for row in long:
            tail = f" [{row.start}:{row.end}] ({row.exchanges_below})"
            line = next(line for line in lines if line.endswith(tail) and row.name[:8] in line)
            assert "…" in line and row.name not in line
        # a mark after the count: the name is not cut further for it, and it is not hard-cut
        # at the edge either (a trial): it ends in "…", or is left out where that cannot fit
        row = long[0]
        before = next(line for line in lines if row.name[:8] in line)
        pane.mark_reorganization({row.node_id: "Sourdough Starter Weights"})
        await pilot.pause(0.2)
        marked = next(line for line in shown_lines(pane) if row.name[:8] in line)
        assert marked.startswith(before) and (marked == before or marked.endswith("…")), marked
        for _ in range(12):  # wider panes: part of the mark, then all of it
            await pilot.press("ctrl+right")
            await pilot.pause(0.1)
            marked = next(line for line in shown_lines(pane) if row.name[:8] in line)
            assert len(marked) <= pane.scrollable_content_region.width, marked
            assert "⇐" not in marked or marked.endswith(("…", "Sourdough Starter Weights")), marked
        assert marked.endswith("  ⇐ Sourdough Starter Weights"), marked
        # a wider pane shows more of the name
        for _ in range(8):
            await pilot.press("ctrl+right")
        await pilot.pause(0.2)
        lines = shown_lines(pane)
        assert any(row.name in line for row in long for line in lines)


async def test_in_a_narrow_terminal_the_range_gives_way_and_the_count_stays(server, tmp_path, minilm, data_dir,
                                                                          session_file):
    """80 × 24 (a 28-column tree pane): a name cut to its 8 cells and the range still ran
    past the edge, cutting the count ("Roll Ku… [12:23] (10"); the range now goes first.
    The ★ of a branch that fed the reply leads its label, where a narrow pane shows it."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        for node in topic_nodes(pane):
            node.expand()
        await pilot.pause(0.2)
        rows = {n.data: pane.snapshot.topics[n.data] for n in topic_nodes(pane)}
        width = pane.scrollable_content_region.width
        topics = [line for line in shown_lines(pane) if "▶" in line or "▼" in line][1:]  # below ROOT
        assert topics
        for line in topics:
            assert re.search(r" \(\d+\)$", line) and len(line) <= width, line  # the count is never cut off
        assert any(not re.search(r"\[\d+:\d+\]", line) for line in topics), "no label too long for 28 columns"
        row = next(iter(rows.values()))
        pane.injected = {row.node_id: 9.097}
        assert pane.label_for(row, 1).plain.startswith("★ ")
    # at 60 columns "wider" (Ctrl+→) took a column off the tree pane (a trial)
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(60, 20)) as pilot:
        await ready(app, pilot)
        tree = app.query_one("#tree")
        before = tree.outer_size.width
        await pilot.press("ctrl+right")
        await pilot.pause(0.1)
        assert tree.outer_size.width >= before


async def test_the_inspector_follows_the_tree_as_it_grows(server, tmp_path, minilm, data_dir, session_file):
    """The active topic inspected, then a message sent: the view is read again (it kept
    the range and counts of when it was selected, beside a pane that had moved on)."""
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("Canberra was a compromise between Sydney and Melbourne."))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        inspector = app.query_one(NodeInspector)
        tree = app.session.tree
        active = tree.current_node
        node = pane._topic_nodes[active.node_id] if active.node_id in pane._topic_nodes else None
        if node is None:  # below a collapsed group: inspect it directly
            inspector.inspect(tree, active.node_id)
        else:
            await select(pilot, pane, node)
        await wait_for(pilot, lambda: inspector.display and inspector.detail is not None, what="topic inspector")
        before = f"[{active.start_index}:{active.end_index}]"
        assert before in inspector_text(app)
        app.query_one("#prompt").focus()
        app.query_one("#prompt").value = "Why was Canberra chosen as the capital of Australia?"
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(tree.exchanges) == len(TALK) + 1, what="stored")
        assert tree.current_node is active  # the same topic, one exchange longer
        after = f"[{active.start_index}:{active.end_index}]"
        assert after != before
        await wait_for(pilot, lambda: after in inspector_text(app), what="the inspector read again")


def test_the_inspector_says_what_each_indexed_part_is(tmp_path, minilm):
    """A message read after the one it answers was listed as one of its sentences (its text
    began with the reply before it), and a one-sentence message said "not indexed yet" after
    the index had passed it."""
    from nexus.inspector import exchange_text
    from nexus.treeinfo import exchange_detail
    from trace_core import CTree

    tree = CTree.open(str(tmp_path / "s.db"), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": "My starter smells of acetone."},
              {"role": "assistant", "content": "Feed it more often. Keep it warm. Use rye flour."}])
    tree.add([{"role": "user", "content": "Seven years now."},
              {"role": "assistant", "content": "That is a long time."}])
    before = exchange_text(exchange_detail(tree, 1)).plain
    assert "user: not indexed yet" in before
    tree.index_pending()
    first = exchange_text(exchange_detail(tree, 0)).plain
    assert "user: one sentence: scored by the message itself" in first
    assert "assistant: Keep it warm." in first
    second = exchange_text(exchange_detail(tree, 1)).plain
    assert "user, after the message before it: Feed it more often." in second
    # its date as the chat shows it (local "YYYY-MM-DD HH:MM"), not the stored UTC string
    assert f"date    {when(tree.exchanges[1].timestamp)}\n" in second and "+00:00" not in second
    tree.vdb.close()


def test_a_cancelled_scenario_is_listed_until_a_verdict_and_never_hides_one(tmp_path):
    from nexus.scenario_runner import ScenarioOutcome, listing, load_verdicts, save_verdict

    path = tmp_path / "verdicts.json"
    cancelled = ScenarioOutcome("needle", "embedding", None, "", 37, 4.0, cancelled=True, when="2026-12-03 10:00")
    save_verdict(cancelled, path)
    assert ("  needle     no verdict yet: cancelled after 37 exchanges (embedding judge, 2026-12-03 10:00)"
            in listing(load_verdicts(path)))
    passed = ScenarioOutcome("needle", "embedding", True, "found it", 200, 20.0, when="2026-12-03 10:05")
    save_verdict(passed, path)
    save_verdict(cancelled, path)  # a later cancelled run
    assert "  needle     PASS (embedding judge, 2026-12-03 10:05): found it" in listing(load_verdicts(path))
    assert "  overwrite  not run yet" in listing(load_verdicts(path))
    one = ScenarioOutcome("drift", "llm", None, "", 1, 10.7, cancelled=True, when="2026-12-03 10:18")
    assert one.summary().startswith("drift: cancelled after 1 exchange (10.7 s)")  # it said "1 exchanges"


def test_the_scenario_listing_wraps_each_text_under_itself():
    """Its "checks: …" lines wrapped back to the left edge, under the names."""
    import io

    from rich.console import Console

    from nexus.scenario_runner import LISTING_TITLE, listing_rows
    from nexus.widgets import two_columns

    console = Console(width=70, color_system=None, record=True, file=io.StringIO())
    console.print(two_columns([(LISTING_TITLE, listing_rows({}))]))
    lines = console.export_text().splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.lstrip().startswith("needle")):]
    column = body[0].index("not run yet")
    assert column > 10
    for line in body:
        if line.strip() and not any(line.lstrip().startswith(n) for n in S.SCENARIOS):
            assert line[:column].strip() == "", line  # under the text, not under the names


async def test_a_scenario_starting_shows_an_empty_scratch_tree_not_the_users(server, tmp_path, minilm, data_dir,
                                                                           session_file):
    """Before a scenario's first exchange the pane showed the user's "ROOT (N exchanges)"
    under a blank title (a trial); the user's tree comes back at the end."""
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        await wait_for(pilot, lambda: pane.snapshot is not None, what="the user's tree")
        scratch = CTree.open(str(tmp_path / "scratch.db"), judge="embedding", embed_fn=minilm)
        pane.show_scenario(scratch)
        await pilot.pause()
        assert str(pane.root.label) == "ROOT" and pane.border_title == "scenario: starting…"
        pane.end_scenario()
        await wait_for(pilot, lambda: f"ROOT ({len(TALK)} exchanges)" in str(pane.root.label), what="back")
        scratch.vdb.close()


async def test_another_session_shows_none_of_the_last_reply_s_scores(server, tmp_path, minilm, data_dir,
                                                                      session_file):
    """/load of this session's export (the same topic ids) showed the last reply's ★ scores
    on its topics, though nothing had been answered there (a trial)."""
    server.respond(lambda req: Reply('{"action": "continue"}') if req.get("response_format")
                   else Reply("Feed it more often.", chunk_delay=0.0))
    app = NexusApp(make_config(server.base_url, tmp_path), session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        pane = app.query_one(MemoryTree)
        app.query_one("#prompt").value = "My sourdough starter smells odd again, what should I do?"
        app.query_one("#prompt").focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == len(TALK) + 1, what="reply stored")
        await wait_for(pilot, lambda: pane.injected, what="injected branches")
        export = tmp_path / "export.json"
        await command(pilot, app, f"/save {export}")
        await wait_for(pilot, lambda: export.exists(), what="the export")
        await command(pilot, app, f"/load {export}")
        await wait_for(pilot, lambda: app.session is not None and app.session_path.stem == "export"
                       and app.session.tree is not None, what="the import opened")
        await pilot.pause(0.5)
        assert pane.injected == {} and not any("★" in label for label in pane_labels(pane)), pane_labels(pane)


async def test_esc_during_a_slow_reorganize_is_said_at_once(server, tmp_path, minilm, data_dir, session_file):
    """With the LLM's merge veto taking seconds a pair, Esc seemed lost: nothing was said
    for 12-14 s, until "Reorganisation cancelled" (a trial)."""
    server.respond(lambda req: Reply('{"merge": false}', delay=3) if "merge" in str(req.get("response_format") or "")
                   else Reply('{"action": "continue"}' if req.get("response_format") else "ok"))
    cfg = make_config(server.base_url, tmp_path)
    cfg.set("memory", "judge", "auto")
    app = NexusApp(cfg, session_file, embed_fn=minilm)
    async with app.run_test(size=(150, 45)) as pilot:
        await ready(app, pilot)
        await command(pilot, app, "/reorganize --threshold 0.3")
        await wait_for(pilot, lambda: any("merge" in str(r.get("response_format") or "")
                                          for r in server.chat_requests()), what="a veto asked")
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert "Cancelling /reorganize after its current step" in notices(app)
        await wait_for(pilot, lambda: "Reorganisation cancelled" in notices(app), 30, what="cancelled")


def test_a_fused_score_of_zero_is_said_to_be_relative():
    """The branch holding "I have a cat called Mochi." fed the reply to "What is my cat
    called?" and read "best fused 0.0000" (the weakest of three candidates) beside cos 0.65:
    as if it had counted for nothing (a trial)."""
    from nexus.inspector import topic_text
    from nexus.treeinfo import RetrievalScores, TopicDetail

    def detail(fused: float) -> TopicDetail:
        scores = RetrievalScores("What is my cat called?", 0.415, 0.0, 1, fused, 0.65, 3.25)
        return TopicDetail("t1", "Ilse Live Graz", "", 0, 1, 1, "ROOT → Ilse Live Graz", 0, 2, 5, True, 2, (), scores)

    assert "best fused 0.0000 (relative: the weakest candidate reads 0)" in topic_text(detail(0.0)).plain
    assert "relative" not in topic_text(detail(2.3)).plain


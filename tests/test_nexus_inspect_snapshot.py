"""A snapshot of the node inspector beside the tree pane (pytest-textual-snapshot).

Deterministic: a session file built from fixed exchanges with fixed dates and the
real MiniLM; no server is asked (the app only opens the session)."""

from __future__ import annotations

import asyncio

from test_nexus_inspect import TALK, build_session

from nexus.app import NexusApp
from nexus.config import load_config
from nexus.inspector import NodeInspector
from nexus.widgets import MemoryTree


def test_inspector_snapshot(snap_compare, tmp_path, monkeypatch, minilm):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    path = tmp_path / "inspect.db"
    build_session(path, minilm, TALK)
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    cfg.set("models", "chat", "test-model")
    cfg.set("memory", "judge", "embedding")
    cfg.set("memory", "idle_reorganize_seconds", 0)
    cfg.set("ui", "log_level", "warning")  # info lines carry temporary paths
    cfg.set("ui", "show_log", False)
    app = NexusApp(cfg, path, embed_fn=minilm)

    async def inspect_first_topic(pilot):
        for _ in range(400):
            pane = app.query_one(MemoryTree)
            if app.session is not None and app.embedder_state == "ready" and pane.snapshot is not None:
                break
            await asyncio.sleep(0.05)
        pane = app.query_one(MemoryTree)
        first = next(n for n in pane.root.children if isinstance(n.data, str))
        pane.focus()
        pane.move_cursor(first)
        await pilot.press("space", "enter")
        inspector = app.query_one(NodeInspector)
        for _ in range(200):
            if inspector.display and inspector.detail is not None:
                break
            await asyncio.sleep(0.05)
        for _ in range(200):  # the start-up server probe's notice is in, or not, before the shot
            if all(w.is_finished for w in app.workers if w.group == "probe"):
                break
            await asyncio.sleep(0.05)
        app.query_one("#chat").remove_children()  # the chat pane is not this snapshot's subject
        app.query_one("#prompt").cursor_blink = False  # a blinking cursor is not layout
        await pilot.pause()

    assert snap_compare(app, terminal_size=(150, 40), run_before=inspect_first_topic)

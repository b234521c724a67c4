"""A snapshot of the Nexus layout (pytest-textual-snapshot)."""

from __future__ import annotations

import asyncio

from nexus.app import NexusApp
from nexus.config import load_config


def test_layout_snapshot(snap_compare, tmp_path, monkeypatch, minilm):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    # a port nothing listens on: with LM Studio's 1234 the snapshot hung on what ran there
    # (a bundled server on 1234 during a CI run drew no "No model server" notice)
    cfg.set("server", "base_url", "http://127.0.0.1:9/v1")
    cfg.set("models", "chat", "test-model")
    cfg.set("memory", "judge", "embedding")
    cfg.set("memory", "idle_reorganize_seconds", 0)
    cfg.set("ui", "log_level", "warning")  # info lines carry temporary paths
    app = NexusApp(cfg, tmp_path / "snapshot.db", embed_fn=minilm)

    async def ready(pilot):
        from nexus.widgets import Notice

        for _ in range(200):  # the session, the embedder, and the server probe's answer
            if app.session is not None and app.embedder_state == "ready" and any(
                    "No model server answers" in n.plain for n in app.query(Notice)):
                break
            await asyncio.sleep(0.05)
        app.query_one("#prompt").cursor_blink = False  # a blinking cursor is not layout
        await pilot.pause()

    assert snap_compare(app, terminal_size=(110, 32), run_before=ready)

"""``nexus --local`` starts the bundled server beside the app: the session waits for it,
and a server that cannot start is said in words while the session still opens."""

from __future__ import annotations

import pytest
from test_nexus_app import data_dir, log_text, make_config, notices, wait_for  # noqa: F401

from nexus.app import NexusApp
from nexus.local_model import LocalModel
from trace_core.local_llm import LocalLLMServer


async def test_a_bundled_server_that_cannot_start_is_said_and_the_session_opens(tmp_path, minilm, data_dir):  # noqa: F811
    pytest.importorskip("llama_cpp")
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"this is no GGUF file")
    local = LocalModel(LocalLLMServer(model=str(bad)), timeout=120).begin()  # the real server process, failing
    app = NexusApp(make_config("http://127.0.0.1:9/v1", tmp_path), tmp_path / "s.db", embed_fn=minilm,
                   local_model=local)
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            assert "starting the bundled llama.cpp server" in app.sub_title
            await wait_for(pilot, lambda: "could not start" in notices(app), timeout=120)
            assert "exited with code" in notices(app)
            await wait_for(pilot, lambda: app.session is not None)  # memory and history are still there
            assert not local.applied and app.config.base_url == "http://127.0.0.1:9/v1"
            assert "did not start" in log_text(app)
    finally:
        local.stop()

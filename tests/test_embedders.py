"""Embedders: the bundled MiniLM (ONNX path = sentence-transformers), endpoint, injected."""

from __future__ import annotations

import numpy as np

from trace_core import CTree
from trace_core.embedders import FunctionEmbedder, MiniLMEmbedder, OpenAIEmbedder, as_embedder, make_embedder

TEXTS = [
    "Sarah is allergic to peanuts.",
    "What's the weather like in Tokyo this week? I'm flying there on Monday for a conference.",
    "x",
    "A much longer text " * 60,  # past the 256-token limit: truncated the same way
]


def test_minilm_matches_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(minilm.model_path, device="cpu").encode(TEXTS, normalize_embeddings=True)
    ours = minilm.embed_batch(TEXTS)
    assert ours.shape == (4, 384) and ours.dtype == np.float32
    assert np.min(np.sum(ours * reference, axis=1)) > 0.9999
    torch_path = MiniLMEmbedder(use_onnx=False).embed_batch(TEXTS)
    assert np.min(np.sum(torch_path * reference, axis=1)) > 0.9999


def test_minilm_is_meaningful(minilm):
    a, b, c = minilm.embed_batch(["I love my dog", "My puppy is adorable", "Quarterly tax filing deadline"])
    assert float(a @ b) > float(a @ c) + 0.2


def test_injected_embed_fn_and_batches():
    calls = []

    def embed(text):
        calls.append(text)
        return [len(text), 1.0]

    e = as_embedder(embed)
    assert isinstance(e, FunctionEmbedder) and e.name == "embed"
    m = e.embed_batch(["ab", "abcd"])
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0) and calls == ["ab", "abcd"]

    class Batched:
        name = "batched"

        def __call__(self, text):
            raise AssertionError("single calls not expected")

        def embed_batch(self, texts):
            return [[1.0, float(i)] for i in range(len(texts))]

    assert as_embedder(Batched()).embed_batch(["a", "b", "c"]).shape == (3, 2)


def test_openai_compatible_embeddings_endpoint(server):
    e = make_embedder("openai:nomic-embed-text", base_url=server.base_url, api_key="k")
    assert isinstance(e, OpenAIEmbedder) and e.name == "openai:nomic-embed-text"
    m = e.embed_batch(["one", "three"])
    assert m.shape == (2, 3)
    body = [r.body for r in server.state.requests if r.path == "/v1/embeddings"][0]
    assert body["model"] == "nomic-embed-text" and body["input"] == ["one", "three"]
    tree = CTree(judge="embedding", embed_fn=e)
    tree.add([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    assert len(tree.exchanges) == 1


def test_importing_trace_core_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, trace_core; from trace_core import CTree, PromptSynthesizer; print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_onnx_export_leaves_the_torch_path_intact(tmp_path):
    torch_path = MiniLMEmbedder(use_onnx=False)
    before = torch_path.embed_batch(TEXTS)
    MiniLMEmbedder()._export(str(tmp_path / "m.onnx"))
    assert (tmp_path / "m.onnx").stat().st_size > 1_000_000
    assert np.allclose(torch_path.embed_batch(TEXTS), before, atol=1e-5)


def test_one_export_is_kept_and_named_by_the_weights_content(tmp_path):
    """The export was named by the weights file's time: every reinstall added 90 MB to the
    cache (nine copies, 776 MB, in a trial), and nothing removed them."""
    import os
    import shutil

    from trace_core.embedders import ONNX_PREFIX, prune_exports, weights_tag

    src = MiniLMEmbedder(use_onnx=False).model_path
    copy = tmp_path / "reinstalled"
    copy.mkdir()
    shutil.copy(os.path.join(src, "model.safetensors"), copy / "model.safetensors")
    os.utime(copy / "model.safetensors", (1_000_000, 1_000_000))
    assert weights_tag(str(copy)) == weights_tag(src)
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in (f"{ONNX_PREFIX}90868376-1796502391.onnx", f"{ONNX_PREFIX}90868376-1796503223.onnx", "notes.txt"):
        (cache / name).write_bytes(b"x")
    keep = cache / f"{ONNX_PREFIX}{weights_tag(src)}.onnx"
    keep.write_bytes(b"model")
    prune_exports(str(keep))
    assert sorted(p.name for p in cache.iterdir()) == sorted([keep.name, "notes.txt"])


def test_a_server_embedder_that_cannot_embed_names_itself_and_the_setting(server):
    """``--embed openai:nomic-embed`` against a server without embeddings: "Cannot open the
    session: Error code: 500 - …", then every message "No reply: … answered HTTP 500"
    (trial): the chat model was blamed for the embedder."""
    import pytest

    from trace_core.embedders import OpenAIEmbedder
    from trace_core.errors import EmbedderError

    server.state.embeddings_error = "Llama model must be created with embedding=True to call this method"
    with pytest.raises(EmbedderError) as err:
        OpenAIEmbedder("nomic-embed", server.base_url, "k").embed("hello")
    said = str(err.value)
    assert said.startswith("the embedder openai:nomic-embed failed: the model server at")
    assert "--embed minilm" in said and "HTTP 500" in said and "embedding=True" in said


async def test_nexus_says_the_embedder_failed_not_the_session_or_the_chat_model(server, tmp_path, monkeypatch):
    from test_nexus_app import chat_reply, log_text, make_config, notices, type_and_send, wait_for

    from nexus.app import NexusApp
    from trace_core.embedders import OpenAIEmbedder

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    server.respond(chat_reply("ok"))
    server.state.embeddings_error = "Llama model must be created with embedding=True to call this method"
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db",
                   embed_fn=OpenAIEmbedder("nomic-embed", server.base_url, "k"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.session is not None and app.embedder_state != "loading", timeout=30)
        await type_and_send(pilot, app, "hello")
        await pilot.pause(1.0)
        said = notices(app) + log_text(app)
        assert "the embedder openai:nomic-embed failed: the model server at" in said
        assert "Error code: 500" not in said and "No reply: the model server" not in said, said


def test_two_threads_embedding_first_both_use_onnx():
    """The first thread marked ONNX unavailable while it loaded it: a second thread
    embedding at the same moment loaded torch instead (3.5 s, 645 MB: a trial)."""
    import subprocess
    import sys

    code = ("import sys, threading; from trace_core.embedders import MiniLMEmbedder\n"
            "e = MiniLMEmbedder()\n"
            "ts = [threading.Thread(target=e.embed_batch, args=(['hello world', 'more'],)) for _ in range(2)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(e.backend, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["onnxruntime", "False"], out.stdout + out.stderr


def test_a_users_embed_fn_that_returns_nan_or_ragged_vectors_is_refused_in_words(tmp_path):
    """A NaN vector was stored with a numpy warning (and split one subject into three
    topics); vectors of two lengths raised numpy's "inhomogeneous shape" (a trial)."""
    import pytest

    from trace_core.errors import EmbedderError

    def embed(text: str) -> list[float]:
        v = [float(ord(c) % 7) for c in (text + " " * 8)[:8]]
        if "poison" in text:
            v[3] = float("nan")
        return v[:4] if "short" in text else v

    path = str(tmp_path / "s.db")
    tree = CTree.open(path, judge="embedding", embed_fn=embed)
    tree.add([{"role": "user", "content": "garden tomatoes"}, {"role": "assistant", "content": "Water them."}])
    with pytest.raises(EmbedderError, match="NaN or infinity for 'poison tomatoes'"):
        tree.add([{"role": "user", "content": "poison tomatoes"}, {"role": "assistant", "content": "No."}])
    with pytest.raises(EmbedderError, match="length 4; its earlier vectors had 8"):
        tree.add([{"role": "user", "content": "short"}, {"role": "assistant", "content": "short too"}])
    ragged = FunctionEmbedder(type("F", (), {"embed_batch": lambda self, t: [[1.0, 2.0], [1.0]]})())
    with pytest.raises(EmbedderError, match="one vector of numbers per text"):
        ragged.embed_batch(["a", "b"])
    def failing(text: str) -> list[float]:
        raise ValueError("OpenAI: invalid API key")

    with pytest.raises(ValueError, match="^OpenAI: invalid API key$"):  # its own error, as it is (a review)
        FunctionEmbedder(failing).embed_batch(["a"])
    tree.add([{"role": "user", "content": "more tomatoes"}, {"role": "assistant", "content": "Stake them."}])
    assert [x.user for x in tree.exchanges] == ["garden tomatoes", "more tomatoes"]
    tree.close()
    reopened = CTree.open(path, judge="embedding", embed_fn=embed)
    assert [x.user for x in reopened.exchanges] == ["garden tomatoes", "more tomatoes"]
    reopened.close()

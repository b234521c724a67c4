"""Model swapping for /ingest against scripted LM Studio and Ollama endpoints."""

from __future__ import annotations

import re
import struct
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image
from scripted_server import Reply

from nexus.chat import ChatSession
from nexus.config import load_config
from nexus.ingest import ImageError, ingest_images, prepare
from nexus.models import LMStudioBackend, ModelManager, NoLoadControl, OllamaBackend, detect

DESCRIPTION = "A red bicycle leaning against a blue door, with a sign reading 'OPEN'."


def session_for(server, tmp_path, minilm, kind="auto", chat="qwen-7b", judge="embedding"):
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    cfg.set("server", "base_url", server.base_url)
    cfg.set("server", "kind", kind)
    cfg.set("models", "chat", chat)
    cfg.set("models", "vision", "qwen2-vl")
    cfg.set("memory", "judge", judge)
    s = ChatSession(cfg, tmp_path / "s.db", embed_fn=minilm)
    s.open()
    return s


def photo(path: Path, size=(640, 480), color=(200, 30, 30)) -> Path:
    Image.new("RGB", size, color).save(path, "JPEG")
    return path


def vision_responder(req):
    content = req["messages"][-1]["content"]
    if isinstance(content, list):  # the vision request
        assert content[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
        return Reply(DESCRIPTION)
    return Reply('{"action": "continue"}')


def model_calls(server) -> list[str]:
    out = []
    for r in server.state.requests:
        if r.path.startswith("/api/v1/models/load") or (r.path == "/api/generate" and r.body.get("keep_alive") != 0):
            out.append(f"load {r.body.get('model')}")
        elif r.path.startswith("/api/v1/models/unload"):
            out.append(f"unload {r.body.get('instance_id')}")
        elif r.path == "/api/generate":
            out.append(f"unload {r.body.get('model')}")
        elif r.path == "/v1/chat/completions" and isinstance(r.body["messages"][-1]["content"], list):
            out.append(f"describe with {r.body['model']}")
    return out


def test_lmstudio_swap_sequence_and_memory(server, tmp_path, minilm):
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "qwen2-vl": {"type": "vlm"}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm)
    backend = detect(s.config.base_url)
    assert isinstance(backend, LMStudioBackend)
    steps = []
    lines = ingest_images(s, ModelManager(backend, steps.append), str(photo(tmp_path / "bike.jpg")))
    assert [lv for _, lv in lines] == ["info"] and "Ingested bike.jpg" in lines[0][0]
    assert model_calls(server) == ["unload qwen-7b", "load qwen2-vl", "describe with qwen2-vl",
                                   "unload qwen2-vl", "load qwen-7b"]
    assert server.state.catalogue["qwen-7b"]["loaded"] == ["qwen-7b"]  # the text model is back
    assert all(st.ok for st in steps if hasattr(st, "ok"))
    x = s.tree.exchanges[-1]
    assert x.system.startswith("Image ingested: bike.jpg") and x.assistant == DESCRIPTION
    assert x.user == f"/ingest {tmp_path / 'bike.jpg'}"
    # a later question about the image finds it
    hits = s.search("what colour was the bicycle by the door?")
    assert hits and "red bicycle" in hits[0].text


def test_descriptions_are_placed_without_asking_the_unloaded_text_model(server, tmp_path, minilm):
    """With an LLM judge, storing each description asked the memory model — the text
    model, unloaded for the vision model: LM Studio loads it again beside the vision model
    (the swap's point lost), or it fails. Meanwhile embeddings place them; after, the LLM."""
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "qwen2-vl": {"type": "vlm"}}
    descriptions = iter(["A red bicycle by a blue door.", "A tax form for March.", "A cat asleep on a sofa."])

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            return Reply(next(descriptions))
        return Reply('{"action": "new", "name": "Pictures", "confidence": 0.9}')

    server.respond(respond)
    s = session_for(server, tmp_path, minilm, judge="llm")
    folder = tmp_path / "p"
    folder.mkdir()
    for i in range(3):
        photo(folder / f"p{i}.jpg", color=(i * 80, 10, 10))
    lines = ingest_images(s, ModelManager(detect(s.config.base_url)), str(folder))
    assert [t.split(" (")[0] for t, _ in lines] == ["Ingested p0.jpg", "Ingested p1.jpg", "Ingested p2.jpg"]
    order = [f"{r.path.rsplit('/', 1)[-1]} {(r.body or {}).get('model') or (r.body or {}).get('instance_id')}"
             for r in server.state.requests if r.path.startswith("/api/v1/models/") or "chat" in r.path]
    swapped_back = order.index("load qwen-7b")
    assert "completions qwen-7b" not in order[:swapped_back], order  # the text model not asked while unloaded
    assert [x.assistant for x in s.tree.exchanges] == ["A red bicycle by a blue door.", "A tax form for March.",
                                                       "A cat asleep on a sofa."]
    assert s.tree.judge == "llm" and s.tree.judges.mode == "llm"  # the memory model is asked again after


def test_lmstudio_does_not_load_a_second_instance(server, tmp_path, minilm):
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]},
                              "qwen2-vl": {"type": "vlm", "loaded": ["qwen2-vl"]}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm)
    ingest_images(s, ModelManager(detect(s.config.base_url)), str(photo(tmp_path / "a.jpg")))
    assert "load qwen2-vl" not in model_calls(server)


@pytest.mark.parametrize("chat_loaded", [True, False])
def test_a_vision_model_as_the_chat_model_is_not_swapped_out(server, tmp_path, minilm, chat_loaded):
    """With qwen2-vl as both chat and vision model it was unloaded, asked while unloaded,
    unloaded again ("no instance qwen2-vl", an error in the log) and loaded again."""
    server.state.catalogue = {"qwen2-vl": {"type": "vlm", "loaded": ["qwen2-vl"] if chat_loaded else []}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, chat="qwen2-vl")
    steps = []
    lines = ingest_images(s, ModelManager(detect(s.config.base_url), steps.append), str(photo(tmp_path / "a.jpg")))
    assert [lv for _, lv in lines] == ["info"], lines
    assert model_calls(server) == ["describe with qwen2-vl"]
    assert all(getattr(st, "ok", True) and getattr(st, "level", "info") != "error" for st in steps), steps


def test_a_vision_model_loaded_beside_the_text_model_is_used_as_it_is(server, tmp_path, minilm):
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]},
                              "qwen2-vl": {"type": "vlm", "loaded": ["qwen2-vl"]}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm)
    ingest_images(s, ModelManager(detect(s.config.base_url)), str(photo(tmp_path / "a.jpg")))
    assert model_calls(server) == ["describe with qwen2-vl"]  # the user's models stay as they were
    assert server.state.catalogue["qwen2-vl"]["loaded"] == ["qwen2-vl"]


def test_lmstudio_without_the_vision_model_says_so_before_touching_the_text_model(server, tmp_path, minilm):
    """LM Studio lacking models.vision: the text model was unloaded, the load refused
    ("cannot load qwen2-vl"), and the text model loaded again — half a minute for a 7B
    model, to learn the vision model was never there."""
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "llava-7b": {"type": "vlm"},
                              "nomic-embed": {"type": "embedding"}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm)
    lines = ingest_images(s, ModelManager(detect(s.config.base_url)), str(photo(tmp_path / "a.jpg")))
    assert lines == [("No vision model: LM Studio has no qwen2-vl (its vision models: llava-7b). Set models.vision "
                      "in the config (or NEXUS_VISION_MODEL) to one it has, or download one in LM Studio. (a.jpg not "
                      "described.)", "error")]
    assert model_calls(server) == []
    assert server.state.catalogue["qwen-7b"]["loaded"] == ["qwen-7b"]


def test_ollama_without_the_vision_model_says_so_before_touching_the_text_model(server, tmp_path, minilm):
    """Ollama lacking models.vision: the text model was unloaded, then "model 'qwen2-vl'
    not found", then the text model loaded again, for nothing."""
    server.state.catalogue = {"qwen-7b": {"loaded": ["qwen-7b"]}, "llava:latest": {}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, kind="ollama")
    lines = ingest_images(s, ModelManager(detect(s.config.base_url, "ollama")), str(photo(tmp_path / "a.jpg")))
    assert lines == [("No vision model: Ollama has no qwen2-vl (`ollama pull qwen2-vl` fetches it). Set models.vision "
                      "in the config (or NEXUS_VISION_MODEL) to a vision model it has (llava, qwen2.5vl…). (a.jpg not "
                      "described.)", "error")]
    assert model_calls(server) == [] and server.state.catalogue["qwen-7b"]["loaded"] == ["qwen-7b"]
    s.config.set("models", "vision", "llava")  # "llava" is "llava:latest"
    from nexus.ingest import vision_model_missing

    assert vision_model_missing(s, ModelManager(detect(s.config.base_url, "ollama")), "llava") == ""


def test_ollama_names_without_a_tag_are_their_latest(server, tmp_path, minilm):
    """`--model llama3.2` on Ollama, which lists "llama3.2:latest": the text model was not
    unloaded for the vision model (both in memory at once, the swap's whole point lost)."""
    server.state.catalogue = {"qwen:latest": {"loaded": ["qwen:latest"]}, "llava:latest": {}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, kind="ollama", chat="qwen")
    s.config.set("models", "vision", "llava")
    lines = ingest_images(s, ModelManager(detect(s.config.base_url, "ollama")), str(photo(tmp_path / "a.jpg")))
    assert [lv for _, lv in lines] == ["info"], lines
    assert model_calls(server) == ["unload qwen:latest", "load llava", "describe with llava", "unload llava",
                                   "load qwen"]
    assert server.state.catalogue["qwen:latest"]["loaded"] and not server.state.catalogue["llava:latest"]["loaded"]


def test_ollama_swap_sequence(server, tmp_path, minilm):
    server.state.catalogue = {"qwen-7b": {"loaded": ["qwen-7b"]}, "qwen2-vl": {}}
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, kind="ollama")
    backend = detect(s.config.base_url, "ollama")
    assert isinstance(backend, OllamaBackend)
    ingest_images(s, ModelManager(backend), str(photo(tmp_path / "b.jpg")))
    assert model_calls(server) == ["unload qwen-7b", "load qwen2-vl", "describe with qwen2-vl",
                                   "unload qwen2-vl", "load qwen-7b"]
    keep = [r.body for r in server.state.requests if r.path == "/api/generate" and r.body.get("keep_alive") == 0]
    assert {b["model"] for b in keep} == {"qwen-7b", "qwen2-vl"}


def test_a_server_without_load_control_is_just_asked(server, tmp_path, minilm):
    server.state.models = ["qwen-7b", "qwen2-vl"]
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, kind="openai")
    lines = ingest_images(s, ModelManager(detect(s.config.base_url, "openai")), str(photo(tmp_path / "c.jpg")))
    assert isinstance(detect(s.config.base_url, "openai"), NoLoadControl)
    assert model_calls(server) == ["describe with qwen2-vl"] and lines[0][1] == "info"


def test_a_server_without_load_control_that_lacks_the_vision_model_says_so(server, tmp_path, minilm):
    # llama.cpp's bundled server with its text model only: asked anyway, it answered nothing
    server.state.models = ["gemma-3-270m"]
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, kind="openai")
    n, steps = len(s.tree.exchanges), []
    lines = ingest_images(s, ModelManager(detect(s.config.base_url, "openai"), steps.append),
                          str(photo(tmp_path / "t14red.jpg")), steps.append)
    assert lines == [("No vision model: the server has gemma-3-270m only, not qwen2-vl. Set models.vision in the "
                      "config (or NEXUS_VISION_MODEL) to a vision model the server has, or use LM Studio or Ollama "
                      "with one. (t14red.jpg not described.)", "error")]
    assert model_calls(server) == [] and len(s.tree.exchanges) == n  # not asked, nothing stored
    assert not any("asking qwen2-vl directly" in getattr(st, "step", "") for st in steps)
    assert [st.ok for st in steps if hasattr(st, "ok")] == [False]


def test_a_server_that_does_not_list_its_models_is_asked_as_before(server, tmp_path, minilm, monkeypatch):
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm, kind="openai")

    def unlisted():
        raise RuntimeError("the server at … answered HTTP 404")

    monkeypatch.setattr(s, "list_models", unlisted)
    lines = ingest_images(s, ModelManager(detect(s.config.base_url, "openai")), str(photo(tmp_path / "c.jpg")))
    assert model_calls(server) == ["describe with qwen2-vl"] and lines[0][1] == "info"


@pytest.mark.parametrize("failure", ["load refused", "vision missing", "describe 500", "describe timeout"])
def test_failures_are_reported_and_the_text_model_comes_back(server, tmp_path, minilm, failure):
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "qwen2-vl": {"type": "vlm"}}
    if failure == "load refused":
        server.state.refuse_load = {"qwen2-vl"}
    if failure == "vision missing":
        del server.state.catalogue["qwen2-vl"]

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            if failure == "describe 500":
                return Reply(status=500)
            if failure == "describe timeout":
                return Reply(DESCRIPTION, delay=3)
        return vision_responder(req)

    server.respond(respond)
    s = session_for(server, tmp_path, minilm)
    s.config.set("ingest", "load_timeout", 1)
    n = len(s.tree.exchanges)
    lines = ingest_images(s, ModelManager(detect(s.config.base_url)), str(photo(tmp_path / "d.jpg")))
    assert lines and lines[-1][1] == "error", lines
    text = " ".join(t for t, _ in lines)
    expected = {"load refused": "cannot load qwen2-vl", "vision missing": "LM Studio has no qwen2-vl",
                "describe 500": "HTTP 500", "describe timeout": "did not answer in time"}[failure]
    assert expected in text
    assert server.state.catalogue["qwen-7b"]["loaded"] == ["qwen-7b"]  # back before control returns
    assert len(s.tree.exchanges) == n  # nothing half-stored


def test_a_server_that_stops_answering_is_not_asked_about_every_other_image(server, tmp_path, minilm):
    """A folder against a server that took the request and never answered: each image
    waited the whole timeout in turn (200 images, 200 × 180 s)."""
    server.state.models = ["qwen-7b", "qwen2-vl"]
    server.respond(lambda req: Reply(DESCRIPTION, delay=3) if isinstance(req["messages"][-1]["content"], list)
                   else vision_responder(req))
    s = session_for(server, tmp_path, minilm, kind="openai")
    s.config.set("ingest", "load_timeout", 0.5)
    folder = tmp_path / "pics"
    folder.mkdir()
    for i in range(3):
        photo(folder / f"p{i}.jpg")
    started = time.monotonic()
    lines = ingest_images(s, ModelManager(detect(s.config.base_url, "openai")), str(folder))
    assert time.monotonic() - started < 2.5
    assert model_calls(server) == ["describe with qwen2-vl"]
    assert lines[-1] == ("Ingest stopped: the server is not answering, so the other 2 images were not sent.", "error")
    assert "Could not describe p0.jpg" in lines[-2][0]


def _png_header(w: int, h: int) -> bytes:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 1024)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("kind, problem", [
    ("zero", "empty (0 bytes)"),
    ("truncated", "truncated or damaged"),
    ("text", "not an image"),
    ("bomb", "400 megapixels, over the 50-megapixel limit"),
    ("bomb-ish", "8000×8000 is 64 megapixels"),
    ("huge", "over the 20 MB limit"),
    ("huge-text", "not an image"),  # a 286 MB log was "over the 20 MB limit" (a trial)
    ("missing", "no such file"),
])
def test_bad_images_get_a_clear_error(tmp_path, kind, problem):
    p = tmp_path / f"{kind}.png"
    if kind == "zero":
        p.write_bytes(b"")
    elif kind == "truncated":
        photo(tmp_path / "full.jpg", (800, 600))
        data = (tmp_path / "full.jpg").read_bytes()
        p = tmp_path / "truncated.jpg"
        p.write_bytes(data[: len(data) // 3])
    elif kind == "text":
        p.write_text("this is a text file pretending to be a png")
    elif kind == "bomb":
        p.write_bytes(_png_header(20000, 20000))  # tiny file, 400 megapixels when decoded
    elif kind == "bomb-ish":  # under Pillow's own limit, over ours
        p.write_bytes(_png_header(8000, 8000))
    elif kind == "huge":
        with open(p, "wb") as fh:
            fh.write(_png_header(10, 10))
            fh.seek(21 * 1024 * 1024)
            fh.write(b"\x00")
    elif kind == "huge-text":
        p = tmp_path / "server.log"
        with open(p, "w") as fh:
            fh.write("2026-12-06 08:00:01 INFO started\n")
            fh.seek(21 * 1024 * 1024)
            fh.write("the end\n")
    with pytest.raises(ImageError, match=re.escape(problem)) as err:
        prepare(p, 1024, 20, 50)
    assert str(p) in str(err.value)


def test_images_are_oriented_downscaled_and_re_encoded(tmp_path):
    img = Image.new("RGB", (3000, 1000), (0, 128, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90°
    p = tmp_path / "rot.jpg"
    img.save(p, "JPEG", exif=exif)
    out = prepare(p, 1024, 20, 50)
    assert out.height == 1024 and out.width in (341, 342)  # turned upright, longest side 1024
    assert out.mime == "image/jpeg"
    webp = tmp_path / "t.webp"
    Image.new("RGBA", (100, 100), (0, 0, 0, 0)).save(webp, "WEBP")
    assert prepare(webp, 1024, 20, 50).mime == "image/png"  # never a webp data URL


def test_bad_image_in_a_folder_does_not_stop_the_others(server, tmp_path, minilm):
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "qwen2-vl": {"type": "vlm"}}
    server.respond(vision_responder)
    folder = tmp_path / "imgs"
    folder.mkdir()
    photo(folder / "good.jpg")
    (folder / "bad.png").write_bytes(b"")
    s = session_for(server, tmp_path, minilm)
    lines = ingest_images(s, ModelManager(detect(s.config.base_url)), str(folder))
    assert [lv for _, lv in lines] == ["error", "info"]


async def test_ingest_in_the_app_says_the_server_has_no_vision_model(server, tmp_path, minilm, monkeypatch):
    from test_nexus_app import log_text, make_config, notices, ready, type_and_send, wait_for

    from nexus.app import NexusApp

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    server.state.models = ["gemma-3-270m"]
    server.respond(vision_responder)
    cfg = make_config(server.base_url, tmp_path, {("server", "kind"): "openai", ("models", "chat"): "gemma-3-270m",
                                                  ("models", "vision"): "qwen2-vl-2b-instruct"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"/ingest {photo(tmp_path / 't14red.jpg')}")
        await wait_for(pilot, lambda: "/ingest finished" in notices(app))
        said = notices(app)
        assert ("No vision model: the server has gemma-3-270m only, not qwen2-vl-2b-instruct. Set models.vision"
                in said and "(t14red.jpg not described.)" in said)
        assert "empty description" not in said and "asking qwen2-vl-2b-instruct directly" not in log_text(app)
        assert model_calls(server) == [] and not app.vision_busy


async def test_ingest_waits_for_the_reply_streaming(server, tmp_path, minilm, monkeypatch):
    """/ingest typed while a reply streamed unloaded the chat model under it, and filed the
    image before the message being answered (trial)."""
    from test_nexus_app import make_config, notices, ready, type_and_send, wait_for

    from nexus.app import NexusApp

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "qwen2-vl": {"type": "vlm"}}
    story = "Once upon a time there was a long story told slowly word by word until the end."

    def respond(req):
        if isinstance(req["messages"][-1]["content"], list):
            return Reply(DESCRIPTION)
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        return Reply(story, chunk_delay=0.1)

    server.respond(respond)
    cfg = make_config(server.base_url, tmp_path, {("models", "chat"): "qwen-7b", ("models", "vision"): "qwen2-vl"})
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "Tell me something long.")
        await wait_for(pilot, lambda: app.turn is not None and app.current_reply is not None
                       and "Once upon" in app.current_reply.text)
        await type_and_send(pilot, app, f"/ingest {photo(tmp_path / 'red.jpg')}")
        assert "/ingest waits for the reply" in notices(app)
        assert model_calls(server) == []  # nothing swapped while the reply streams
        await wait_for(pilot, lambda: "/ingest finished" in notices(app), timeout=40)
        xs = app.session.tree.exchanges
        assert [x.user for x in xs][0] == "Tell me something long." and xs[0].assistant == story
        assert len(xs) == 2 and DESCRIPTION in xs[1].assistant
        assert model_calls(server)[:2] == ["unload qwen-7b", "load qwen2-vl"]


def test_deep_and_float_images_keep_their_picture_and_a_cut_png_is_damaged(tmp_path):
    """A 16-bit scan reached the vision model 99.6 % white and a float TIFF black; the
    first 40 bytes of a PNG were "not an image" (trial)."""
    import numpy as np

    ramp = np.tile(np.linspace(0, 59994, 256), (64, 1)).astype(np.uint16)
    Image.fromarray(ramp).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")
    Image.fromarray(np.tile(np.linspace(0, 1, 256, dtype=np.float32), (64, 1)), "F").save(tmp_path / "f.tif")
    for name in ("deep.png", "f.tif"):
        out = prepare(tmp_path / name, 1024, 20, 50)
        import base64
        import io

        pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(out.data_url.split(",", 1)[1]))).convert("L"),
                            dtype=float)
        assert pixels[:, :16].mean() < 40 and pixels[:, -16:].mean() > 200, (name, pixels.mean())
    full = photo(tmp_path / "whole.png", (64, 64))
    Image.new("RGB", (64, 64), (1, 2, 3)).save(full, "PNG")
    (tmp_path / "cut.png").write_bytes(full.read_bytes()[:40])
    with pytest.raises(ImageError, match="truncated or damaged"):
        prepare(tmp_path / "cut.png", 1024, 20, 50)


def test_a_megapixel_limit_above_pillows_own_is_the_one_that_counts(tmp_path, monkeypatch):
    """Set above Pillow's own cap, the limit read "196 megapixels, over the 400-megapixel
    limit" (trial). Pillow's cap is made small here so that the image stays small."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1_000_000)
    p = tmp_path / "wide.png"
    Image.new("RGB", (1600, 1600), (0, 90, 200)).save(p)  # 2.56 MP: over twice Pillow's 1 MP
    assert prepare(p, 1024, 20, 3).width == 1024
    with pytest.raises(ImageError, match="1600×1600 is 3 megapixels, over the 2-megapixel limit"):
        prepare(p, 1024, 20, 2)


@pytest.mark.parametrize("refused", [{"qwen2-vl", "qwen-7b"}, {"qwen-7b"}])
def test_a_text_model_that_does_not_come_back_is_not_said_to(server, tmp_path, minilm, refused):
    """The load of the vision model refused and then the text model's too: the chat said
    "Ingest stopped: … The text model qwen-7b was loaded again." while the log said
    "could not restore the text model" (a trial); described, then the text model refused,
    the chat said nothing of it."""
    server.state.catalogue = {"qwen-7b": {"type": "llm", "loaded": ["qwen-7b"]}, "qwen2-vl": {"type": "vlm"}}
    server.state.refuse_load = refused
    server.respond(vision_responder)
    s = session_for(server, tmp_path, minilm)
    lines = ingest_images(s, ModelManager(detect(s.config.base_url)), str(photo(tmp_path / "d.jpg")))
    text = " ".join(t for t, _ in lines)
    assert server.state.catalogue["qwen-7b"]["loaded"] == []  # it is not back
    assert "loaded again." not in text.replace("could not be loaded again", ""), lines
    assert lines[-1] == ("The text model qwen-7b could not be loaded again (POST "
                         f"{server.root_url}/api/v1/models/load answered HTTP 400: {{\"error\": \"cannot load "
                         "qwen-7b\"}): load it in the server before you send a message.", "error")

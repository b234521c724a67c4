"""``/ingest``: validate images, swap in the vision model, describe them into memory."""

from __future__ import annotations

import base64
import glob
import io
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trace_core import prompts
from trace_core.llm import completion_content

from . import events as ev
from .abandon import Abandoned, call_abandonable
from .keys import key_label
from .turn import reply_problem

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"}


class ImageError(ValueError):
    pass


@dataclass
class PreparedImage:
    path: Path
    width: int
    height: int
    data_url: str
    mime: str


def expanded(target: str) -> str:
    """``~`` and environment variables, as a shell would: "$HOME/photo.png" was "no such
    file" (a trial). A path that exists as written is kept as written ("$5 receipt.png")."""
    literal = os.path.expanduser(target)
    return literal if "$" not in literal or os.path.exists(literal) else os.path.expandvars(literal)


def find_images(target: str) -> list[Path]:
    """A file, a folder (its images), or a glob. A file that exists is itself, whatever
    its name holds: "photo[1].png" read as a glob found nothing (a trial)."""
    p = Path(expanded(target))
    if p.is_dir():
        return sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_EXTS and q.is_file())
    if p.is_file():
        return [p]
    if any(ch in target for ch in "*?["):
        # "**" any folders deep, as in a shell with globstar: read as "*", "~/**/*.png" missed
        # the pictures in ~ itself and two folders down (a trial)
        # its images, as a folder's: "~/Downloads/*" said "Skipped …: not an image" for every
        # document beside them (a trial)
        return sorted(q for q in map(Path, glob.glob(str(p), recursive=True))
                      if q.suffix.lower() in IMAGE_EXTS and q.is_file())
    return [p]


# the first bytes of the formats Pillow reads most (PNG, JPEG, GIF, WebP, BMP, TIFF)
SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*")


def image_signature(path: Path) -> bool:
    """Whether the file starts as an image does (a truncated PNG is no "text file")."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return head.startswith(SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def not_an_image(path: Path) -> str:
    return (f"{path}: not an image — /ingest reads images (PNG, JPEG, GIF, WebP…) and files the vision "
            "model's description of each; text can be pasted as a message")


def _opens_as_image(path: Path) -> bool:
    """Pillow knows the file's format from its header (nothing decoded)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Image.open(path).close()
    except Exception:  # unidentified, a bomb, unreadable: the caller's next check says which
        return False
    return True


def eight_bit(im):
    """16-bit and floating-point pixels scaled into 8 bits, grey. Pillow's ``convert``
    clips them: a 16-bit scan came out 99.6 % white and a float TIFF black, and the
    model's description of a blank picture was filed as the image (trial)."""
    if im.mode not in ("I", "F") and not im.mode.startswith("I;16"):
        return im
    import numpy as np
    from PIL import Image

    a = np.asarray(im, dtype=np.float64)
    lo, hi = float(a.min()), float(a.max())
    if im.mode == "F":
        if lo >= 0 and hi <= 1:  # the usual range of a float image
            lo, hi = 0.0, 1.0
    else:  # integers: the range of their bit depth
        lo = 0.0
        hi = 255.0 if hi <= 255 else 65535.0 if hi <= 65535 else hi
    scaled = np.clip((a - lo) / ((hi - lo) or 1.0) * 255.0, 0, 255).round().astype(np.uint8)
    return Image.fromarray(scaled, "L")


def prepare(path: Path, max_side: int, max_file_mb: float, max_megapixels: float) -> PreparedImage:
    """Validate and re-encode one image, or raise ``ImageError`` saying what is wrong."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not path.exists():
        raise ImageError(f"{path}: no such file")
    if not path.is_file():
        raise ImageError(f"{path}: not a file")
    size = path.stat().st_size
    if size == 0:
        raise ImageError(f"{path}: the file is empty (0 bytes)")
    if size > max_file_mb * 1024 * 1024:
        if not image_signature(path) and not _opens_as_image(path):  # a 286 MB log was "over the limit" (a trial)
            raise ImageError(not_an_image(path))
        raise ImageError(f"{path}: {size / 1024 / 1024:.1f} MB, over the {max_file_mb:g} MB limit")
    limit = int(max_megapixels * 1_000_000)
    # Pillow's own bomb check follows the setting: at its default it refused 180 MP with
    # "over the 400-megapixel limit" when 400 was set (it only warns between 1× and 2×)
    Image.MAX_IMAGE_PIXELS = limit
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(path)
        with im:
            w, h = im.size  # read from the header: nothing decoded yet
            if w * h > limit:
                raise ImageError(f"{path}: {w}×{h} is {w * h / 1e6:.0f} megapixels, over the "
                                 f"{max_megapixels:g}-megapixel limit (a decompression bomb?)")
            im.verify()
        with Image.open(path) as im:
            im.load()
            im = eight_bit(ImageOps.exif_transpose(im))
            has_alpha = im.mode in ("RGBA", "LA", "P") and ("transparency" in im.info or im.mode != "P")
            im = im.convert("RGBA" if has_alpha else "RGB")
            im.thumbnail((max_side, max_side))
            buf = io.BytesIO()
            # LM Studio refuses webp data URLs: PNG (transparency) or JPEG
            if has_alpha:
                im.save(buf, "PNG", optimize=True)
                mime = "image/png"
            else:
                im.save(buf, "JPEG", quality=90)
                mime = "image/jpeg"
            width, height = im.size
    except ImageError:
        raise
    except UnidentifiedImageError:
        if image_signature(path):  # an image's first bytes, but no image Pillow can read: cut short
            raise ImageError(f"{path}: the image is truncated or damaged (its header is incomplete)") from None
        raise ImageError(not_an_image(path)) from None
    except Image.DecompressionBombError as exc:  # Pillow refuses it in open() already
        import re

        m = re.search(r"\((\d+) pixels\)", str(exc))
        mp = f"{int(m.group(1)) / 1e6:.0f} megapixels" if m else "too many pixels"
        raise ImageError(f"{path}: {mp}, over the {max_megapixels:g}-megapixel limit "
                         "(a decompression bomb?)") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"{path}: the image is truncated or damaged ({exc})") from None
    data = base64.b64encode(buf.getvalue()).decode()
    return PreparedImage(path, width, height, f"data:{mime};base64,{data}", mime)


def describe(client, model: str, image: PreparedImage, timeout: float) -> str:
    resp = client.chat.completions.create(
        model=model, max_tokens=400, temperature=0.2, timeout=timeout,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": prompts.VISION_DESCRIBE},
            {"type": "image_url", "image_url": {"url": image.data_url}},
        ]}],
    )
    text = (completion_content(resp, str(client.base_url)) or "").strip()
    if not text:
        raise RuntimeError("the vision model returned an empty description")
    return text


def server_gone(exc: BaseException) -> bool:
    """The server did not answer at all (unreachable, or silent past the timeout), as
    opposed to refusing this one image."""
    from openai import APIConnectionError

    return isinstance(exc, APIConnectionError)  # APITimeoutError is one


NO_IMAGES = "No images found at"  # the whole answer of a run with nothing to describe


def ingest_images(session, manager, target: str, emit=lambda e: None, *, on_line=None, on_progress=None,
                  stop=lambda: False, on_vision=None, quitting=lambda: False) -> list[tuple[str, str]]:
    """Describe every image of ``target`` into memory. Returns ``(message, level)`` lines;
    ``on_line(message, level)`` gets each as it happens and ``on_progress(text)`` a
    status line per step. ``stop()`` is asked between files: True ends the run (the
    text model is loaded back). ``on_vision(True/False)`` brackets the model swap.
    ``quitting()`` true (Nexus is closing): the description or model load in flight is
    given up at once (nothing of it stored) and the swap back is not waited for."""
    cfg = session.config.section("ingest")
    vision_model = session.config.section("models").vision
    esc = key_label("cancel", session.config.keys)
    lines: list[tuple[str, str]] = []

    def say(text: str, level: str = "info") -> None:
        lines.append((text, level))
        if on_line is not None:
            on_line(text, level)

    def status(text: str) -> None:
        if on_progress is not None:
            on_progress(text)

    paths = find_images(target)
    if not paths:
        say(f"{NO_IMAGES} {target}.", "warning")
        return lines
    prepared: list[PreparedImage] = []
    for k, p in enumerate(paths, 1):  # validate everything before touching the models
        if stop():
            say(f"Ingest cancelled while checking the images ({k - 1} of {len(paths)} checked); nothing was "
                "described.", "warning")
            return lines
        status(f"/ingest: checking {k:,}/{len(paths):,} — {p.name} ({esc} cancels)")
        try:
            prepared.append(prepare(p, cfg.max_side, cfg.max_file_mb, cfg.max_megapixels))
        except ImageError as exc:
            say(f"Skipped {exc}", "error")
            emit(ev.Notice(f"ingest: {exc}", "error"))
    if not prepared:
        return lines
    text_model = session.model or call_abandonable(session.resolve_model, give_up=quitting, name="list models")
    missing = vision_model_missing(session, manager, vision_model, quitting)
    if missing:  # asked anyway, a text model answers an image with nothing (llama.cpp's bundled server)
        names = prepared[0].path.name if len(prepared) == 1 else f"{len(prepared)} images"
        say(f"{missing} ({names} not described.)", "error")
        emit(ev.ModelStep(f"find {vision_model} on the server", 0.0, False, missing))
        return lines
    timeout = cfg.load_timeout
    done = cancelled = 0
    given_up = False
    if on_vision is not None:
        on_vision(True)
    try:
        status(f"/ingest: loading {vision_model} (messages you send wait for the text model)")
        with manager.vision(text_model, vision_model, give_up=quitting), placed_without(session, text_model, manager):
            for k, img in enumerate(prepared, 1):
                if stop():
                    cancelled = len(prepared) - k + 1
                    status(f"/ingest: cancelled — loading {text_model} again")
                    break
                emit(ev.Progress("ingest", k - 1, len(prepared)))
                status(f"/ingest: describing {k:,}/{len(prepared):,} — {img.path.name} ({esc} cancels)")
                started = time.perf_counter()
                try:
                    text = call_abandonable(describe, session.client, vision_model, img, timeout,
                                            give_up=quitting, name=f"describe {img.path.name}")
                except Abandoned:
                    given_up = True
                    break
                except Exception as exc:
                    problem = reply_problem(exc, session.config.base_url)
                    say(f"Could not describe {img.path.name}: {problem}", "error")
                    emit(ev.ModelStep(f"describe {img.path.name}", time.perf_counter() - started, False, problem))
                    if server_gone(exc) and k < len(prepared):
                        # each of the others waited as long: a folder of 200 against a server that
                        # stopped answering was 200 × the timeout (a trial)
                        left = len(prepared) - k
                        say(f"Ingest stopped: the server is not answering, so the other {left} image"
                            f"{'s were' if left != 1 else ' was'} not sent.", "error")
                        break
                    continue
                emit(ev.ModelStep(f"describe {img.path.name}", time.perf_counter() - started))
                note = f"Image ingested: {img.path.name} ({img.width}×{img.height}) described by {vision_model}."
                session.remember(f"/ingest {img.path}", text, system=note)
                done += 1
                say(f"Ingested {img.path.name} ({k}/{len(prepared)}): {text[:160]}{'…' if len(text) > 160 else ''}")
            if not cancelled and not given_up:
                status(f"/ingest: loading {text_model} again")
    except Abandoned:
        given_up = True
    except Exception as exc:  # load refused, server down: the manager has tried to restore the text model
        say(f"Ingest stopped: {exc}." + ("" if getattr(manager, "not_restored", "") else
                                         f" The text model {text_model} was loaded again."), "error")
    finally:
        if on_vision is not None:
            on_vision(False)
    if getattr(manager, "not_restored", "") and not given_up:
        say(f"The text model {text_model} could not be loaded again ({manager.not_restored}): load it in the "
            "server before you send a message.", "error")
    if given_up:
        say(f"Ingest stopped: Nexus is closing; {done} described and stored.", "warning")
    elif cancelled:
        say(f"Ingest cancelled: {done} described, {cancelled} not" + ("." if getattr(manager, "not_restored", "")
            else f"; the text model {text_model} is loaded again."), "warning")
    return lines


@contextmanager
def placed_without(session, text_model: str, manager):
    """While the text model is swapped out, descriptions are placed, named and summarised
    by embeddings when the memory model is that text model: the LLM judge asked it, unloaded
    — LM Studio loads it again beside the vision model, the swap's point lost (a trial)."""
    from .models import NoLoadControl

    judges = getattr(session.tree, "judges", None)
    if (judges is None or isinstance(getattr(manager, "backend", None), NoLoadControl)
            or session.memory_model() != text_model):
        yield
        return
    mode, judges.mode = judges.mode, "embedding"
    try:
        yield
    finally:
        judges.mode = mode


def vision_model_missing(session, manager, vision_model: str, quitting=lambda: False) -> str:
    """Why ``vision_model`` cannot be asked, or ``""``: on a server without load control
    (it is named in the request as it is) that lists its models without it. A server that
    does not list them is asked as before; LM Studio and Ollama load it (or say why not)."""
    from .models import LMStudioBackend, NoLoadControl, OllamaBackend

    backend = getattr(manager, "backend", None)
    if isinstance(backend, LMStudioBackend):
        return lmstudio_vision_missing(backend, vision_model, quitting)
    if isinstance(backend, OllamaBackend):
        return ollama_vision_missing(backend, vision_model, quitting)
    if not isinstance(backend, NoLoadControl):
        return ""
    try:
        listed = call_abandonable(session.list_models, give_up=quitting, name="list models")
    except Abandoned:
        raise
    except Exception:  # not listed: ask, and let the answer say
        return ""
    if vision_model in listed:
        return ""
    if not listed:
        has = "the server lists no models"
    else:
        shown = ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")
        has = f"the server has {shown}{' only' if len(listed) <= 5 else ''}"
    return (f"No vision model: {has}, not {vision_model}. Set models.vision in the config (or "
            "NEXUS_VISION_MODEL) to a vision model the server has, or use LM Studio or Ollama with one.")


def _listed(list_models, quitting) -> list | None:
    """The server's models, or None when it cannot say (the load then says why, if it fails)."""
    try:
        return call_abandonable(list_models, give_up=quitting, name="list models")
    except Abandoned:
        raise
    except Exception:
        return None


def lmstudio_vision_missing(backend, vision_model: str, quitting=lambda: False) -> str:
    """Why LM Studio cannot load ``vision_model`` ("" when it has it, or cannot say): its
    catalogue lists every model it has. Asked to load one it lacks, the text model was
    unloaded first and loaded again after (a 7B model: half a minute), for nothing."""
    models = _listed(backend.catalogue, quitting)
    if models is None:
        return ""
    if any(m.get("key") == vision_model for m in models if isinstance(m, dict)):
        return ""
    vision = [m.get("key", "") for m in models if isinstance(m, dict) and (m.get("capabilities") or {}).get("vision")]
    has = (f"its vision models: {', '.join(vision[:5])}{' …' if len(vision) > 5 else ''}" if vision
           else "it has no vision model")
    return (f"No vision model: LM Studio has no {vision_model} ({has}). Set models.vision in the config (or "
            "NEXUS_VISION_MODEL) to one it has, or download one in LM Studio.")


def ollama_vision_missing(backend, vision_model: str, quitting=lambda: False) -> str:
    """Why Ollama cannot load ``vision_model`` ("" when it has it, or cannot say), before
    the text model is unloaded for it ("model 'qwen2-vl' not found" came after)."""
    names = _listed(backend.names, quitting)
    if names is None:
        return ""
    # "llava" is "llava:latest"
    if any(n == vision_model or n == f"{vision_model}:latest" for n in names):
        return ""
    return (f"No vision model: Ollama has no {vision_model} (`ollama pull {vision_model}` fetches it). Set "
            "models.vision in the config (or NEXUS_VISION_MODEL) to a vision model it has (llava, qwen2.5vl…).")


def model_manager_for(session, existing, emit, quitting=lambda: False):
    """The model manager /ingest swaps models through: ``existing`` (kept from the last
    /ingest) or a new one for the session's server, whose kind is detected first (given up
    with ``Abandoned`` when Nexus is closing)."""
    if existing is not None:
        return existing
    from .models import ModelManager, detect

    kind = call_abandonable(detect, session.config.base_url, session.config.section("server").kind,
                            session.config.section("ingest").load_timeout, give_up=quitting,
                            name="detect the server kind")
    return ModelManager(kind, emit)

"""llama-cpp-python's OpenAI-compatible server, speaking Gemma's own chat format.

The packaged gemma-3-270m GGUF carries no chat template, so llama-cpp-python falls
back to Llama-2's ``[INST] <<SYS>>`` markers (which the model then echoes), and its
built-in ``gemma`` format drops system messages, and TRACE's memory block with them.
This module registers ``gemma-system``: Gemma's turn markers with the system text
folded into the first user turn, as Gemma's own template does. It also bounds every
reply: a default ``max_tokens`` when a request names none (llama.cpp would otherwise
generate until the context is full), the usual repetition penalty as a floor, a
loop guard that stops a reply repeating the same run of tokens, and stop strings where
the bundled base model ends its turn in words (" mendatang"), starts writing the
prompt's system or user lines out again, or a next turn ("User: …") of its own. A
reply those stops leave saying nothing ("-" of a memory line) is sampled again.

    python -m trace_core.local_server --model PATH [llama_cpp.server flags]
        [--reply_max_tokens 512] [--min_repeat_penalty 1.1] [--reply_stops True|False]
        [--empty_retries 8]

Importing this module does not import llama_cpp; ``register()`` does.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .prompts import SYSTEM_BOILERPLATE
from .textutil import says_something, without_echo

CHAT_FORMAT = "gemma-system"
START, END = "<start_of_turn>", "<end_of_turn>"
REPLY_MAX_TOKENS = 512
MIN_REPEAT_PENALTY = 1.1
# a run of at least LOOP_MIN_PERIOD tokens repeated LOOP_REPEATS times back to back is a loop:
# natural text does not do that, a tiny model stuck in a loop does it for thousands of tokens
LOOP_MIN_PERIOD, LOOP_MAX_PERIOD, LOOP_REPEATS = 8, 96, 4
# a reply that says again, word for word, a run of REPEATED_RUN tokens it has already said is
# cycling through paragraphs (gemma-270m's cycles run 200-300 tokens: too long for the rule above
# within a reply's max_tokens); prose and code do not repeat 48 tokens verbatim
REPEATED_RUN = 48
# The bundled gemma-3-270m is a base model: it closes a turn with the word " mendatang" where
# <end_of_turn> belongs (then "user" or "model" and the prompt's turns again), in 12 of 12
# probe replies; a reply stops there. An Indonesian reply using the word is cut at it.
TURN_END_STANDINS = (" mendatang",)
# a reply that starts saying the prompt's system or user text again is writing the prompt's
# turns out: stopped at the first ECHO_CHARS characters of any such line (lines this long only;
# at most ECHO_STOPS of them: llama_cpp checks every stop string after each token)
ECHO_CHARS, ECHO_STOPS = 32, 48
# more samples for a reply that says nothing: with a memory block in the prompt, 22 of
# 36 first tries said nothing; after 1 or 8 more, 20 or 3 of 36 (bench.local_replies),
# each stopped try costing a fraction of a second
EMPTY_RETRIES = 8


def _text(content) -> str:
    """Message content as text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    # turn markers inside a message would end its turn early: they are structure, not text
    return text.replace(START, "").replace(END, "")


def format_prompt(messages: Sequence[dict]) -> str:
    """Gemma's turns; system (and developer) text is prepended to the next user turn,
    separated by a blank line; assistant turns are ``model`` turns; tool results are user turns.
    BOS is added by the tokenizer."""
    turns: list[tuple[str, str]] = []
    system: list[str] = []
    for m in messages:
        role, text = m.get("role"), _text(m.get("content"))
        if role in ("system", "developer"):
            if text.strip():
                system.append(text.strip())
            continue
        if role == "assistant":
            turns.append(("model", text.strip()))
            continue
        if system:
            text = "\n\n".join([*system, text.strip()])
            system = []
        turns.append(("user", text.strip()))
    if system:  # system text and no user turn after it: it still reaches the model
        turns.append(("user", "\n\n".join(system)))
    return "".join(f"{START}{role}\n{text}{END}\n" for role, text in turns) + f"{START}model\n"


def echo_stops(messages: Sequence[dict], chars: int = ECHO_CHARS, limit: int = ECHO_STOPS) -> list[str]:
    """Stop strings: the first ``chars`` characters of each line at least that long of the
    newest user message, then of the system text (markers removed, as ``format_prompt``
    removes them); at most ``limit``."""
    users = [m for m in messages if m.get("role") == "user"][-1:]
    system = [m for m in messages if m.get("role") in ("system", "developer")]
    out: list[str] = []
    for m in users + system:
        for line in _text(m.get("content")).splitlines():
            line = line.strip()
            if len(line) >= chars and line[:chars] not in out:
                out.append(line[:chars])
                if len(out) == limit:
                    return out
    return out


def header_stops(messages: Sequence[dict], chars: int = ECHO_CHARS) -> list[str]:
    """Stop strings at the prompt's fixed headers too short for ``echo_stops`` ("Most
    recent exchanges:", which ended many stored replies in a trial), said at a line's
    start; their stem, so a singular "Most recent exchange:" stops as well."""
    system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    lines = {line.strip() for line in system.splitlines()}
    return ["\n" + re.sub(r"s?:$", "", h) for h in SYSTEM_BOILERPLATE if len(h) < chars and h in lines]


# the memory block's date lines ("[2026-12-04]" alone on a line): a reply that writes one
# at a line's start is writing the block out again ("…It has a clea…\n[2026-12-04]\n-",
# stored as an answer in a trial)
_BLOCK_DATE_LINE = re.compile(r"^\[(\d{4})-\d{1,2}-\d{1,2}\]$", re.MULTILINE)


def date_stops(messages: Sequence[dict]) -> list[str]:
    """Stop strings at a date line of the system text's kind begun at a line's start: its
    "[year-" for each year the system text's date lines name."""
    system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    return [f"\n[{year}-" for year in dict.fromkeys(_BLOCK_DATE_LINE.findall(system))]


# the role labels Nexus's prompts write turns with (the memory block, the recent exchanges):
# a base model that has read "User: …" lines goes on writing "User: …" turns of its own
ROLE_LABELS = ("User", "Assistant")
LABELLED_LINE = re.compile(r"(?:^|^- |\| )(" + "|".join(ROLE_LABELS) + r"): ", re.MULTILINE)


def label_stops(messages: Sequence[dict]) -> list[str]:
    """Stop strings at a role label the system text writes turns with ("User: …"), said
    after a space or a line break: the reply is writing the next turn of the dialogue. A
    reply that opens with the label is not cut (it would be empty)."""
    system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    labels = dict.fromkeys(m.group(1) for m in LABELLED_LINE.finditer(system))
    # the bundled model writes them lower case as often ("\nassistant:"); stops match case
    return [f"{sep}{word}:" for label in labels for word in (label, label.lower()) for sep in ("\n", " ")]


# gemma-3-270m writes Gemma's turn change ("<end_of_turn>\n<start_of_turn>model") as a junk
# word glued to the next turn's role: "łęmauser", "LoginPagemodel", "tahunmodel", "遷移model"
# (almost every reply of a re-trial), at a line's end, and then writes that turn. English
# words that end so are no marker.
ROLE_ENDINGS = ("user", "model")
WORDS_ENDING_SO = frozenset({"abuser", "accuser", "amuser", "diffuser", "misuser", "nonuser", "peruser",
                             "refuser", "superuser", "remodel", "supermodel"})
_LINE_END_WORD = re.compile(r"(\S+)[ \t]*\n")
_LAST_WORD = re.compile(r"\S+[ \t]*\Z")


def turn_marker(word: str) -> bool:
    """Whether ``word``, the last of a line, is a turn change written as a word."""
    low = word.lower()
    ending = next((e for e in ROLE_ENDINGS if low.endswith(e)), None)
    if ending is None or len(low) == len(ending):
        return False  # "user" alone is a word of the reply (a role label at a line start is cut elsewhere)
    return low.lstrip("\"'*_([{-") not in WORDS_ENDING_SO


# ... or, without the role, as a lone ideograph glued to a sentence's end in a reply in
# Latin letters: "…for a few weeks.辍 I have no extra food…", "…when my marathon is over?辍"
# (4 of 10 replies of a real-terminal run), where the next turn starts
# ("…I should.彼女の" then "user model" on a line of its own: 11 of 14 replies of a trial)
_GLUED_IDEOGRAPHS = re.compile(r"[.?!]([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]{1,3})(?=\s|\Z)")
# ... or as the role names alone on a line ("user model", "model"): no line of a reply is that
# a line begun with a role name, and a word at most after it: held until the line ends
_ROLE_WORDS_BEGUN = re.compile(r"(?<![^\n])[ \t]*(?:user|model)(?:[ \t]+\S*)?[ \t]*\Z", re.I)
_ROLE_WORDS_LINE = re.compile(r"(?:^|\n)[ \t]*((?:user|model)(?:[ \t]+(?:user|model))?)[ \t]*(?=\n|\Z)", re.I)
_LETTER = re.compile(r"[^\W\d_]")
_LATIN_LETTER = re.compile(r"[A-Za-z\u00c0-\u024f]")


def glued_ideograph_at(text: str) -> int | None:
    """Where a lone ideograph glued to a sentence's end starts, in a reply written in
    Latin letters (nine in ten of its letters); None: none. A reply in Chinese or
    Japanese, or one quoting a word of it after a space, has none."""
    for m in _GLUED_IDEOGRAPHS.finditer(text):
        letters = _LETTER.findall(text[: m.start(1)])
        if len(letters) >= 20 and sum(bool(_LATIN_LETTER.match(c)) for c in letters) >= 0.9 * len(letters):
            return m.start(1)
    return None


def marker_at(text: str, ended: bool = False) -> int | None:
    """Where the first turn change written as a word starts in ``text``: a marker word at
    a line's end (``ended``: the text's end is one), or a glued ideograph
    (``glued_ideograph_at``). None: none."""
    found = [glued_ideograph_at(text)]
    for m in _ROLE_WORDS_LINE.finditer(text):
        if ended or m.end() < len(text):  # the line has ended: "user" may yet begin "user guide"
            found.append(m.start(1))
            break
    for m in _LINE_END_WORD.finditer(text):
        if turn_marker(m.group(1)):
            found.append(m.start(1) + _junk_from(m.group(1)))
            break
    last = _LAST_WORD.search(text) if ended else None
    if last is not None and turn_marker(last.group(0).rstrip()):
        found.append(last.start() + _junk_from(last.group(0)))
    found = [at for at in found if at is not None]
    return min(found) if found else None


def _junk_from(word: str) -> int:
    """Where the junk starts in a marker word: after a sentence's end glued to it
    ("Brazil?遷移model" keeps "Brazil?")."""
    ends = [word.rfind(c) for c in ".?!。？！"]
    return max(ends) + 1


def _with_content(chunk: dict, text: str | None, finish: str | None = None) -> dict:
    choice = (chunk.get("choices") or [{}])[0]
    delta = {k: v for k, v in (choice.get("delta") or {}).items() if k != "content"}
    if text:
        delta["content"] = text
    return {**chunk, "choices": [{**choice, "delta": delta, "finish_reason": finish}]}


def cut_at_turn_markers(chunks: Iterator[dict]) -> Iterator[dict]:
    """A streamed reply that ends where the model writes a turn change as a word. The last
    word of the line being written is held until the line goes on or ends (a word's delay)."""
    held = ""
    said = ""  # what went out already: a glued ideograph is judged by the whole reply's letters
    last: dict | None = None
    for chunk in chunks:
        last = chunk
        choice = (chunk.get("choices") or [{}])[0]
        piece = (choice.get("delta") or {}).get("content")
        finish = choice.get("finish_reason")
        if not piece and not finish:
            yield chunk  # the role, or an empty delta
            continue
        text = held + (piece or "")
        tail = (_ROLE_WORDS_BEGUN.search(text) or _LAST_WORD.search(text)) if not finish else None
        done, held = (text[: tail.start()], text[tail.start():]) if tail else (text, "")
        at = marker_at(said + done, ended=bool(finish))
        at = None if at is None else max(0, at - len(said))
        said += done
        if at is not None:
            if done[:at]:
                yield _with_content(chunk, done[:at])
            yield _with_content(chunk, None, "stop")
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # the model stops writing the next turn
            return
        if done or finish:
            yield _with_content(chunk, done, finish)
        if finish:
            return
    if held and last is not None:  # a stream that ended without a finish reason
        at = marker_at(said + held, ended=True)
        at = None if at is None else max(0, at - len(said))
        said = held if at is None else held[:at]
        if said:
            yield _with_content(last, said)


def cut_whole_at_turn_markers(completion: dict) -> dict:
    """A whole reply cut where the model writes a turn change as a word."""
    choice = (completion.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") or ""
    at = marker_at(text, ended=True)
    if at is None:
        return completion
    message = {**choice["message"], "content": text[:at].rstrip()}
    return {**completion, "choices": [{**choice, "message": message, "finish_reason": "stop"}]}


def loop_length(tokens: Sequence[int], min_period: int = LOOP_MIN_PERIOD, max_period: int = LOOP_MAX_PERIOD,
                repeats: int = LOOP_REPEATS) -> int:
    """The period of a loop at the end of ``tokens`` (0 if none): the last ``period`` tokens
    repeated ``repeats`` times back to back."""
    t = list(tokens[-max_period * repeats:])  # one copy; called after every token
    n = len(t)
    for period in range(min_period, min(max_period, n // repeats) + 1):
        if t[-1] != t[-1 - period]:
            continue
        tail = t[n - period:]
        if all(t[n - (k + 1) * period: n - k * period] == tail for k in range(1, repeats)):
            return period
    return 0


class RepeatedRun:
    """Whether a token sequence, fed as it grows, has said a run of ``run`` tokens twice
    (overlapping or not). Each run is hashed once: O(run) per token."""

    def __init__(self, run: int = REPEATED_RUN) -> None:
        self.run = run
        self.seen: set[tuple[int, ...]] = set()
        self.done = 0  # runs ending before this position are in ``seen``
        self.found = False  # once true, stays true: llama_cpp asks again after generation
        # ends, and a False then reports the stop as finish_reason "length"

    def __call__(self, tokens: Sequence[int]) -> bool:
        for end in range(max(self.done, self.run), len(tokens) + 1):
            key = tuple(int(t) for t in tokens[end - self.run:end])
            self.found = self.found or key in self.seen
            self.seen.add(key)
        self.done = max(self.done, len(tokens) + 1)
        return self.found


class LoopGuard:
    """A llama_cpp stopping criterion: stop when the generated tokens end in a loop, or
    say again a long run they already said. llama_cpp calls it after sampling each token
    with the tokens evaluated so far: the prompt at the first call, then the prompt and
    the reply but its newest token."""

    def __init__(self) -> None:
        self.prompt_len: int | None = None
        self.repeated = RepeatedRun()

    def __call__(self, input_ids, logits) -> bool:
        if self.prompt_len is None:
            self.prompt_len = len(input_ids)
        generated = input_ids[self.prompt_len:]
        if self.repeated(generated):
            return True
        if len(generated) < LOOP_MIN_PERIOD * LOOP_REPEATS:
            return False
        return loop_length(generated) > 0


def register(reply_max_tokens: int = REPLY_MAX_TOKENS, min_repeat_penalty: float = MIN_REPEAT_PENALTY,
             reply_stops: bool = True, empty_retries: int = EMPTY_RETRIES) -> None:
    """Register ``gemma-system`` with llama_cpp (idempotent). ``reply_stops`` off: only
    <end_of_turn> ends a reply, and an empty one is not sampled again (a baseline).
    ``empty_retries``: how many more samples a reply stopped before it says anything gets."""
    import llama_cpp
    from llama_cpp import llama_chat_format as lcf

    def formatter(*, messages, **_kwargs) -> lcf.ChatFormatterResponse:
        stop = [END, *TURN_END_STANDINS] if reply_stops else [END]
        return lcf.ChatFormatterResponse(prompt=format_prompt(messages), stop=stop,
                                         stopping_criteria=llama_cpp.StoppingCriteriaList([LoopGuard()]))

    base = lcf.chat_formatter_to_chat_completion_handler(formatter)

    def handler(*, max_tokens=None, repeat_penalty=MIN_REPEAT_PENALTY, stop=None, response_format=None, **kwargs):
        # llama.cpp already trims max_tokens to what the context has left
        if max_tokens is None or max_tokens <= 0:
            max_tokens = reply_max_tokens
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        plain = reply_stops and response_format is None  # a JSON answer may quote the prompt's lines
        if plain:
            messages = kwargs.get("messages", [])
            stops += echo_stops(messages) + header_stops(messages) + label_stops(messages) + date_stops(messages)

        def answer(**kw):
            out = base(max_tokens=max_tokens, repeat_penalty=max(repeat_penalty, min_repeat_penalty),
                       stop=stops or None, response_format=response_format, **kw)
            if not plain:
                return out
            return cut_at_turn_markers(out) if kw.get("stream") else cut_whole_at_turn_markers(out)

        if not plain:
            return answer(**kwargs)
        # a reply stopped before it said anything (it began by writing the prompt out again)
        # is sampled again, with the next seed if the request fixed one; after the last try
        # it is returned empty. A stopped try is short: the prompt is llama.cpp's cached
        # prefix, and the stop comes within a few tokens
        tries = 0 if kwargs.get("temperature", 0.2) <= 0 else empty_retries  # greedy says the same again
        return until_said(answer, kwargs, tries)

    lcf.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(CHAT_FORMAT, handler, overwrite=True)


def reply_text(completion: dict) -> str:
    """The text of a whole (not streamed) chat completion."""
    choices = completion.get("choices") or [{}]
    return (choices[0].get("message") or {}).get("content") or ""


def until_said(answer: Callable[..., Any], kwargs: dict, tries: int):
    """``answer(**kwargs)``, sampled up to ``tries`` more times while it is stopped before
    it says anything (with the next seed each time if the request fixed one); after the
    last try such a reply is returned empty. Streamed or whole, as ``kwargs`` asks."""
    seed = kwargs.get("seed")
    retry = stream_or_again if kwargs.get("stream") else whole_or_again

    def attempt(n: int):
        out = answer(**{**kwargs, "seed": None if seed is None else seed + n})
        return retry(out, (lambda: attempt(n + 1)) if n < tries else None)

    return attempt(0)


def _finish(completion: dict) -> str | None:
    return (completion.get("choices") or [{}])[0].get("finish_reason")


_USER_TURN = re.compile(r"[\s\-*|]*user\s*:")
# Gemma's own turn header without its marker: "user\nWhat is…", "user I am a customer of…"
# (stored as answers in a trial); lower case only, so "User accounts are…" is an answer
_GEMMA_USER_TURN = re.compile(r"\s*user(?:[ \t]*\n|[ \t]+\S)")


def writes_user_turn(text: str) -> bool:
    """A reply that opens with a "User:" label (after a copied date line or the system
    prompt's fixed lines) is the model writing the user's next turn, not an answer
    ("User: In Lisbon I'm looking for a job.", stored and later found as a fact); so is
    one that opens with Gemma's "user" turn header."""
    return (_USER_TURN.match(without_echo(text, SYSTEM_BOILERPLATE)) is not None
            or _GEMMA_USER_TURN.match(text) is not None)


# the reply's own label, and a date line of the memory block copied at its start
_OWN_LABEL = re.compile(r"(?:[\s\-*|]*(?:assistant|model)\s*:[ \t]*"
                        r"|[\s\-*]*\[\d{4}-\d{1,2}-\d{1,2}\][ \t]*(?:\n|\Z))+", re.I)


def without_own_label(text: str) -> str:
    """A reply without the "Assistant:" label the model opens it with ("Assistant: When
    is your marathon?"): stored with it, memory shows the model "Assistant: Assistant: …".
    Nor a date line copied from the memory block first ("[2026-12-03]\nI have to eat…",
    1 of 10 replies of a real-terminal run): the exchange has its own date."""
    m = _OWN_LABEL.match(text)
    return text[m.end():] if m else text


def says_nothing(text: str, *, partial: bool = False) -> bool:
    """Not an answer (yet): no words beyond the prompt's form, or a user turn."""
    return writes_user_turn(text) or not says_something(text, partial=partial, boilerplate=SYSTEM_BOILERPLATE)


def whole_or_again(completion: dict, again: Callable[[], dict] | None) -> dict:
    """A whole reply, or ``again()``'s when it says nothing (one stopped with no words
    that was cut at ``max_tokens`` is kept: the context is full, and would be again; a
    user turn never is). With no ``again`` (the last try), such a reply is returned empty."""
    text = reply_text(completion)
    if not writes_user_turn(text) and (_finish(completion) != "stop" or not says_nothing(text)):
        bare = without_own_label(text)
        return completion if bare == text else _with_message(completion, bare, _finish(completion))
    if again is not None:
        return again()
    return _with_message(completion, "", "stop")


def _with_message(completion: dict, text: str, finish: str | None) -> dict:
    choice = completion["choices"][0]
    message = {**(choice.get("message") or {}), "content": text}
    return {**completion, "choices": [{**choice, "message": message, "finish_reason": finish}]}


def _unlabelled(held: list[dict], text: str) -> list[dict]:
    """The chunks held back, their text given again in one chunk without the reply's own
    opening label when it has one (else as they were)."""
    bare = without_own_label(text)
    if bare == text:
        return held
    out = [_with_content(c, None, _finish(c)) for c in held]
    first = next((k for k, c in enumerate(held) if (c.get("choices") or [{}])[0].get("delta", {}).get("content")), 0)
    out[first] = _with_content(held[first], bare, _finish(held[first]))
    return out


def stream_or_again(chunks: Iterator[dict], again: Callable[[], Iterator[dict]] | None) -> Iterator[dict]:
    """The chunks of a streamed reply, held back until they say something; a stream that
    says nothing is replaced by ``again()``'s, or with no ``again`` (the last try) passed
    on without its text (one cut at ``max_tokens`` with no words is passed on: the
    context is full, and would be again). A user turn is cut off as soon as it shows."""
    held = []
    text = ""
    finish = None
    for chunk in chunks:
        held.append(chunk)
        choice = (chunk.get("choices") or [{}])[0]
        finish = choice.get("finish_reason") or finish
        text += (choice.get("delta") or {}).get("content") or ""
        if writes_user_turn(text):
            close = getattr(chunks, "close", None)
            if close is not None:
                close()  # the model stops writing the user's turn
            finish = "user turn"
            break
        if not says_nothing(text, partial=True):
            yield from _unlabelled(held, text)
            yield from chunks
            return
    if finish not in ("stop", "user turn") or not says_nothing(text):
        yield from _unlabelled(held, text)
    elif again is not None:
        yield from again()
    else:  # the last try: its chunks without their text, ended
        yield from (_with_content(c, None, _finish(c)) for c in held[:-1])
        yield _with_content(held[-1], None, "stop")


def has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """The CPU has Intel AMX (Sapphire Rapids and later)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            return any(line.startswith("flags") and " amx_int8" in line for line in fh)
    except OSError:
        return False


def without_extra_buffers() -> None:
    """llama.cpp's AMX buffers crash the first decode of a Q4_K_M model on AMX CPUs
    (ggml-org/llama.cpp#20824, no fix upstream; signal 11 on every reply here, on a
    Sapphire Rapids machine): the weights stay in plain CPU buffers, as on any other
    CPU. ``Llama()`` sets no such field itself, so its default parameters carry it."""
    import llama_cpp.llama_cpp as lib

    defaults = lib.llama_model_default_params
    if getattr(defaults, "without_extra_buffers", False):
        return

    def params():
        p = defaults()
        p.use_extra_bufts = False
        return p

    params.without_extra_buffers = True  # type: ignore[attr-defined]
    lib.llama_model_default_params = params


def main(argv: list[str] | None = None) -> None:
    if has_amx():
        without_extra_buffers()
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--reply_max_tokens", type=int, default=REPLY_MAX_TOKENS)
    ap.add_argument("--min_repeat_penalty", type=float, default=MIN_REPEAT_PENALTY)
    ap.add_argument("--reply_stops", choices=("True", "False"), default="True")
    ap.add_argument("--empty_retries", type=int, default=EMPTY_RETRIES)
    ours, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    register(ours.reply_max_tokens, ours.min_repeat_penalty, ours.reply_stops == "True", ours.empty_retries)
    from llama_cpp.server.__main__ import main as serve

    sys.argv = [sys.argv[0], *with_defaults(rest), "--chat_format", CHAT_FORMAT]  # the server parses sys.argv
    serve()


def with_defaults(args: list[str]) -> list[str]:
    """Started by hand (``nexus proxy`` in front of it, a trial): the bundled model, its
    name, and replies a second request does not cut off, unless the command says
    otherwise; a user had to read local_llm.py for these flags."""
    from .local_llm import DEFAULT_N_CTX, MODEL_ALIAS, model_path

    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    out = list(args)
    if "--model" not in given:
        out += ["--model", model_path()]
    # the context --local runs it with (llama-cpp-python's own default is 2,048: a Nexus in
    # front, counting on more, sent what the server could not take, a trial)
    defaults = {"--model_alias": MODEL_ALIAS, "--interrupt_requests": "False", "--n_ctx": str(DEFAULT_N_CTX)}
    for flag, value in defaults.items():
        if flag not in given:
            out += [flag, value]
    return out


if __name__ == "__main__":
    main()

"""Read LoCoMo conversation files into exchanges (shared by the benchmarks).

Turns are paired in order within each session: a ``speaker_a`` turn followed by a
``speaker_b`` turn is one exchange (user, assistant). A turn without a partner is
still stored, with a visible placeholder on the other side, because ``add()`` needs
both. Each turn's text starts with its speaker's name; an image's ``blip_caption`` is
appended to it. Nothing here looks
at conversation ids, questions or answers.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime

NO_REPLY = "(no reply)"
NO_MESSAGE = "(no message)"


@dataclass
class Exchange:
    user: str
    assistant: str
    timestamp: str
    dia_ids: list[str] = field(default_factory=list)  # the turns it holds
    turn_texts: dict[str, str] = field(default_factory=dict)  # dia_id -> text
    role_ids: dict[str, str] = field(default_factory=dict)  # "user"/"assistant" -> dia_id

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.user}, {"role": "assistant", "content": self.assistant}]


@dataclass
class Conversation:
    name: str
    exchanges: list[Exchange]
    questions: list[dict]
    turns: dict[str, str]  # dia_id -> text as stored


def parse_date(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08T13:56'; unparseable text is kept as is."""
    text = " ".join(text.split())
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y"):
        try:
            return datetime.strptime(text, fmt).isoformat(timespec="minutes")
        except ValueError:
            continue
    return text


def turn_text(turn: dict) -> str:
    # the speaker's name is part of what was said: "Caroline: I went to ..." (two people
    # talk, and questions name them); ours and the baselines see the same text
    text = f"{turn['speaker']}: {turn.get('text', '')}"
    if turn.get("blip_caption"):
        text = f"{text} [shares a photo: {turn['blip_caption']}]"
    return text


def load_conversation(path: str) -> Conversation:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    conv = data.get("conversation", data)
    a, b = conv["speaker_a"], conv["speaker_b"]
    sessions = sorted(
        (int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k))),
    )
    exchanges: list[Exchange] = []
    turns: dict[str, str] = {}
    for s in sessions:
        ts = parse_date(conv.get(f"session_{s}_date_time", ""))
        items = conv[f"session_{s}"]
        i = 0
        while i < len(items):
            t = items[i]
            text = turn_text(t)
            turns[t["dia_id"]] = text
            nxt = items[i + 1] if i + 1 < len(items) else None
            if t["speaker"] == a and nxt is not None and nxt["speaker"] == b:
                reply = turn_text(nxt)
                turns[nxt["dia_id"]] = reply
                exchanges.append(Exchange(text, reply, ts, [t["dia_id"], nxt["dia_id"]],
                                          {t["dia_id"]: text, nxt["dia_id"]: reply},
                                          {"user": t["dia_id"], "assistant": nxt["dia_id"]}))
                i += 2
                continue
            if t["speaker"] == a:
                exchanges.append(Exchange(text, NO_REPLY, ts, [t["dia_id"]], {t["dia_id"]: text},
                                          {"user": t["dia_id"]}))
            else:
                exchanges.append(Exchange(NO_MESSAGE, text, ts, [t["dia_id"]], {t["dia_id"]: text},
                                          {"assistant": t["dia_id"]}))
            i += 1
    name = os.path.splitext(os.path.basename(path))[0]
    return Conversation(name, exchanges, data.get("qa", []), turns)


def load_dir(directory: str) -> list[Conversation]:
    files = sorted(glob.glob(os.path.join(directory, "*.json")))
    if not files:
        raise SystemExit(f"no LoCoMo .json files in {directory}")
    return [load_conversation(f) for f in files]


def default_data_dir() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "..", "shared", "data", "locomo-dev"),
                 os.path.join(here, "..", "shared", "data", "locomo-dev")):
        if os.path.isdir(cand):
            return os.path.normpath(cand)
    return "../shared/data/locomo-dev"

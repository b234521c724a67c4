"""What ``add()`` accepts: one exchange's messages, checked and made storable; a clear
``ValueError`` in words a user understands otherwise (nothing is stored)."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` as UTF-8 can hold it: surrogate pairs left split (e.g. by a JSON decoder)
    are joined, lone surrogates become U+FFFD. SQLite and the tokenizer refuse them."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def checked_texts(what: str, **fields: object) -> dict[str, str]:
    """``fields`` as storable text (a lone surrogate read as U+FFFD, as ``add()`` stores
    it), or ``TypeError`` before anything is written: a text of None was stored and read
    back as None; a surrogate raised UnicodeEncodeError after a message's old row was
    deleted (a developer's trial)."""
    for name, value in fields.items():
        if not isinstance(value, str):
            raise TypeError(f"{what}: {name} must be text, not {type(value).__name__}; nothing was stored")
    return {name: storable(value) for name, value in fields.items() if isinstance(value, str)}


def validate_exchange(messages: object) -> list[dict]:
    """The exchange's messages (made storable), or ``ValueError`` naming what is wrong."""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"add() takes a list of messages, got {type(messages).__name__}")
    out: list[dict] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"message {i} is a {type(m).__name__}, not a dict with 'role' and 'content'")
        role, content = m.get("role"), m.get("content")
        if role not in ("user", "assistant", "system"):
            raise ValueError(f"message {i} has role {role!r}; expected 'user', 'assistant' or 'system'")
        if not isinstance(content, str):
            raise ValueError(f"message {i} ({role}) has content of type {type(content).__name__}, not str")
        if not content.strip():
            raise ValueError(f"message {i} ({role}) has empty content")
        out.append({"role": role, "content": storable(content)})
    roles = [m["role"] for m in out]
    for needed in ("user", "assistant"):
        if roles.count(needed) != 1:
            what = "no" if roles.count(needed) == 0 else "more than one"
            raise ValueError(f"an exchange needs exactly one {needed} message; got {what}")
    if roles.count("system") > 1:
        raise ValueError("an exchange takes at most one system message")
    if roles.index("assistant") < roles.index("user"):  # the reply would read as said before its question
        raise ValueError("the assistant's message comes before the user's; an exchange is the user's message, "
                         "then the reply")
    return out


_EXTENDED_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:$|[T ])")  # what dates and date lines read


def validate_timestamp(timestamp: object) -> str | None:
    """``add()``'s timestamp: None (now) or an ISO 8601 date and time, as given; else
    ``ValueError`` ("not a date" was stored, and shown to the model as a date line)."""
    if timestamp is None:
        return None
    if not isinstance(timestamp, str):
        raise ValueError(f"timestamp must be an ISO 8601 string such as '2024-05-01T10:00:00', "
                         f"not {type(timestamp).__name__}")
    from datetime import datetime

    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        raise ValueError(f"timestamp {timestamp[:40]!r} is not an ISO 8601 date and time "
                         "(such as '2024-05-01T10:00:00')") from None
    if not _EXTENDED_DATE.match(timestamp):
        # the basic and week forms ("20231013T100000", "2023-W41-1") were stored as given:
        # shown as "[20231013T1]" and never found by a question naming the day (a trial)
        return parsed.isoformat()
    return timestamp

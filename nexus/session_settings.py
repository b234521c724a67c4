"""Per-session settings: the system prompt (/system) and sampling (/set), stored in the
session file's meta table so they travel with the session."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

META_KEY = "nexus.settings"


@dataclass(frozen=True)
class Limit:
    low: float
    high: float
    low_open: bool = False  # the low end itself is not allowed
    integer: bool = False

    def describe(self) -> str:
        if self.integer:
            return f"a whole number from {int(self.low)} to {int(self.high)}"
        return f"a number in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"


LIMITS = {
    "temperature": Limit(0.0, 2.0),
    "top_p": Limit(0.0, 1.0, low_open=True),
    "max_tokens": Limit(1, 131072, integer=True),
}


@dataclass
class SessionSettings:
    system: str = ""  # the user's system prompt, sent before the memory block
    temperature: float | None = None  # None: the config's models.temperature
    top_p: float | None = None  # None: the server's default
    max_tokens: int | None = None  # None: the config's models.max_tokens (0 = sized to the context)
    web: bool | None = None  # /web on|off in this session; None: the config's web.enabled

    @classmethod
    def load(cls, db) -> SessionSettings:
        raw = db.get_meta(META_KEY) if db is not None else None
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
        except ValueError:
            return cls()  # an unreadable row costs the settings, never the session
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def own(self) -> str:
        """The values this session sets over the config, in words ("" for none)."""
        out = [f"{name} {getattr(self, name):g}" for name in LIMITS if getattr(self, name) is not None]
        if self.system.strip():
            out.append("its own system prompt")
        if self.web is False:
            out.append("web search off")
        return ", ".join(out)

    def save(self, db) -> None:
        db.set_meta(META_KEY, json.dumps(asdict(self)))


def parse_setting(name: str, value: str) -> float | int | None:
    """``/set NAME VALUE`` → the value, None for ``default`` (the session's own value
    dropped: once set, top_p could never go back to the server's: a trial); ValueError
    says what is allowed."""
    limit = LIMITS.get(name)
    if limit is None:
        raise ValueError(f"unknown setting {name!r}: /set takes {', '.join(LIMITS)}")
    if value.strip().lower() == "default":
        return None
    try:
        number = int(value) if limit.integer else float(value)
    except ValueError:
        raise ValueError(f"{name} must be {limit.describe()} (or default), not {value!r}") from None
    if (math.isnan(number) or number < limit.low or number > limit.high
            or (limit.low_open and number == limit.low)):
        raise ValueError(f"{name} must be {limit.describe()}, not {value}")
    return number

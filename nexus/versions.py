"""The versions of the newest exchange that /retry and /edit replaced, kept in the
session file: a regenerated answer can be worse than the one it replaced, and
/undo-retry puts an earlier one back (a restart keeps them too). Only the newest
exchange has versions: a new exchange ends them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

META_KEY = "nexus.versions"


@dataclass(frozen=True)
class Version:
    messages: list[dict]  # as the exchange stored them (system note, message, reply)
    timestamp: str


@dataclass
class ReplyVersions:
    exchange: int = -1  # the exchange they are versions of (the newest when they were made)
    versions: list[Version] = field(default_factory=list)  # oldest first
    at: int = 0  # the one memory holds

    @classmethod
    def load(cls, db) -> ReplyVersions:
        """From the session file (an unreadable row is no versions: the session opens)."""
        try:
            raw = json.loads(db.get_meta(META_KEY) or "{}")
            out = cls(int(raw["exchange"]), [Version(list(v["messages"]), str(v["timestamp"]))
                                            for v in raw["versions"]], int(raw["at"]))
        except (ValueError, TypeError, KeyError):
            return cls()
        return out if 0 <= out.at < len(out.versions) else cls()

    def save(self, db) -> None:
        db.set_meta(META_KEY, json.dumps(asdict(self)))

    def of(self, newest: int) -> list[Version]:
        """The versions of exchange ``newest`` (none once a newer exchange was added)."""
        return self.versions if self.exchange == newest else []

    def replacing(self, index: int, current: Version) -> None:
        """Before exchange ``index`` is replaced: its current text is a version."""
        if self.exchange != index or not self.versions:
            self.exchange, self.versions, self.at = index, [current], 0
        else:
            self.versions[self.at] = current

    def added(self, new: Version) -> None:
        """The replacement was stored: it is the newest version, and the one held."""
        self.versions.append(new)
        self.at = len(self.versions) - 1

    def previous(self) -> int:
        """The version /undo-retry puts back: the one before the held one (from the
        first, the newest again: going back never loses one)."""
        return (self.at - 1) % len(self.versions)


def version_of(node) -> Version:
    return Version([dict(m) for m in node.messages], node.timestamp or "")

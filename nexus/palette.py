"""The command palette's providers: every slash command, every session."""

from __future__ import annotations

import shlex

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape

from . import commands as C
from . import sessions
from .keys import key_label


def usage(c: C.Command) -> str:
    """The command's usage as the palette shows it: its help is markup, where "[name]"
    would be a style, not text."""
    return escape(c.usage)


class CommandProvider(Provider):
    """Every slash command in the command palette."""

    def resend_key(self) -> str:
        return key_label("resend", getattr(self.app, "keymap", None))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in C.COMMANDS:
            said = C.help_said(c, self.resend_key())
            score = matcher.match(f"{c.name} {said}")
            if score > 0:
                yield Hit(score, matcher.highlight(f"/{c.name} — {said}"),
                          lambda c=c: self.app.palette_command(c), help=usage(c))

    async def discover(self) -> Hits:
        """The palette opened empty: every slash command, in the registry's order."""
        for c in C.COMMANDS:
            yield DiscoveryHit(f"/{c.name} — {C.help_said(c, self.resend_key())}", lambda c=c: self.app.palette_command(c), help=usage(c))


class SessionProvider(Provider):
    """Every session in the command palette: "open NAME" switches to it."""

    def others(self) -> list[str]:
        """The sessions to switch to: all but the open one."""
        here = self.app.session_path.stem if self.app.session is not None else None
        return [name for name in sessions.names() if name != here]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name in self.others():
            score = matcher.match(f"open session {name}")
            if score > 0:
                yield Hit(score, matcher.highlight(f"open session {name}"),
                          lambda name=name: self.app.run_command(f"/open {shlex.quote(name)}"), help=escape(f"/open {name}"))

    async def discover(self) -> Hits:
        for name in self.others():
            yield DiscoveryHit(f"open session {name}", lambda name=name: self.app.run_command(
                f"/open {shlex.quote(name)}"), help=escape(f"/open {name}"))

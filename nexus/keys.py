"""Nexus key bindings: the one table of actions and their default keys.

The app declares its bindings from ``APP_KEYS`` (ids = action names, priority so a
focused editor cannot swallow them); the prompt's own keys are in ``PROMPT_KEYS``.
``[keys]`` in the config remaps them through Textual's keymap; ``validate_keys``
turns an unknown action or a malformed key into a ``ConfigError`` naming it.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from .config import ConfigError


@dataclass(frozen=True)
class KeyAction:
    action: str  # the binding id and the app's action_<name>
    key: str  # default, Textual key names; "a,b" binds both
    description: str
    show: bool = False  # in the footer


APP_KEYS: tuple[KeyAction, ...] = (
    KeyAction("toggle_tree", "ctrl+t", "tree", True),
    KeyAction("focus_tree", "ctrl+b", "browse the tree (→/← open and close, space folds, Enter inspects, Esc returns)"),
    KeyAction("toggle_log", "ctrl+l", "log", True),
    KeyAction("cancel", "escape", "cancel", True),
    KeyAction("resend", "ctrl+r", "resend", True),
    KeyAction("copy_reply", "ctrl+y", "copy", True),
    KeyAction("copy_code", "ctrl+k", "copy code"),
    KeyAction("select_previous", "ctrl+up", "select previous message"),
    KeyAction("select_next", "ctrl+down", "select next message"),
    KeyAction("focus_input", "ctrl+o", "back to the input"),
    KeyAction("page_chat_up", "pageup", "scroll the chat a page up (from the input)"),
    KeyAction("page_chat_down", "pagedown", "scroll the chat a page down (from the input)"),
    KeyAction("cycle_log_level", "ctrl+g", "log level"),
    KeyAction("grow_side", "ctrl+right", "wider tree"),
    KeyAction("shrink_side", "ctrl+left", "narrower tree"),
    KeyAction("quit", "ctrl+q", "quit", True),
)
PROMPT_KEYS: tuple[KeyAction, ...] = (
    KeyAction("newline", "shift+enter,ctrl+j", "new line"),
    KeyAction("complete", "tab", "complete"),
)
ALL_KEYS = {k.action: k for k in APP_KEYS + PROMPT_KEYS}
TEXTUAL_KEYS = ("ctrl+p",)  # Textual's own: the command palette

MODIFIERS = {"ctrl", "shift", "alt", "meta", "super", "hyper"}
NAMED = {
    "enter", "escape", "tab", "space", "backspace", "delete", "insert", "home", "end", "pageup", "pagedown",
    "up", "down", "left", "right", *(f"f{i}" for i in range(1, 25)),
}


SAME_AS = {"ctrl+i": "tab", "ctrl+m": "enter"}
# what the input needs for typing: bound to an action, "quit = 'a'" quit at the first "a"
# of a sentence (the rest went to the shell) and "resend = 'enter'" sent nothing (a trial)
TYPING = {"enter", "space", "backspace", "delete", "left", "right", "up", "down", "home", "end"}
SELECTING = {"space", "left", "right", "up", "down", "home", "end"}  # with shift (shift+enter: a new line)


# the input's own editing keys, and Ctrl+H, which terminals send for Backspace: bound to an
# action, "quit = 'ctrl+u'" quit where the line was to be cleared (a re-trial)
EDITING = {"ctrl+h", "ctrl+u", "ctrl+w", "ctrl+z", "ctrl+a", "ctrl+e", "ctrl+x", "ctrl+c", "ctrl+v"}


def types_text(mods: list[str], base: str) -> bool:
    """The key types or edits text in the input: a character (a name outside ``NAMED`` is
    punctuation), alone or with shift, an editing key (with shift: selecting), or one of
    the input's own ``EDITING`` keys."""
    if "+".join([*mods, base]) in EDITING:
        return True
    if set(mods) - {"shift"}:
        return False
    return base not in NAMED or base in (SELECTING if mods else TYPING)


def _base_key_ok(name: str) -> bool:
    if len(name) == 1 and name.isprintable() and name != " ":
        return True
    if name in NAMED:
        return True
    try:  # Textual's names of punctuation keys: "question_mark", "full_stop", ...
        return ord(unicodedata.lookup(name.replace("_", " ").upper())) < 128
    except KeyError:
        return False


def check_key(key: str) -> str | None:
    """The problem with one key string ("ctrl+k", "shift+enter,ctrl+j"), or None."""
    for one in key.split(","):
        one = one.strip()
        parts = one.split("+")
        if not one or any(not p for p in parts):
            return f"{key!r} is not a key (empty part)"
        *mods, base = [p.lower() for p in parts]
        bad = [m for m in mods if m not in MODIFIERS]
        if bad:
            return f"{one!r}: unknown modifier {bad[0]!r} (use {', '.join(sorted(MODIFIERS))})"
        if not _base_key_ok(base):
            return f"{one!r}: unknown key {base!r}"
        if types_text(mods, base):
            return (f"{one!r} is a key the input needs for typing (text, Enter, Backspace, the arrows, "
                    "Ctrl+U/W/Z…): bind another ctrl+ or alt+ key, or an F key")
        if one.lower() in SAME_AS:  # a terminal sends these as another key: the binding would never fire
            return f"{one!r} arrives as {SAME_AS[one.lower()]!r} in a terminal: bind {SAME_AS[one.lower()]!r} or another key"
    return None


def validate_keys(keys: dict) -> dict[str, str]:
    """``[keys]`` of the config → a Textual keymap {binding id: key}. Raises ``ConfigError``
    naming the first unknown action, malformed key, or key bound to two actions."""
    keymap: dict[str, str] = {}
    for action, key in keys.items():
        if action not in ALL_KEYS:
            raise ConfigError(f"[keys] {action}: unknown action (known: {', '.join(sorted(ALL_KEYS))})")
        if not isinstance(key, str):
            raise ConfigError(f"[keys] {action} = {key!r}: a key must be a string such as \"ctrl+k\"")
        problem = check_key(key)
        if problem:
            raise ConfigError(f"[keys] {action} = {key!r}: {problem}")
        keymap[action] = ",".join(dict.fromkeys(k.strip().lower() for k in key.split(",")))  # "F5,f5" is f5
    owner: dict[str, str] = dict.fromkeys(TEXTUAL_KEYS, "the command palette")
    for k in APP_KEYS + PROMPT_KEYS:
        for one in keymap.get(k.action, k.key).split(","):
            if one in owner:
                # ctrl+p took the palette's key without a word (a trial)
                raise ConfigError(f"[keys] {one!r} is bound to both {owner[one]} and {k.action}"
                                  + _freeing(one, owner[one], k.action, keymap))
            owner[one] = k.action
    return keymap


def _freeing(key: str, first: str, second: str, keymap: dict[str, str]) -> str:
    """How to free ``key`` when one of the two holds it by default: the error named only
    the clash, and a user who moved copy_code to ctrl+y was not told copy_reply has it (a trial)."""
    by_default = [a for a in (first, second) if a in ALL_KEYS and a not in keymap]
    if not by_default:
        return ""
    return f" ({by_default[0]} has it by default: give {by_default[0]} another key in [keys] too, or choose another)"


def key_for(action: str, keymap: dict[str, str] | None = None) -> str:
    """The key an action is bound to (remapped or default)."""
    return (keymap or {}).get(action) or ALL_KEYS[action].key


# Textual's names as the README and the chat say them
SAID = {"escape": "Esc", "pageup": "PageUp", "pagedown": "PageDown", "up": "↑", "down": "↓",
        "left": "←", "right": "→"}


def _said(one: str) -> str:
    *mods, base = one.strip().lower().split("+")
    if base in SAID:
        name = SAID[base]
    elif len(base) == 1 or base in NAMED:
        name = base.upper() if len(base) == 1 or base[1:].isdigit() else base.capitalize()  # K, F5, Enter
    else:  # "question_mark" → "?"
        try:
            name = unicodedata.lookup(base.replace("_", " ").upper())
        except KeyError:
            name = base
    return "+".join([m.capitalize() for m in mods] + [name])


def key_label(action: str, keymap: dict[str, str] | None = None) -> str:
    """The action's key as the chat names it, remapped or default: "Ctrl+R", "Esc", "F5",
    "Shift+Enter or Ctrl+J". The notes said the default keys whatever [keys] bound: the
    input's hint offered Ctrl+J for a new line after newline = "ctrl+n" (a trial)."""
    return key_said(key_for(action, keymap))


def key_said(keys: str) -> str:
    """Keys as Textual writes them ("ctrl+p", "shift+enter,ctrl+j") as the chat names them."""
    return " or ".join(_said(one) for one in keys.split(","))

"""Nexus configuration: packaged defaults < user file < .env/environment < flags.

The defaults are written once, in ``nexus/config/nexus.toml`` (documented there). The
sections below are the typed model they are validated against: every key of every
layer must be known and of the declared type, or loading fails with an error naming
the key and where it came from.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DEFAULTS_FILE = Path(__file__).parent / "config" / "nexus.toml"
APP_NAME = "nexus"

ENV_MAP = {  # environment variable -> (section, key)
    "OPENAI_BASE_URL": ("server", "base_url"),
    "OPENAI_API_KEY": ("server", "api_key"),
    "NEXUS_BASE_URL": ("server", "base_url"),
    "NEXUS_SERVER_KIND": ("server", "kind"),
    "NEXUS_MODEL": ("models", "chat"),
    "NEXUS_MEMORY_MODEL": ("models", "memory"),
    "NEXUS_VISION_MODEL": ("models", "vision"),
    "NEXUS_EMBED": ("memory", "embed"),
    "NEXUS_JUDGE": ("memory", "judge"),
    "NEXUS_WEB": ("web", "enabled"),
    "NEXUS_IDLE_REORGANIZE": ("memory", "idle_reorganize_seconds"),
}


class ConfigError(ValueError):
    pass


def user_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP_NAME)) / "nexus.toml"


def data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(os.environ.get("NEXUS_DATA_DIR") or user_data_dir(APP_NAME))


# --- the typed model: one frozen dataclass per section ------------------------------------
# A field's metadata may carry ``check``: a predicate on the value and the words saying
# what is allowed.


def _one_of(*choices: str) -> dict:
    return {"check": (lambda v: v in choices, "one of " + ", ".join(repr(c) for c in choices))}


def _range(lo: float, hi: float | None = None, lo_open: bool = False) -> dict:
    def ok(v) -> bool:
        return (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)

    left = "(" if lo_open else "["
    return {"check": (ok, f"a number in {left}{lo}, {hi if hi is not None else '∞'}" + ("]" if hi is not None else ")"))}


HTTP_URL = "an http:// or https:// URL with a host, e.g. http://127.0.0.1:1234/v1"


FLAG_OF = {("server", "base_url"): "--base-url", ("models", "chat"): "--model", ("models", "memory"): "--memory-model",
           ("memory", "embed"): "--embed", ("web", "enabled"): "--no-web"}  # the flags nexus sets these by


def http_url_problem(url: str) -> str | None:
    """What keeps ``url`` from being a server's address, in words, or None. "http://",
    "http://[::1", "http://localhost:99999/v1" and one with a space passed a check of the
    scheme alone, and failed later with garbled words (a trial)."""
    from urllib.parse import urlsplit

    if not url.startswith(("http://", "https://")):
        return "it does not start with http:// or https://"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "it holds a space or a control character"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        if "port" in str(exc).lower():
            return "its port is not a number from 1 to 65535"
        return f"it cannot be read: {str(exc)[:1].lower()}{str(exc)[1:]}"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 is no server's port"
    return None


@dataclass(frozen=True)
class ServerSettings:
    base_url: str = field(metadata={"check": (lambda v: http_url_problem(v) is None, HTTP_URL), "why": http_url_problem})
    api_key: str
    kind: str = field(metadata=_one_of("auto", "lmstudio", "ollama", "openai"))
    timeout: float = field(metadata=_range(0, lo_open=True))


@dataclass(frozen=True)
class ModelSettings:
    chat: str
    memory: str
    vision: str
    temperature: float = field(metadata=_range(0, 2))
    max_tokens: int = field(metadata=_range(0, 131072))  # as /set max_tokens allows
    context_tokens: int = field(metadata=_range(256))


@dataclass(frozen=True)
class MemorySettings:
    judge: str = field(metadata=_one_of("auto", "embedding", "llm"))
    embed: str
    max_children: int = field(metadata=_range(2, 10_000))  # trace_core.fanout.MAX_CHILDREN_LIMIT
    memory_token_budget: int = field(metadata=_range(1))
    recent_exchanges: int = field(metadata=_range(0))
    idle_reorganize_seconds: float = field(metadata=_range(0))
    reorganize_threshold: float = field(metadata=_range(0, 1, lo_open=True))
    prune_trivial: bool


@dataclass(frozen=True)
class WebSettings:
    enabled: bool
    max_results: int = field(metadata=_range(1))
    timeout: float = field(metadata=_range(0, lo_open=True))
    backend: str


@dataclass(frozen=True)
class IngestSettings:
    max_side: int = field(metadata=_range(64))
    max_file_mb: float = field(metadata=_range(0, lo_open=True))
    max_megapixels: float = field(metadata=_range(0, lo_open=True))
    load_timeout: float = field(metadata=_range(0, lo_open=True))


@dataclass(frozen=True)
class UISettings:
    show_tree: bool
    show_log: bool
    log_level: str = field(metadata=_one_of("debug", "info", "warning", "error"))


SECTIONS: dict[str, type] = {
    "server": ServerSettings, "models": ModelSettings, "memory": MemorySettings,
    "web": WebSettings, "ingest": IngestSettings, "ui": UISettings,
}
# [keys] maps an action to a key; the actions and the key syntax are checked by
# nexus.keys.validate_keys (it owns the binding table).
FREE_SECTIONS = ("keys",)


def _field_types(cls: type) -> dict[str, tuple[type, dataclasses.Field]]:
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f) for f in dataclasses.fields(cls)}


def _typed(value, want: type, where: str):
    """``value`` as ``want`` (an int is a valid float; a bool is not a number)."""
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want in (int, float) and isinstance(value, bool) or not isinstance(value, want):
        raise ConfigError(f"{where} must be {KINDS.get(want, want.__name__)}, not {value!r}")
    return value


# what a TOML value of each type looks like, in the user's words ("must be float, not str ('hot')")
KINDS = {float: "a number, no quotes (like 30 or 0.7)", int: "a whole number, no quotes (like 4)", bool: "true or false (no quotes)",
         str: 'text in quotes (like "minilm")'}


def _checked(layer: dict, source: str, written: str | None = None) -> dict:
    """One layer (a file, the environment, flags) with every section and key known and of
    its declared type (ints given for floats become floats). ``written``: the text a single
    value was read from (an environment variable's), said in an error instead of the value
    it was read as ("-5", not "-5.0")."""
    out: dict = {}
    for section, body in layer.items():
        if section in FREE_SECTIONS:
            if not isinstance(body, dict):
                raise ConfigError(f"{section} in {source} must be a table [{section}]")
            for key, value in body.items():
                if not isinstance(value, str):  # named: "every value must be a string" left the user to find it
                    raise ConfigError(f"{section}.{key} in {source} must be {KINDS[str]}, not {value!r}")
            out[section] = dict(body)
            continue
        if section not in SECTIONS and not isinstance(body, dict):  # "garbage = 1" at the top
            raise ConfigError(f"{section} = … in {source} is outside any section: keys go under a "
                              f"[section] ({', '.join(list(SECTIONS) + list(FREE_SECTIONS))})")
        if section not in SECTIONS:
            raise ConfigError(f"unknown section [{section}] in {source} "
                              f"(known: {', '.join(list(SECTIONS) + list(FREE_SECTIONS))})")
        if not isinstance(body, dict):
            raise ConfigError(f"{section} in {source} must be a table [{section}]")
        fields = _field_types(SECTIONS[section])
        for key, value in body.items():
            if key not in fields:
                raise ConfigError(f"unknown key {section}.{key} in {source} (known: {', '.join(fields)})")
            want, f = fields[key]
            given = value if written is None else written  # said as written: "-5", not "-5.0" (a trial)
            value = _typed(value, want, f"{section}.{key} in {source}")
            check = f.metadata.get("check")
            if check and not check[0](value):
                why = f.metadata.get("why")  # which part is wrong: "with a host" misled over a bad port
                raise ConfigError(f"{section}.{key} in {source} must be {check[1]}, not {given!r}"
                                  + (f" ({why(value)})" if why else ""))
            out.setdefault(section, {})[key] = value
    return out


def _merge(base: dict, over: dict) -> dict:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
    return base


# what an environment variable of each type may say, in words ("(bool)" and "(float)"
# were Python's names, a trial)
ENV_KINDS = {bool: "on or off (also true/false, yes/no, 1/0)", float: "a number", int: "a whole number"}


def _coerce(want: type, value: str):
    if want is bool:
        low = value.strip().lower()
        if low in ("1", "on", "true", "yes"):
            return True
        if low in ("0", "off", "false", "no"):
            return False
        raise ValueError(value)
    return want(value)


@contextmanager
def _unparsed_lines():
    """The line numbers python-dotenv could not parse, kept from its log (it warns without
    the file's name)."""
    import logging

    found: list[str] = []

    class Collect(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if "could not parse" in record.msg:
                found.append(str(record.args[0]) if record.args else "?")
                return False
            return True

    logger, keep = logging.getLogger("dotenv.main"), Collect()
    logger.addFilter(keep)
    try:
        yield found
    finally:
        logger.removeFilter(keep)


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:  # a start stopped by a traceback, in a trial
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({unreadable(exc)})") from None


def unreadable(exc: OSError) -> str:
    """Why a file could not be read, in words."""
    if isinstance(exc, IsADirectoryError):
        return "it is a folder"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or type(exc).__name__


@dataclass
class Config:
    data: dict = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was read but not taken, said at start
    chosen: set[tuple[str, str]] = field(default_factory=set)  # (section, key) set other than by the defaults

    def get(self, section: str, key: str):
        """One raw value (untyped); code reads ``section(name).key`` instead."""
        return self.data[section][key]

    def set(self, section: str, key: str, value) -> None:
        """A value set at run time (``--local``'s server, tests), validated like any layer."""
        value = _checked({section: {key: value}}, "a run-time setting")[section][key]
        self.data.setdefault(section, {})[key] = value
        self.chosen.add((section, key))

    def section(self, name: str):
        """The typed, frozen view of one section (``config.section("memory").judge``)."""
        return SECTIONS[name](**self.data[name])

    @property
    def keys(self) -> dict[str, str]:
        return dict(self.data.get("keys", {}))

    # shortcuts
    @property
    def base_url(self) -> str:
        return self.section("server").base_url.rstrip("/")

    @property
    def api_key(self) -> str:
        return self.section("server").api_key

    @property
    def chat_model(self) -> str:
        return self.section("models").chat

    @property
    def memory_model(self) -> str:
        models = self.section("models")
        return models.memory or models.chat


def _validate_keys(keys: dict, sources: str) -> None:
    from .keys import validate_keys  # the binding table's owner checks actions and key syntax

    try:
        validate_keys(keys)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (in {sources})") from None


def load_config(flags: dict | None = None, env: dict | None = None, user_file: Path | None = None,
                cwd: Path | None = None) -> Config:
    defaults = _checked(_read_toml(DEFAULTS_FILE), str(DEFAULTS_FILE))
    for name, cls in SECTIONS.items():  # the defaults file sets every key of the model
        missing = set(_field_types(cls)) - set(defaults.get(name, {}))
        if missing:
            raise ConfigError(f"{DEFAULTS_FILE} lacks {', '.join(f'{name}.{k}' for k in sorted(missing))}")
    data = copy.deepcopy(defaults)
    sources = [str(DEFAULTS_FILE)]
    # the files that bind keys: a key error named the shipped defaults too, which bind none (a trial)
    keys_from = [str(DEFAULTS_FILE)] if defaults.get("keys") else []
    chosen: set[tuple[str, str]] = set()
    path = user_file if user_file is not None else user_config_path()
    if path.exists():
        user = _checked(_read_toml(path), str(path))
        _merge(data, user)
        sources.append(str(path))
        if user.get("keys"):
            keys_from.append(str(path))
        chosen |= {(section, key) for section, body in user.items() if section in SECTIONS for key in body}
    environ = dict(os.environ if env is None else env)
    dotenv = (cwd or Path.cwd()) / ".env"
    from_file: set[str] = set()  # the variables the .env file set (the environment's own win)
    dotenv_name = "./.env" if cwd is None or Path(cwd).resolve() == Path.cwd().resolve() else str(dotenv)
    notes: list[str] = []
    if env is None and dotenv.exists():
        from dotenv import dotenv_values

        try:
            with _unparsed_lines() as bad:
                values = dotenv_values(dotenv)
            if bad:  # python-dotenv's own warning named no file (a trial)
                notes.append(f"{dotenv_name}: line {', '.join(bad)} is not NAME=value; ignored")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{dotenv}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
        except OSError as exc:
            raise ConfigError(f"{dotenv}: cannot be read ({unreadable(exc)})") from None
        for k, v in values.items():
            if k not in environ:
                environ[k] = v or ""
                from_file.add(k)
        sources.append(str(dotenv))
    flagged = {k for k, v in (flags or {}).items() if v is not None}
    for var, (section, key) in ENV_MAP.items():
        if environ.get(var) and (section, key) not in flagged:  # a flag overrides it: its value is not read
            want = _field_types(SECTIONS[section])[key][0]
            where = f"{dotenv_name} ({var})" if var in from_file else f"the environment variable {var}"
            try:
                value = _coerce(want, environ[var])
            except ValueError:
                origin = dotenv_name if var in from_file else "the environment"
                raise ConfigError(f"{var}={environ[var]!r} in {origin} is not a valid {section}.{key} "
                                  f"({ENV_KINDS.get(want, want.__name__)})") from None
            data[section][key] = _checked({section: {key: value}}, where, environ[var])[section][key]
            chosen.add((section, key))
    for (section, key), value in (flags or {}).items():
        if value is not None:
            flag = FLAG_OF.get((section, key), f"{section}.{key}")
            data[section][key] = _checked({section: {key: value}}, f"the command line ({flag})")[section][key]
            chosen.add((section, key))
    _validate_keys(data.get("keys", {}), ", ".join(keys_from or [str(DEFAULTS_FILE)]))
    return Config(data, sources, chosen=chosen, notes=notes)

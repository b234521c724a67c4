"""Nexus configuration: packaged defaults < user file < .env/environment < flags."""

from __future__ import annotations

import copy
import os
import tomllib
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


def _merge(base: dict, over: dict) -> dict:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
    return base


def _coerce(old, value: str):
    if isinstance(old, bool):
        return value.strip().lower() in ("1", "on", "true", "yes")
    if isinstance(old, int):
        return int(value)
    if isinstance(old, float):
        return float(value)
    return value


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


@dataclass
class Config:
    data: dict = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def get(self, section: str, key: str):
        return self.data[section][key]

    def set(self, section: str, key: str, value) -> None:
        self.data.setdefault(section, {})[key] = value

    # shortcuts
    @property
    def base_url(self) -> str:
        return str(self.get("server", "base_url")).rstrip("/")

    @property
    def api_key(self) -> str:
        return str(self.get("server", "api_key"))

    @property
    def chat_model(self) -> str:
        return str(self.get("models", "chat"))

    @property
    def memory_model(self) -> str:
        return str(self.get("models", "memory") or self.get("models", "chat"))


def load_config(flags: dict | None = None, env: dict | None = None, user_file: Path | None = None,
                cwd: Path | None = None) -> Config:
    data = copy.deepcopy(_read_toml(DEFAULTS_FILE))
    sources = [str(DEFAULTS_FILE)]
    path = user_file if user_file is not None else user_config_path()
    if path.exists():
        _merge(data, _read_toml(path))
        sources.append(str(path))
    environ = dict(os.environ if env is None else env)
    dotenv = (cwd or Path.cwd()) / ".env"
    if env is None and dotenv.exists():
        from dotenv import dotenv_values

        for k, v in dotenv_values(dotenv).items():
            environ.setdefault(k, v or "")
        sources.append(str(dotenv))
    for var, (section, key) in ENV_MAP.items():
        if environ.get(var):
            try:
                data[section][key] = _coerce(data[section][key], environ[var])
            except ValueError:
                raise ConfigError(f"{var}={environ[var]!r} is not a valid {key}") from None
    for (section, key), value in (flags or {}).items():
        if value is not None:
            data[section][key] = value
    cfg = Config(data, sources)
    if cfg.get("memory", "judge") not in ("auto", "embedding", "llm"):
        raise ConfigError(f"memory.judge must be auto, embedding or llm, not {cfg.get('memory', 'judge')!r}")
    return cfg

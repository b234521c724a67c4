"""Typed configuration: every layer validated against the section model, errors name the
key and where it came from, defaults written once."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nexus.config import DEFAULTS_FILE, SECTIONS, ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def _user(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "nexus.toml"
    p.write_text(text)
    return p


def test_defaults_load_and_typed_sections(tmp_path):
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    mem = cfg.section("memory")
    assert mem.judge == "auto" and isinstance(mem.max_children, int)
    assert isinstance(cfg.section("server").timeout, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        mem.judge = "llm"  # type: ignore[misc]


def test_model_and_defaults_file_have_the_same_keys():
    defaults = tomllib.loads(DEFAULTS_FILE.read_text())
    for name, cls in SECTIONS.items():
        assert set(defaults[name]) == {f.name for f in dataclasses.fields(cls)}, name


def test_shipped_and_documented_defaults_are_one_file():
    # config/nexus.toml (documented at the top of the repo) is the packaged file itself
    assert (REPO / "config" / "nexus.toml").read_text() == DEFAULTS_FILE.read_text()


def test_unknown_key_names_key_and_file(tmp_path):
    path = _user(tmp_path, "[memory]\nmax_childs = 4\n")
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, user_file=path)
    assert "memory.max_childs" in str(exc.value) and str(path) in str(exc.value)


def test_unknown_section(tmp_path):
    path = _user(tmp_path, "[memroy]\njudge = 'llm'\n")
    with pytest.raises(ConfigError, match=r"unknown section \[memroy\]"):
        load_config(env={}, user_file=path)
    path = _user(tmp_path, "garbage = 1\n[memory]\njudge = 'llm'\n")  # a key above every section
    with pytest.raises(ConfigError, match=r"garbage = … in .* is outside any section"):
        load_config(env={}, user_file=path)


def test_help_names_the_defaults_file_where_it_is():
    """'config/nexus.toml' was relative to the repository, not where an install has it."""
    out = subprocess.run([sys.executable, "-m", "nexus", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and str(DEFAULTS_FILE) in out.stdout.replace("\n", "")


def test_wrong_type_names_key_and_file(tmp_path):
    path = _user(tmp_path, "[memory]\nmax_children = 'five'\n")
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, user_file=path)
    assert "memory.max_children" in str(exc.value) and str(path) in str(exc.value)
    # in a user's words: it said "must be int, not str ('five')"
    assert "must be a whole number, no quotes (like 4), not 'five'" in str(exc.value)
    # a timeout in quotes was told "a number (like 0.7)"; -5 was said as "-5.0"; a key bound
    # to a number was "every value must be a string", the key unnamed (a trial)
    with pytest.raises(ConfigError, match=r"server.timeout .* must be a number, no quotes \(like 30 or 0.7\), not '30'"):
        load_config(env={}, user_file=_user(tmp_path, "[server]\ntimeout = '30'\n"))
    with pytest.raises(ConfigError, match=r"server.timeout .*, not -5$"):
        load_config(env={}, user_file=_user(tmp_path, "[server]\ntimeout = -5\n"))
    with pytest.raises(ConfigError, match=r"keys.copy_code .* must be text in quotes .*, not 5"):
        load_config(env={}, user_file=_user(tmp_path, "[keys]\ncopy_code = 5\n"))
    with pytest.raises(ConfigError, match=r"must be true or false \(no quotes\), not 'no'"):
        load_config(env={}, user_file=_user(tmp_path, "[ui]\nshow_tree = 'no'\n"))
    # a key bound twice is the user's file's: the shipped defaults, which bind no key, were named too (a trial)
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, user_file=_user(tmp_path, "[keys]\ncopy_code = 'ctrl+t'\n"))
    assert str(exc.value).endswith(f"(in {tmp_path / 'nexus.toml'})"), str(exc.value)


def test_bool_is_not_a_number(tmp_path):
    with pytest.raises(ConfigError, match="web.max_results"):
        load_config(env={}, user_file=_user(tmp_path, "[web]\nmax_results = true\n"))


def test_int_accepted_for_float(tmp_path):
    cfg = load_config(env={}, user_file=_user(tmp_path, "[server]\ntimeout = 30\n"))
    assert cfg.section("server").timeout == 30.0


@pytest.mark.parametrize("text, words", [
    ("[memory]\njudge = 'oracle'\n", "one of 'auto', 'embedding', 'llm'"),
    ("[memory]\nreorganize_threshold = 7\n", "(0, 1]"),
    ("[memory]\nmax_children = 1\n", "[2, 10000]"),
    ("[server]\nbase_url = 'localhost:1234'\n", "http:// or https://"),
    ("[ui]\nlog_level = 'loud'\n", "'debug'"),
])
def test_values_out_of_range_say_what_is_allowed(tmp_path, text, words):
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, user_file=_user(tmp_path, text))
    assert words in str(exc.value)


def test_environment_is_coerced_and_validated(tmp_path):
    none = tmp_path / "none.toml"
    assert load_config(env={"NEXUS_WEB": "off"}, user_file=none).get("web", "enabled") is False
    assert load_config(env={"NEXUS_IDLE_REORGANIZE": "0"}, user_file=none).get(
        "memory", "idle_reorganize_seconds") == 0.0
    with pytest.raises(ConfigError, match="NEXUS_WEB"):
        load_config(env={"NEXUS_WEB": "maybe"}, user_file=none)
    with pytest.raises(ConfigError, match="NEXUS_JUDGE"):
        load_config(env={"NEXUS_JUDGE": "oracle"}, user_file=none)


def test_flags_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="command line"):
        load_config({("server", "base_url"): "not a url"}, env={}, user_file=tmp_path / "none.toml")


def test_runtime_set_is_validated(tmp_path):
    cfg = load_config(env={}, user_file=tmp_path / "none.toml")
    cfg.set("models", "context_tokens", 2048)
    assert cfg.section("models").context_tokens == 2048
    with pytest.raises(ConfigError):
        cfg.set("models", "context_tokens", "big")
    with pytest.raises(ConfigError, match="unknown key"):
        cfg.set("models", "nonsense", 1)


def test_main_reports_a_config_error_and_exits_2(tmp_path, monkeypatch, capsys):
    from nexus.__main__ import main

    cfg_home = tmp_path / "xdg"
    (cfg_home / "nexus").mkdir(parents=True)
    (cfg_home / "nexus" / "nexus.toml").write_text("[memory]\nmax_childs = 4\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg_home))
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    assert main([]) == 2
    assert "memory.max_childs" in capsys.readouterr().err


def test_a_bad_dotenv_value_names_the_file_not_the_environment(tmp_path, monkeypatch, capsys):
    """A ``.env`` in the working directory with ``NEXUS_JUDGE=banana``: the error said
    "in the environment variable NEXUS_JUDGE" though the shell had no such variable."""
    from nexus.__main__ import main

    none = tmp_path / "none.toml"
    (tmp_path / ".env").write_text("NEXUS_JUDGE=banana\n")
    monkeypatch.chdir(tmp_path)
    for var in ("NEXUS_JUDGE", "NEXUS_WEB"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError) as exc:
        load_config(user_file=none)
    said = str(exc.value)
    assert said.startswith("memory.judge in ./.env (NEXUS_JUDGE) must be one of"), said
    assert "environment variable" not in said
    # a value the file sets that is not even the right type says the file too
    (tmp_path / ".env").write_text("NEXUS_WEB=maybe\n")
    with pytest.raises(ConfigError, match=r"NEXUS_WEB='maybe' in \./\.env is not a valid web\.enabled"):
        load_config(user_file=none)
    monkeypatch.setenv("NEXUS_WEB", "off")  # the environment's own value wins over the file's
    assert load_config(user_file=none).get("web", "enabled") is False
    monkeypatch.delenv("NEXUS_WEB")
    # the same bad value in the shell's environment is still blamed on the variable
    (tmp_path / ".env").unlink()
    monkeypatch.setenv("NEXUS_JUDGE", "banana")
    with pytest.raises(ConfigError, match=r"memory\.judge in the environment variable NEXUS_JUDGE must be one of"):
        load_config(user_file=none)
    # and the start of Nexus reports the file's name (exit 2)
    monkeypatch.delenv("NEXUS_JUDGE")
    (tmp_path / ".env").write_text("NEXUS_JUDGE=banana\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    assert main([]) == 2
    assert "memory.judge in ./.env (NEXUS_JUDGE) must be one of" in capsys.readouterr().err


def IN_A_FILE(d):  # noqa: N802 - a data folder under a file
    (d / "afile").write_text("x")


@pytest.mark.parametrize("make, said", [
    (lambda d: (d / "xdg" / "nexus" / "nexus.toml").write_bytes(b"\xff\xfe[memory]\n"), "nexus.toml: not UTF-8 text"),
    (lambda d: (d / "xdg" / "nexus" / "nexus.toml").mkdir(), "nexus.toml: cannot be read (it is a folder)"),
    (lambda d: (d / ".env").write_bytes(b"NEXUS_JUDGE=\xff\xfe\n"), ".env: not UTF-8 text"),
    (IN_A_FILE, "the data folder cannot be used: "),
    # the sessions folder was there, its logs folder could not be made: the app opened and
    # kept typed messages in a queue that quitting lost (a trial)
    (lambda d: (d / "data" / "logs").write_text("x"), "the data folder cannot be used: "),
])
def test_unreadable_settings_and_an_unusable_data_folder_stop_with_one_line(tmp_path, monkeypatch, capsys, make,
                                                                           said):
    """Each of these stopped the start with a Python traceback (a trial)."""
    from nexus.__main__ import main

    (tmp_path / "xdg" / "nexus").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "data" / "sessions").mkdir(parents=True)
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / ("afile" if make is IN_A_FILE else "data")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEXUS_JUDGE", raising=False)
    make(tmp_path)
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nexus: ") and said in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("url, why", [("http://", "it names no host"), ("http://[::1", "it cannot be read: invalid IPv6"),
                                      ("http://localhost:99999/v1", "its port is not a number from 1 to 65535"),
                                      ("http://a%20b /v1", "it holds a space"), ("http://host:0/v1", "port 0 is"),
                                      ("https://:8080/v1", "it names no host")])
def test_a_server_address_that_names_no_usable_server_stops_the_start(tmp_path, url, why):
    """These passed a check of the scheme alone, then failed later in garbled words
    ("No model server answers at http:: str: no host given") — a trial. The message says
    which part is wrong, and the flag by its name (a bad port read as "with a host")."""
    with pytest.raises(ConfigError, match="must be an http:// or https:// URL with a host") as caught:
        load_config({("server", "base_url"): url}, env={}, user_file=tmp_path / "none.toml")
    assert f"({why}" in str(caught.value) and "the command line (--base-url)" in str(caught.value)


def test_good_addresses_pass_and_a_flag_overrides_a_bad_environment_value(tmp_path):
    for url in ("http://127.0.0.1:1234/v1", "https://api.example.com/v1", "http://[::1]:8080/v1", "http://ollama:11434"):
        assert load_config({("server", "base_url"): url}, env={}, user_file=tmp_path / "none.toml").base_url == \
            url.rstrip("/")
    # the README: flags override the environment — a bad NEXUS_BASE_URL under --base-url stopped the start
    cfg = load_config({("server", "base_url"): "http://127.0.0.1:1/v1"}, env={"NEXUS_BASE_URL": "garbage"},
                      user_file=tmp_path / "none.toml")
    assert cfg.base_url == "http://127.0.0.1:1/v1"
    with pytest.raises(ConfigError, match="NEXUS_BASE_URL"):
        load_config(env={"NEXUS_BASE_URL": "garbage"}, user_file=tmp_path / "none.toml")


@pytest.mark.parametrize("mode", ["proxy", "mcp"])
def test_proxy_and_mcp_say_an_unusable_data_folder_in_one_line(tmp_path, mode):
    """NEXUS_DATA_DIR under a file stopped them with a traceback (an MCP client showed
    only "Connection closed"); plain nexus said it in one line (a trial)."""
    (tmp_path / "afile").write_text("x")
    env = {**os.environ, "NEXUS_DATA_DIR": str(tmp_path / "afile"), "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    args = ["--upstream", "http://127.0.0.1:9/v1", "--port", "0"] if mode == "proxy" else []
    done = subprocess.run([sys.executable, "-m", "nexus", mode, *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"nexus {mode}: the data folder cannot be used") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_env_lines_and_values_are_said_in_words(tmp_path, monkeypatch):
    """A bad .env line: python-dotenv's warning named no file. NEXUS_WEB=maybe and
    NEXUS_IDLE_REORGANIZE=soon said "(bool)" and "(float)" (a trial)."""
    monkeypatch.chdir(tmp_path)
    for var in ("NEXUS_WEB", "NEXUS_IDLE_REORGANIZE"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / ".env").write_text("this line is garbage\nNEXUS_JUDGE=embedding\n")
    cfg = load_config(user_file=tmp_path / "none.toml")
    assert cfg.notes == ["./.env: line 1 is not NAME=value; ignored"]
    assert cfg.section("memory").judge == "embedding"  # the good line is taken
    (tmp_path / ".env").write_text("NEXUS_WEB=maybe\n")
    with pytest.raises(ConfigError, match=r"NEXUS_WEB='maybe' in ./.env is not a valid web.enabled \(on or off"):
        load_config(user_file=tmp_path / "none.toml")
    (tmp_path / ".env").write_text("NEXUS_IDLE_REORGANIZE=soon\n")
    with pytest.raises(ConfigError, match=r"\(a number\)"):
        load_config(user_file=tmp_path / "none.toml")


def test_an_environment_value_out_of_range_is_said_as_written(tmp_path):
    """NEXUS_IDLE_REORGANIZE=-5 was said "not -5.0": a value nobody typed (a trial; the
    file's values were already said as written)."""
    none = tmp_path / "none.toml"
    with pytest.raises(ConfigError, match=r"NEXUS_IDLE_REORGANIZE must be a number in \[0, ∞\), not '-5'$"):
        load_config(env={"NEXUS_IDLE_REORGANIZE": "-5"}, user_file=none, cwd=tmp_path)


def test_max_tokens_in_the_file_is_bounded_as_set_bounds_it(tmp_path):
    """[models] max_tokens = 99999999 was taken at start while /set max_tokens allows at
    most 131072 (a trial)."""
    f = tmp_path / "nexus.toml"
    f.write_text("[models]\nmax_tokens = 99999999\n")
    with pytest.raises(ConfigError, match=r"models.max_tokens .* must be a number in \[0, 131072\]"):
        load_config(env={}, user_file=f)


async def test_a_settings_note_is_said_in_the_app_too(server, tmp_path, minilm, monkeypatch):
    """A bad .env line was said on stderr before the full screen took the terminal: seen
    only after quitting, while the app ran on the default server address (trial)."""
    from test_nexus_app import log_text, notices, ready

    from nexus.app import NexusApp

    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / ".env").write_text('NEXUS_BASE_URL="http://127.0.0.1:8765/v1\n')
    cfg = load_config(user_file=tmp_path / "none.toml", cwd=tmp_path)
    assert cfg.notes and "line 1 is not NAME=value" in cfg.notes[0]
    cfg.set("server", "base_url", server.base_url)
    cfg.set("memory", "judge", "embedding")
    cfg.set("web", "enabled", False)
    app = NexusApp(cfg, tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        assert "Settings: " in notices(app) and ".env: line 1 is not NAME=value; ignored." in notices(app)
        assert "line 1 is not NAME=value" in log_text(app)


def test_env_example_lists_every_variable_nexus_reads():
    """.env.example said it lists the variables, and lacked six (a trial), and said TRACE
    reads it, which the README says it does not."""
    from nexus.config import ENV_MAP
    from nexus.httpguard import TOKEN_ENV

    text = (Path(__file__).parent.parent / ".env.example").read_text(encoding="utf-8")
    for name in [*ENV_MAP, TOKEN_ENV, "NEXUS_DATA_DIR"]:
        assert name in text, name
    assert "TRACE, the library,\n# reads no .env" in text

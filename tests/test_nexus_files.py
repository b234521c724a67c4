"""/save and /export to a place the user names: a file that cannot be written is said in
words with the user's own path (never a raw exception or the engine's temporary file), and
a missing folder is made and said (Pilot tests against the scripted server)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from test_nexus_app import chat_reply, log_text, make_config, notices, ready, type_and_send, wait_for

from nexus.app import NexusApp
from nexus.paths import folders_made, make_folders, write_problem


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_write_problem_names_the_path_in_words(tmp_path):
    target = tmp_path / "x.json"
    temp = OSError(errno.ENOENT, "No such file or directory", str(tmp_path / ".tmp-abc.json"))
    assert write_problem(target, temp) == f"{target} could not be written (the folder {tmp_path} does not take new files)"
    cases = {errno.EACCES: "permission denied", errno.EROFS: "read-only file system",
             errno.ENOSPC: "the disk is full", errno.EISDIR: "it is a folder"}
    for code, words in cases.items():
        assert write_problem(target, OSError(code, "x", "/tmp/.tmp-1.json")) == f"{target} could not be written ({words})"
    # a file where a folder should be
    (tmp_path / "f").write_text("")
    with pytest.raises(NotADirectoryError) as caught:
        make_folders(tmp_path / "f" / "sub")
    assert write_problem(tmp_path / "f" / "sub" / "x.md", caught.value).endswith(f"({tmp_path / 'f'} is a file, not a folder)")
    assert not (tmp_path / "f" / "sub").exists()
    # folders made, outermost first, and said
    made = make_folders(tmp_path / "a" / "b")
    assert made == [tmp_path / "a", tmp_path / "a" / "b"] and (tmp_path / "a" / "b").is_dir()
    assert make_folders(tmp_path / "a" / "b") == [] and folders_made([]) == ""
    assert folders_made(made[1:]) == f" (made the folder {tmp_path / 'a' / 'b'})"
    assert folders_made(made) == f" (made the folders {tmp_path / 'a'} and {tmp_path / 'a' / 'b'})"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux), where no file can be made")
async def test_save_and_export_that_cannot_write_say_why_with_the_users_path(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/save /proc/x.json")
        await wait_for(pilot, lambda: "Not saved" in notices(app))
        await type_and_send(pilot, app, "/export /proc/x.md")
        await wait_for(pilot, lambda: "Not exported" in notices(app))
        said = notices(app)
        assert "Not saved: /proc/x.json could not be written (the folder /proc does not take new files)" in said
        assert "Not exported: /proc/x.md could not be written (the folder /proc does not take new files)" in said
        for raw in (".tmp-", "Errno", "failed:", "FileNotFoundError"):
            assert raw not in said
        assert "Errno" not in log_text(app) and "/export failed" not in log_text(app)


async def test_save_and_export_make_a_missing_folder_and_say_so(server, tmp_path, minilm, data_dir):
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    saved, exported = tmp_path / "new" / "dir" / "x.json", tmp_path / "other" / "x.md"
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, f"/save {saved}")
        await wait_for(pilot, lambda: "Saved the tree" in notices(app))
        assert f"Saved the tree to {saved} (made the folders {tmp_path / 'new'} and {saved.parent})." in notices(app)
        assert json.loads(saved.read_text())["format"] == "trace-ctree"
        await type_and_send(pilot, app, f"/export {exported}")
        await wait_for(pilot, lambda: "Exported 1 exchange to" in notices(app))
        assert f"to {exported} (made the folder {exported.parent})." in notices(app)
        # a path with spaces, unquoted (Tab completes it so): it gave a bare "Usage: /export …"
        spaced = tmp_path / "folder with space" / "my notes.md"
        await type_and_send(pilot, app, f"/export {spaced}")
        await wait_for(pilot, lambda: spaced.exists() and f"to {spaced}" in notices(app))
        await type_and_send(pilot, app, f"/save {spaced.with_suffix('.json')}")
        await wait_for(pilot, lambda: spaced.with_suffix(".json").exists())
        # the folder is there now: a second save says nothing about folders
        await type_and_send(pilot, app, f"/save {saved}")
        # and ends with the path, no full stop glued to it (copied, "….json." named no file)
        await wait_for(pilot, lambda: notices(app).endswith(f"Saved the tree to {saved}"))


async def test_save_and_export_into_a_folder_write_their_own_name_there(server, tmp_path, minilm, data_dir):
    """A new folder typed with its "/" got a file of the folder's name (no extension), and
    /save refused an existing folder that /export wrote into (a trial): both write the
    session's file, by its default name, inside the folder."""
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    new, old = tmp_path / "newdir", tmp_path / "with space"
    old.mkdir()
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, f"/export {new}/")
        await wait_for(pilot, lambda: "Exported 1 exchange" in notices(app))
        assert new.is_dir() and [p.suffix for p in new.iterdir()] == [".md"], list(new.iterdir())
        await type_and_send(pilot, app, f"/save {old}")
        await wait_for(pilot, lambda: (old / "s.json").exists())
        await type_and_send(pilot, app, f"/save {new}/")
        await wait_for(pilot, lambda: (new / "s.json").exists())
        assert json.loads((new / "s.json").read_text())["format"] == "trace-ctree"


async def test_an_option_a_command_does_not_take_is_refused_not_written_as_a_name(server, tmp_path, minilm,
                                                                                 data_dir, monkeypatch):
    """/save --pretty wrote a file named "--pretty" where Nexus started, /export … --x one
    named " --x", and /system --bogus became the system prompt (a trial)."""
    server.respond(chat_reply("Noted."))
    monkeypatch.chdir(tmp_path)
    app = NexusApp(make_config(server.base_url, tmp_path), tmp_path / "s.db", embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My cat is called Miso.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        out = tmp_path / "out"
        for line, said in (("/save --pretty", "(--pretty is no option of /save)"),
                           (f"/export {out}/ --tree --x", "(--x is no option of /export)"),
                           ("/system --bogus", "(--bogus is no option of /system)")):
            await type_and_send(pilot, app, line)
            await wait_for(pilot, lambda said=said: said in notices(app))
            assert app.query_one("#prompt").value == line  # given back to correct
            app.query_one("#prompt").value = ""
        assert not (tmp_path / "--pretty").exists() and not out.exists()
        assert app.session.settings.system == ""
        await type_and_send(pilot, app, "/export --tree --tree")  # the option it takes still works
        await wait_for(pilot, lambda: "with the topic outline" in notices(app))
        assert not (tmp_path / "--tree").exists()  # given twice, it named a file (a trial)
        await type_and_send(pilot, app, f"/export {out}/ --tree")
        await wait_for(pilot, lambda: notices(app).count("with the topic outline") == 2)

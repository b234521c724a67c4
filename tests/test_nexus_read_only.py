"""Nexus on a session another process writes (issue 10.1): it opens the session
read-only, says so in words, lets the user read and search it, and refuses to send
with the reason while keeping the typed text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_nexus_app import chat_reply, make_config, notices, ready, type_and_send, wait_for

from nexus.app import NexusApp
from nexus.widgets import UserMessage
from trace_core import CTree

HOLDER = """
import sys, time
from trace_core import CTree
from trace_core.embedders import MiniLMEmbedder
tree = CTree.open(sys.argv[1], judge="embedding", embed_fn=MiniLMEmbedder())
tree.add([{"role": "user", "content": "My bicycle is a green Peugeot from 1982."},
          {"role": "assistant", "content": "A classic steel frame."}])
print("HOLDING", flush=True)
sys.stdin.readline()
tree.vdb.close()
print("RELEASED", flush=True)
"""


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NEXUS_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def start_holder(path: Path) -> subprocess.Popen:
    root = Path(__file__).parent.parent
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stdout.readline().strip() == "HOLDING"
    return proc


async def test_a_session_written_elsewhere_opens_read_only(server, tmp_path, minilm, data_dir):
    path = tmp_path / "shared.db"
    holder = start_holder(path)
    try:
        app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            assert app.session.read_only and app.session.tree.read_only
            said = notices(app)
            assert f"open in another Nexus (pid {holder.pid}): opened read-only" in said
            assert "/new starts another session" in said
            assert "READ-ONLY" in app.sub_title  # always in sight, not only when a send is refused
            assert len(app.session.tree.exchanges) == 1
            # reading and searching work
            assert app.session.search("which bicycle do I have?")
            # sending is refused with the reason; the text goes back to the input
            await type_and_send(pilot, app, "Remember that I sold it.")
            await wait_for(pilot, lambda: "Not sent: This session is open in another Nexus" in notices(app))
            assert app.query_one("#prompt").value == "Remember that I sold it."
            # given back selected: a command typed next is not glued to it (it was, and the
            # line "Remember that I sold it./rename other" was refused as "Not sent")
            await pilot.press(*"/stats")
            assert app.query_one("#prompt").value == "/stats"
            assert "Remember that I sold it." not in [m.text for m in app.query(UserMessage)]
            assert not server.chat_requests()  # nothing went to the model
            # /ingest is refused before any model is swapped (it swapped, described, then threw it away)
            from PIL import Image

            Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "red.png")
            await type_and_send(pilot, app, f"/ingest {tmp_path / 'red.png'}")
            await wait_for(pilot, lambda: "/ingest: This session is open in another Nexus" in notices(app))
            assert "Nothing was changed" in notices(app)
            assert not [r for r in server.state.requests if r.path.startswith(("/api/", "/v1/chat"))]
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "RELEASED"
        holder.wait(10)
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm, read_only=True)
    assert [x.user for x in tree.exchanges] == ["My bicycle is a green Peugeot from 1982."]
    tree.vdb.close()


async def test_a_read_only_window_writes_once_the_other_nexus_has_closed(server, tmp_path, minilm, data_dir):
    """The second window stayed read-only after the first one quit: sending still said
    "open in another Nexus (pid …)" and /open said "already open". Now a message sent then
    reopens the session to write and goes; /open says why while the other still writes."""
    from test_nexus_app import chat_reply

    server.respond(chat_reply("Noted: sold."))
    path = tmp_path / "shared.db"
    holder = start_holder(path)
    released = False
    try:
        app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            assert app.session.read_only
            await type_and_send(pilot, app, f"/open {path}")
            await wait_for(pilot, lambda: "shared is open here read-only: another Nexus still writes it" in notices(app))
            # /retry said "Regenerating the reply…", then refused and left the old message in the input
            await type_and_send(pilot, app, "/retry")
            await wait_for(pilot, lambda: "Cannot retry here: This session is open in another Nexus" in notices(app))
            assert "Regenerating" not in notices(app) and app.query_one("#prompt").value == ""
            # a change refused here is said in words, as a warning: no "ReadOnlySessionError"
            # in the log, no "failed" (a trial)
            from test_nexus_app import log_text

            await type_and_send(pilot, app, "/system Answer briefly.")
            await wait_for(pilot, lambda: "/system: This session is open in another Nexus" in notices(app))
            assert "Nothing was changed." in notices(app) and "ReadOnlySessionError" not in log_text(app)
            # and nothing was: the refused prompt and value were used anyway, and exported (a trial)
            assert app.session.settings.system == ""
            await type_and_send(pilot, app, "/set max_tokens 7")
            await wait_for(pilot, lambda: notices(app).count("Nothing was changed.") == 2)
            assert app.session.settings.max_tokens is None
            # refused at once, in the same words: /rename reopened the session to find out (its
            # banner said again) and /reorganize "failed" (a trial)
            before = app.session
            for command, said in (("/rename bikes", "Not renamed: This session is open in another Nexus"),
                                  ("/reorganize", "/reorganize: This session is open in another Nexus"),
                                  ("/undo-reorganize", "/undo-reorganize: This session is open in another Nexus")):
                await type_and_send(pilot, app, command)
                await wait_for(pilot, lambda said=said: said in notices(app))
            assert app.session is before and "failed" not in notices(app)  # not closed and opened again
            assert app.session.read_only and path.exists()
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.stdout.readline().strip() == "RELEASED"
            holder.wait(10)
            released = True
            # a file read-only for another reason (its permissions) is not reopened, lock or not
            assert app.session.held_elsewhere
            app.session.held_elsewhere = False
            assert not app.reopen_if_writable() and app.session.read_only
            app.session.held_elsewhere = True
            await type_and_send(pilot, app, "Remember that I sold it.")
            await wait_for(pilot, lambda: "it is open here to write now" in notices(app))
            await wait_for(pilot, lambda: app.session is not None and not app.session.read_only
                           and len(app.session.tree.exchanges) == 2)
            assert app.session.tree.exchanges[-1].user == "Remember that I sold it."
            assert app.query_one("#prompt").value == ""
    finally:
        if not released:
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(10)
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm, read_only=True)
    assert [x.user for x in tree.exchanges] == ["My bicycle is a green Peugeot from 1982.", "Remember that I sold it."]
    tree.vdb.close()


def test_the_unanswered_note_of_a_read_only_session_does_not_offer_ctrl_r():
    """In a read-only window the note said "press Ctrl+R to send it", and Ctrl+R then
    said "Not sent: … read-only" (a trial)."""
    from types import SimpleNamespace

    from nexus.replies import Replies

    def note(read_only: bool, n: int) -> str:
        app = SimpleNamespace(session=SimpleNamespace(read_only=read_only), resend_key=lambda: "Ctrl+R")
        return Replies.unsent_note(app, n)

    assert note(False, 1) == "1 message above has no answer yet: press Ctrl+R to send it."
    assert note(True, 1) == ("1 message above has no answer yet: this session is open read-only here, so it waits "
                             "for the Nexus that writes it.")
    assert "Ctrl+R" not in note(True, 3) and "they wait" in note(True, 3)


async def test_delete_of_a_session_open_elsewhere_is_refused_before_it_asks(server, tmp_path, minilm, data_dir):
    """/delete asked "for good? Type it again to confirm", then refused: the session was
    open in another Nexus (a trial). Refused at once now."""
    from nexus import sessions

    other = sessions.resolve("busy")
    holder = start_holder(other)
    try:
        server.respond(chat_reply("Noted."))
        app = NexusApp(make_config(server.base_url, tmp_path), sessions.resolve("mine"), embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            await type_and_send(pilot, app, "/delete busy")
            await wait_for(pilot, lambda: "Not deleted: busy is open in another Nexus" in notices(app))
            assert "for good?" not in notices(app) and other.exists()
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(10)


def release(holder: subprocess.Popen) -> None:
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "RELEASED"
    holder.wait(10)


@pytest.mark.parametrize("fate", ["deleted", "renamed"])
async def test_a_read_only_window_follows_a_rename_and_never_refills_a_deleted_session(server, tmp_path, minilm,
                                                                                        data_dir, fate):
    """The other Nexus deleted (or renamed) the session this window reads, then closed it:
    the next message reopened it "to write" as a new, empty file of the old name, and the
    conversation on screen was gone (a trial). A renamed session is followed to its new
    name; a deleted one stores nothing and the message goes back to the input."""
    from nexus import sessions

    server.respond(chat_reply("Noted."))
    path = tmp_path / "shared.db"
    holder = start_holder(path)
    try:
        app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(app, pilot)
            assert app.session.read_only and app.session.held_elsewhere
            release(holder)
            if fate == "deleted":
                sessions.delete(path)
            else:
                sessions.move(path, tmp_path / "bikes.db")
            await type_and_send(pilot, app, "Remember that I sold it.")
            if fate == "deleted":
                await wait_for(pilot, lambda: "shared was deleted in the other window" in notices(app))
                assert app.query_one("#prompt").text == "Remember that I sold it."
                assert not path.exists() and app.session.read_only
                await type_and_send(pilot, app, "Still there?")
                await wait_for(pilot, lambda: notices(app).count("shared was deleted in the other window") == 2)
                assert not path.exists()
            else:
                await wait_for(pilot, lambda: "renamed this session to bikes" in notices(app))
                await wait_for(pilot, lambda: app.session is not None and not app.session.read_only
                               and len(app.session.tree.exchanges) == 2)
                assert app.session_path == tmp_path / "bikes.db" and not path.exists()
    finally:
        if holder.poll() is None:
            release(holder)
    if fate == "renamed":
        tree = CTree.open(str(tmp_path / "bikes.db"), judge="embedding", embed_fn=minilm, read_only=True)
        assert [x.user for x in tree.exchanges] == ["My bicycle is a green Peugeot from 1982.",
                                                    "Remember that I sold it."]
        tree.vdb.close()


def test_a_session_held_by_a_proxy_says_so_not_another_nexus(tmp_path):
    """A window told "open in another Nexus (pid N)" while N was the proxy (a trial)."""
    import subprocess
    import sys
    import time

    from nexus.session_view import read_only_reason
    from trace_core import SessionLockedError

    proxy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "proxy"])
    try:
        deadline = time.monotonic() + 10
        while b"proxy" not in open(f"/proc/{proxy.pid}/cmdline", "rb").read() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the new process shows its own arguments
        said = read_only_reason(SessionLockedError(str(tmp_path / "s.db"), proxy.pid))
    finally:
        proxy.kill()
    assert f"open in a Nexus proxy (pid {proxy.pid}), which keeps the sessions it serves open" in said

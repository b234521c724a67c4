"""/forget in Nexus: asked, confirmed, then gone from the chat, memory, ↑ and the file."""

from __future__ import annotations

import glob
import json

from test_nexus_app import chat_reply, log_text, make_config, notices, ready, type_and_send, wait_for
from test_sessions_app import rendered

from nexus.app import NexusApp
from nexus.forgetting import asks_to_forget, forget_question, forget_request
from nexus.prompt_history import history_path
from nexus.widgets import MemoryTree, PastExchangeView, UserMessage
from trace_core import CTree

SECRET = "97531"


def file_bytes(path) -> bytes:
    return b"".join(open(f, "rb").read() for f in glob.glob(f"{path}*") if not f.endswith(".lock"))


def test_a_message_asking_to_forget_is_told_apart():
    for text in ("Please forget my gym locker code 4471", "forget what I said about Ana", "I want you to forget my PIN",
                 "please, don't remember my address", "Could you please delete my last message",
                 "Remove my locker code from memory", "Do not store this: code 4471"):
        assert asks_to_forget(text), text
    # a trial's: these got the note, and the ones above (the last three) did not
    for text in ("I always forget my keys", "Don't forget the milk", "What did I ask you to forget?",
                 "Delete key is broken on my laptop?", "Forget the milk, buy eggs", "forget me not is a flower",
                 "Erase the whiteboard how-to", "Forget about it, what is 2+2?", "Recite the poem from memory"):
        assert not asks_to_forget(text), text


def test_a_request_names_exchanges_by_number_or_by_every_word(minilm):
    tree = CTree(judge="embedding", embed_fn=minilm)
    for u in ("My gym locker code is 97531.", "I go to the gym on Mondays.", "Locker rooms are cold."):
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": "Noted."}])
    assert forget_request(tree.exchanges, ["gym", "LOCKER"]).indices == (0,)  # every word, any case
    assert forget_request(tree.exchanges, ["#2", "#0"]).indices == (2, 0)
    assert forget_request(tree.exchanges, ["97531"]).indices == (0,)  # a bare number is a word
    assert forget_request(tree.exchanges, ["#9"]).unknown == ("#9",)
    assert forget_request(tree.exchanges, ["loc"]).indices == ()  # words, not parts of them
    tree.forget([tree.exchanges[0]])
    assert forget_request(tree.exchanges, ["#0"]).indices == ()  # forgotten already


def test_a_japanese_word_inside_a_sentence_names_its_exchanges(hash_embed):
    """"/forget ポチ" said "no exchange holds every word", beside "ポチは毎朝公園を散歩します。"
    (a trial): an unspaced Japanese sentence was one word."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    for u in ("私の犬の名前はポチです。柴犬です。", "ポチは毎朝公園を散歩します。", "東京に住んでいます。", "Pochi is a dog's name."):
        tree.add([{"role": "user", "content": u}, {"role": "assistant", "content": "Noted."}])
    assert forget_request(tree.exchanges, ["ポチ"]).indices == (0, 1)
    assert forget_request(tree.exchanges, ["ポチ", "公園"]).indices == (1,)  # every word given
    assert forget_request(tree.exchanges, ["ポチ"], unanswered=["ポチの写真を見せて"]).unanswered == ("ポチの写真を見せて",)


def test_the_question_lists_every_exchange_it_would_erase(hash_embed):
    """A common word matched 13 exchanges; 8 were listed, then "… and 5 more", before an
    erasure that cannot be undone (a trial)."""
    tree = CTree(judge="embedding", embed_fn=hash_embed)
    for k in range(40):
        tree.add([{"role": "user", "content": f"the note number {k}"}, {"role": "assistant", "content": "Noted."}])
    tree.add([{"role": "user", "content": "Something else"}, {"role": "assistant", "content": "Yes."}])
    said = forget_question(tree.exchanges, forget_request(tree.exchanges, ["the"]), "/forget the")
    assert "40 exchanges for good — 40 of the session's 41" in said
    assert all(f"#{k}" in said for k in range(40)) and "#40" not in said
    assert said.count("the note number") == 30 and "and 10 more: #30, #31" in said
    one = forget_question(tree.exchanges, forget_request(tree.exchanges, ["#3"]), "/forget #3")
    assert "of the session's" not in one and "1 exchange for good:" in one


async def test_forget_asks_then_erases_from_chat_memory_prompt_history_and_file(server, tmp_path, minilm):
    path = tmp_path / "s.db"
    tree = CTree.open(str(path), judge="embedding", embed_fn=minilm)
    tree.add([{"role": "user", "content": f"Old note: the safe code is {SECRET}."},
              {"role": "assistant", "content": "Noted the safe code."}])
    tree.add([{"role": "user", "content": "My sister Ana lives in Porto."},
              {"role": "assistant", "content": "Porto is lovely."}])
    tree.close()
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"My gym locker code is {SECRET}.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 3)
        await type_and_send(pilot, app, "/stats")  # a prompt ↑ keeps
        assert SECRET in history_path().read_text()
        await type_and_send(pilot, app, f"/search {SECRET}")  # a command naming it is recalled by ↑ too
        await wait_for(pilot, lambda: "Memory search" in notices(app))
        await type_and_send(pilot, app, f"/forget {SECRET}")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        assert "#0" in notices(app) and "#2" in notices(app) and "#1 " not in notices(app)
        assert not app.session.tree.exchanges[0].archived  # only asked so far
        await type_and_send(pilot, app, f"/forget {SECRET}")
        await wait_for(pilot, lambda: "Forgot #0, #2" in notices(app))
        tree = app.session.tree
        assert [x.forgotten for x in tree.exchanges] == [True, False, True]
        # the chat: the reopened exchange says forgotten, the live one's message is gone
        past = [v for v in app.query(PastExchangeView) if v.exchange.index == 0]
        assert past and "forgotten" in rendered(past[0]) and SECRET not in rendered(past[0])
        assert not [m for m in app.query(UserMessage) if SECRET in m.text]
        assert SECRET not in notices(app)  # the question quoted it: it went with it
        await type_and_send(pilot, app, "/memory")  # the last block sent quoted it: not shown any more
        await wait_for(pilot, lambda: "The last memory block was cleared by /forget" in notices(app))
        assert SECRET not in history_path().read_text() and "/stats" in history_path().read_text()
        # the next turn's prompt holds it nowhere (memory block, recent window)
        before = len(server.chat_requests())
        await type_and_send(pilot, app, "What was my locker code?")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 4)
        asked = [r for r in server.chat_requests()[before:] if not r.get("response_format")]
        assert asked and SECRET not in json.dumps(asked) and "Porto" in json.dumps(asked)
        # /memory shows the system text that message went with, memory block included
        await type_and_send(pilot, app, "/memory")
        await wait_for(pilot, lambda: "What the model was sent with \"What was my locker code?\"" in notices(app))
        assert asked[-1]["messages"][0]["content"] in notices(app)
        # the pane's root counts what is in the tree, as its title does (it said 4 of 2)
        await wait_for(pilot, lambda: "ROOT (2 exchanges)" in str(app.query_one(MemoryTree).root.label))
        # /stats and /export count as the pane does; a forgotten one is never called archived
        await type_and_send(pilot, app, "/stats")
        await wait_for(pilot, lambda: "exchanges: 2 (2 forgotten beside them)" in notices(app))
        assert "archived" not in notices(app).split("Statistics of this session:")[-1]
        await type_and_send(pilot, app, f"/export {tmp_path / 'out.md'}")
        await wait_for(pilot, lambda: "Exported 2 exchanges (2 forgotten beside them) to" in notices(app))
    assert SECRET.encode() not in file_bytes(path)
    # reopened: the forgotten exchanges show as such
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await wait_for(pilot, lambda: len(app.query(PastExchangeView)) == 4)
        views = {v.exchange.index: rendered(v) for v in app.query(PastExchangeView)}
        assert "forgotten" in views[0] and "forgotten" in views[2] and "Porto" in views[1]
        # the log's line for the opened session counts as the pane does (it said "4 exchanges": a trial)
        assert f"session {path} (2 exchanges (2 forgotten beside them))" in log_text(app)
        await type_and_send(pilot, app, "/forget #0")
        await wait_for(pilot, lambda: "forgotten already" in notices(app))


async def test_forget_reaches_retry_versions_unanswered_messages_and_other_traces(server, tmp_path, minilm):
    """A trial: a /retry's earlier version kept the code in the file; an unanswered
    message holding it was left ("no exchange holds…"); /forget #N left "/search Quuxbank"
    in ↑ and a /tree note naming the topic; a confirmation after /open erased the other
    session's exchange unasked; /retry then sent "[forgotten]" to the model."""
    from scripted_server import Reply

    from nexus import sessions

    state = {"down": False}
    def respond(req):
        if req.get("response_format"):
            return Reply('{"action": "continue"}')
        if state["down"]:
            return Reply("", status=500)
        asked = req["messages"][-1]["content"]
        return Reply("It's Quuxbank 5521." if "PIN" in asked else "Noted.", chunk_delay=0.0)

    server.respond(respond)
    path = sessions.resolve("one")
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, "My bank PIN at Quuxbank is 5521.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/retry")  # the replaced version holds it too
        await wait_for(pilot, lambda: len(app.session.versions.versions) == 2 and app.turn is None)
        await type_and_send(pilot, app, "I like tea.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 2)
        state["down"] = True
        await type_and_send(pilot, app, "Also Quuxbank card 7788?")  # no answer: kept for Ctrl+R
        await wait_for(pilot, lambda: app.turn is None and app.session.kept == ["Also Quuxbank card 7788?"])
        state["down"] = False
        await type_and_send(pilot, app, "/search Quuxbank")
        await wait_for(pilot, lambda: "Memory search: Quuxbank" in notices(app))
        await type_and_send(pilot, app, "/search 5521")  # only the number: a word only it held
        await wait_for(pilot, lambda: "Memory search: 5521" in notices(app))
        await type_and_send(pilot, app, "/tree")
        await wait_for(pilot, lambda: "ROOT" in notices(app) and "Quuxbank" in notices(app).split("Memory search")[-1])
        # asked in one session, "confirmed" in another: asked again there
        await type_and_send(pilot, app, "/forget #0")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        await type_and_send(pilot, app, "/new")
        await wait_for(pilot, lambda: app.session is not None and app.session_path != path
                       and app.session.tree is not None)
        await type_and_send(pilot, app, "Hello there.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/forget #0")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        assert not app.session.tree.exchanges[0].archived and "Hello there" in notices(app)
        await type_and_send(pilot, app, "/open one")
        await wait_for(pilot, lambda: app.session is not None and app.session_path == path
                       and app.session.tree is not None and app.embedder_state == "ready")
        # back in the session it was asked in: asked again, not done unseen (a re-trial)
        await type_and_send(pilot, app, "/forget #0")
        await wait_for(pilot, lambda: "again within 30 s to confirm" in notices(app))
        assert not app.session.tree.exchanges[0].archived
        # by words: the exchange, the unanswered message (listed), the versions
        await type_and_send(pilot, app, "/forget quuxbank")
        assert "/forget" not in history_path().read_text()  # never kept: it names what is to go
        await wait_for(pilot, lambda: "(not answered)" in notices(app))
        await type_and_send(pilot, app, "/forget quuxbank")
        await wait_for(pilot, lambda: "Forgot #0 and 1 message without an answer" in notices(app))
        assert app.session.kept == [] and app.session.versions.versions == []
        assert "quuxbank" not in notices(app).lower()  # the /search and /tree notes went with it
        assert "quuxbank" not in history_path().read_text().lower() and "5521" not in history_path().read_text()
        await type_and_send(pilot, app, "/memory")
        await wait_for(pilot, lambda: "cleared by /forget" in notices(app))
        # a forgotten newest exchange is not retried
        await type_and_send(pilot, app, "/forget #1")
        await wait_for(pilot, lambda: "again within 30 s" in notices(app))
        await type_and_send(pilot, app, "/forget #1")
        await wait_for(pilot, lambda: "Forgot #1" in notices(app))
        before = len(server.chat_requests())
        await type_and_send(pilot, app, "/retry")
        await wait_for(pilot, lambda: "#1, the newest exchange, was forgotten" in notices(app))
        assert len(server.chat_requests()) == before
    assert b"quuxbank" not in file_bytes(path).lower() and b"5521" not in file_bytes(path)


async def test_a_forget_the_file_refuses_changes_nothing_and_can_be_done_again(server, tmp_path, minilm):
    """A full disk: memory had the exchange archived, the file did not, and a second
    /forget said "forgotten already" while the file still held it (a trial)."""
    path = tmp_path / "s.db"
    server.respond(chat_reply("Noted."))
    app = NexusApp(make_config(server.base_url, tmp_path), path, embed_fn=minilm)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await type_and_send(pilot, app, f"My locker code is {SECRET}.")
        await wait_for(pilot, lambda: len(app.session.tree.exchanges) == 1)
        await type_and_send(pilot, app, "/forget locker")
        await wait_for(pilot, lambda: "again within 30 s" in notices(app))
        app.session.tree.vdb.con.execute("PRAGMA query_only = ON")  # the file refuses writes
        await type_and_send(pilot, app, "/forget locker")
        await wait_for(pilot, lambda: "Nothing was forgotten" in notices(app))
        assert not app.session.tree.exchanges[0].archived  # as the file holds it
        for _ in range(2):  # the file is read again: writable
            await type_and_send(pilot, app, "/forget locker")
            await pilot.pause(0.2)
        await wait_for(pilot, lambda: "Forgot #0" in notices(app))
    assert SECRET.encode() not in file_bytes(path)

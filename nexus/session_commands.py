"""Slash commands on session files: /new, /open, /rename, /delete, /sessions, /save, /load, /export."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from trace_core import SessionDamagedError, SessionFileError

from . import commands as C
from . import sessions
from .chat import saved_rows, saved_unstored
from .failures import TaskFailed, background
from .long_tasks import Cancelled
from .paths import ends_a_sentence, folders_made, make_folders, private_dir, write_problem
from .text import counted, exchanges_said, quoted


def human_size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class SessionCommands:
    """NexusApp's session-file commands (cmd_* run by run_command)."""

    def named_session(self, name: str) -> Path | None:
        """The session called ``name``, or None after saying there is none."""
        path = sessions.find(name)
        if path is None:
            self.chat_notice(f"No session named {quoted(name, 80)}. /sessions lists them.", "warning")
        return path

    def held_only_here(self, command: str) -> bool:
        """(UI thread) The open session holds what only this window has (the file refused
        it: a full disk), and closing it for ``command`` would lose it: said, and True,
        unless the same command was typed within 30 s before (the quit's rule; a switch lost
        them unsaid: a trial)."""
        s = self.session
        left = s.only_here() if s is not None else []
        if left and s.tree is not None and not s.tree.closed:
            s.keep_again()  # space may have been freed meanwhile (a quit tries again too)
            left = s.only_here()
        if not left:
            return False
        asked = self._leave_asked.pop(command, None)
        if asked is not None and time.monotonic() - asked <= 30:
            return False
        self._leave_asked[command] = time.monotonic()
        answered = sum(1 for _, reply in left if reply)
        what = " and ".join(([counted(answered, "answered exchange")] if answered else [])
                            + ([counted(len(left) - answered, "message without an answer")]
                               if len(left) > answered else []))
        one = len(left) == 1
        self.chat_notice(f"Not done yet: {what} {'is' if one else 'are'} only in this window — the session file "
                         f"could not be written — and closing {self.session_path.stem} for {command.split()[0]} "
                         f"would lose {'it' if one else 'them'}. Free some space and press {self.resend_key()} to "
                         f"store {'it' if one else 'them'}, or /save PATH on another disk keeps "
                         f"{'it' if one else 'them'}; type {command} again within 30 s to go on anyway.", "error")
        return True

    def switch_session(self, path: Path, announce: str, command: str = "") -> None:
        """Close the open session (messages queued in it stay there, unsent) and open ``path``.
        With no session open, queued messages go to the one that opens."""
        if self.refused_while_busy() or command and self.held_only_here(command):
            return
        queued = self.take_queued_messages() if self.session is not None else []
        if self.session is not None and self.turn is not None and not self.turn.settled.is_set():
            # it is stopped and stored on the way (said: the switch said nothing of it)
            if self.turn.partial.strip():
                announce += (f" The reply in progress was stopped; what it had said is stored in "
                             f"{self.session_path.stem}, marked cancelled.")
            else:  # before its first word nothing is stored: the message is kept unanswered
                announce += (f" The reply was stopped before its first word: your message stays in "
                             f"{self.session_path.stem}, not answered ({self.resend_key()} sends it there).")
        if queued:
            announce += (f" {counted(len(queued), 'message')} you queued stayed in {self.session_path.stem}, "
                         f"unsent ({self.resend_key()} sends {'it' if len(queued) == 1 else 'them'} there).")
        self.open_session(path, announce, queued)

    def cmd_new(self, args: list[str]) -> None:
        if args:
            raise C.UsageError(C.BY_NAME["new"].usage)
        path = sessions.new_session_path()
        gone = self.session is not None and not self.outbox and self.removed_when_left(self.session)
        old = f" ({self.session_path.stem} stays: /open {self.session_path.stem})" if self.session and not gone else ""
        self.switch_session(path, f"New session {path.stem}.{old}", "/new")

    def cmd_open(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["open"].usage)
        path = self.named_session(" ".join(args))  # "my trip": the name /rename wrote my-trip
        if path is None:
            return
        if self.session is not None and path == self.session_path:
            if self.session.read_only and not self.reopen_if_writable():
                self.chat_notice(f"{path.stem} is open here read-only: another Nexus still writes it."
                                 if self.session.held_elsewhere else self.session.read_only_reason)
            elif not self.session.read_only:
                self.chat_notice(f"{path.stem} is already open.")
            return
        self.switch_session(path, f"Opened {path.stem}.", f"/open {' '.join(args)}")

    def cmd_rename(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["rename"].usage)
        self.need_session()
        if self.refused_read_only("Not renamed") or self.refused_while_busy():
            return
        try:  # a refused name is said at once: the session is not closed and opened again for it
            sessions.rename_target(self.session_path, " ".join(args))
        except ValueError as exc:
            self.chat_notice(f"Not renamed: {exc}.", "warning")
            return
        if self.held_only_here(f"/rename {' '.join(args)}"):  # it closes the file and opens it anew
            return
        # renaming closes the file: at once, it cancelled the reply streaming and answered the
        # message queued behind it first (a trial); queued, it runs in its turn
        if not self.running_queued and (self.turn is not None or self.outbox):
            self.defer_command("/rename " + " ".join(args))
            self.chat_notice("/rename waits for the reply (and the messages queued before it), then runs.")
            return
        self.rename_worker(" ".join(args))  # "my chat" becomes the file name my-chat

    @background(group="session", exclusive=True)
    def rename_worker(self, new_name: str) -> None:
        old = self.session_path
        # the same conversation under another name: the chat stays as it is (redrawn from
        # history, it lost the command output and undid a /clear — re-trial)
        pager = self.history
        self.close_session(keep_chat=pager is not None)  # renamed closed: SQLite keeps its -wal beside it by name
        try:
            path = sessions.rename(old, new_name)
        except (ValueError, OSError, sessions.SessionInUse) as exc:
            self._open(old, f"Not renamed: {exc}.", shown=pager)
            return
        try:  # at once: a terminal closed before the session reopened started an empty one next time
            sessions.remember(path)
        except OSError:
            pass
        told = "" if path.stem == new_name else f" (the name you typed, {quoted(new_name, 80)}, is written {path.stem} as a file name)"
        self._open(path, f"Renamed {old.stem} to {path.stem}{told}.", shown=pager)

    def cmd_delete(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["delete"].usage)
        path = self.named_session(" ".join(args))  # "my trip": the name /rename wrote my-trip
        if path is None:
            return
        if path == self.session_path:
            self.chat_notice(f"{path.stem} is the open session: /open or /new another one first.", "warning")
            return
        busy = sessions.in_use_by(path)
        if busy:  # said before asking to confirm, not after (a trial)
            self.chat_notice(f"Not deleted: {busy}.", "warning")
            return
        asked = self._delete_asked.get(path)
        if asked is None or time.monotonic() - asked > 30:
            self._delete_asked[path] = time.monotonic()
            _, size = sessions.footprint(path)
            self.chat_notice(f"Delete {path.stem} ({human_size(size)}) for good? Type /delete {path.stem} "
                             "again within 30 s to confirm.", "warning")
            return
        del self._delete_asked[path]
        try:
            sessions.delete(path)
        except sessions.SessionInUse as exc:
            self.chat_notice(f"Not deleted: {exc}.", "error")
            return
        except OSError as exc:  # "[Errno 1] Operation not permitted: '…'" reached the chat (a trial)
            from .paths import os_problem

            self.chat_notice(f"Not deleted: {os_problem(exc)}.", "error")
            return
        self.chat_notice(f"Deleted {path.stem}.")

    def cmd_repair(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["repair"].usage)
        name = " ".join(args)  # a name with a space, as /open takes it ("Reise 2027" was a bare usage line)
        path = self.named_session(name)
        if path is None or path == self.session_path and self.held_only_here(f"/repair {name}"):
            return
        self.repair_worker(path)

    @background(group="session", exclusive=True)
    def repair_worker(self, path: Path) -> None:
        from trace_core.repair import salvage

        if path == self.session_path and self.session is not None:
            problem = sessions.open_problem(path)
            if problem is None:
                self.call_from_thread(self.chat_notice, f"{path.stem} is open here and reads well: nothing to repair.")
                return
            if not isinstance(problem, SessionDamagedError):  # held by another program: closing it would not help
                self.call_from_thread(self.chat_notice, f"{path.stem} is not damaged: {problem}. It stays open; "
                                      "nothing was repaired.", "warning")
                return
            # damaged while open (its memory could not be read): it was said to read well, and
            # the way to /repair it was to open another first (a trial)
            self.close_session()  # its chat goes: the repaired file is shown as it opens again
        failed_here = self.session is None and path == self.session_path  # it could not open in this window
        if not failed_here and sessions.open_problem(path) is None:
            # a sound file is left as it is (it was rebuilt, the original kept as "damaged")
            self.call_from_thread(self.chat_notice, f"{path.stem} passes the file check: nothing to repair. "
                                  f"/open {path.stem} opens it.")
            return
        try:
            report = salvage(str(path))
        except SessionFileError as exc:
            raise TaskFailed("Not repaired", "warning") from exc
        if self.session is None and path == self.session_path:  # the session that could not open: open it now
            self.call_from_thread(self.open_session, path, f"Repaired {path.stem}: {report.summary()}.")
        else:
            self.call_from_thread(self.chat_notice, f"Repaired {path.stem}: {report.summary()}. /open {path.stem} "
                                  "opens it.")

    def cmd_sessions(self, args: list[str]) -> None:
        rows = sessions.list_sessions()
        if not rows:
            self.chat_notice("No sessions yet.")
            return
        lines = ["Sessions (newest first; /open NAME switches, * is open):"]
        shown = rows[:30]
        width = max(len(p.stem) for p, _, _ in shown)  # the columns line up whatever the names
        for p, mtime, size in shown:
            mark = "*" if p == self.session_path and self.session is not None else " "
            lines.append(f" {mark} {p.stem:<{width}}  {time.strftime('%Y-%m-%d %H:%M', time.localtime(mtime))} "
                         f"{human_size(size):>9}")
        if len(rows) > 30:
            lines.append(f"   … and {len(rows) - 30} more")
        self.chat_notice("\n".join(lines))

    def cmd_save(self, args: list[str]) -> None:
        C.refuse_unknown_options("save", args)
        s = self.need_session()
        default = self.session_path.with_suffix(".json")
        try:
            path = file_in(args, default)
        except OSError as exc:  # a name too long for the file system, a loop of links
            self.file_not_written("Not saved", Path(" ".join(args)), exc)
            return
        problem = sessions.export_refusal(path, self.session_path)
        if problem:
            self.chat_notice(f"Not saved: {problem}. Choose another file (e.g. {self.session_path.stem}.json).",
                             "error")
            return
        if not self.replacing_confirmed("save", path, sessions.save_of):
            return
        waiting = self.unanswered_now(s)
        try:
            made = make_folders(path.parent)
            s.tree.save(str(path), save_conversation=True,
                        meta={**saved_rows(s, waiting),
                              sessions.SAVED_FROM_KEY: self.session_path.stem})
        except OSError as exc:  # said with the user's path: the engine writes a temporary file first
            self.file_not_written("Not saved", path, exc)
            return
        said = f"Saved the tree{also_held(waiting, s.unstored)} to {path}{folders_made(made)}"
        self.chat_notice(ends_a_sentence(said, path))

    def unanswered_now(self, session) -> list[str]:
        """The messages with no answer now: those kept for Ctrl+R and the one being answered
        (an /export during a reply left it out, and /save counted one message less than it
        wrote: a trial)."""
        waiting = list(session.kept)
        turn = self.turn
        if turn is not None and turn.stored is None and not turn.replace and turn.text not in waiting:
            waiting.append(turn.text)
        return waiting

    def replacing_confirmed(self, command: str, path: Path, made_of) -> bool:
        """Whether ``/command path`` may write over what is at ``path``: nothing, or an
        earlier one of this session (``made_of(path)`` names the session a file of the
        command's kind was made of, None when it is no such file); anything else — a file
        of the user's, another session's export — only when the same command is typed again
        within 30 s (``/export`` and ``/save`` replaced a 3 MB text file and an image, then
        another session's only backup, without asking: trials)."""
        size = sessions.replaced_file(path)
        if size is None:
            return True
        owner = made_of(path)
        if owner == self.session_path.stem:
            return True
        key = (command, path.resolve(), self.session_path)  # confirmed in this session only (it carried over: a trial)
        asked = self._replace_asked.pop(key, None)
        if asked is not None and time.monotonic() - asked <= 30:
            return True
        self._replace_asked[key] = time.monotonic()
        other = "export" if command == "save" else "save"
        what = (f"holds a /{other} of Nexus's, not a /{command}" if (sessions.export_of if other == "export"
                                                                     else sessions.save_of)(path) is not None else
                f"is no {command} of Nexus's" if owner is None else
                f"holds the /{command} of session {owner}" if owner else
                f"holds an earlier /{command} that does not say of which session")
        self.chat_notice(f"{path} exists ({human_size(size)}) and {what}: type the same /{command} again within 30 s "
                         "to replace it, or choose another file.", "warning")
        return False

    def file_not_written(self, what: str, path: Path, exc: OSError) -> None:
        problem = write_problem(path, exc)
        self.chat_notice(f"{what}: {problem}. Choose another place.", "error")
        self.log_line(f"{what}: {problem} [{type(exc).__name__} {exc.errno}]", "warning")

    def cmd_load(self, args: list[str]) -> None:
        if not args:
            raise C.UsageError(C.BY_NAME["load"].usage)
        path = Path(" ".join(args)).expanduser()  # a path with spaces, unquoted, as /save took it
        if path.is_dir() or not path.exists():  # said before any work ("[Errno 21] Is a directory", a trial)
            self.chat_notice(f"Cannot load {path}: {'it is a folder' if path.is_dir() else 'there is no such file'}; "
                             "/load takes a .json file that /save wrote.", "warning")
            return
        from .export import EXPORT_TITLE

        if sessions.starts_with(path, f"# {EXPORT_TITLE}".encode()):  # "not valid JSON (truncated or corrupt?)" alarmed (a trial)
            self.chat_notice(f"Cannot load {path}: it is an /export, Markdown to read; /load takes a .json file "
                             "that /save wrote.", "warning")
            return
        if sessions.starts_with(path, sessions.SQLITE_MAGIC):  # "is not a text file" named no way to it (a trial)
            resolved = path.resolve()
            how = (f"/open {resolved.stem} opens it" if resolved.parent == sessions.sessions_dir().resolve()
                   else f"nexus --session {shlex.quote(str(resolved))} opens it")
            self.chat_notice(f"Cannot load {path}: it is a SQLite database (a session file?), not an export; {how}. "
                             "/load takes a .json file that /save wrote.", "warning")
            return
        if self.refused_while_busy() or self.held_only_here(f"/load {' '.join(args)}"):
            return
        self.cancel_long.clear()
        self.load_worker(path)

    @background(group="sweep")
    def sweep_imports(self) -> None:
        """At start: what a /load stopped by a killed Nexus left goes, and is said."""
        removed = sessions.sweep_unfinished_imports()
        if removed:
            names = ", ".join(removed)
            self.ui(self.chat_notice, f"An unfinished /load ({names}), stopped when Nexus was, was removed: it was "
                    "not a session yet. /load the file again to import it.", "warning")

    @background(group="load", exclusive=True)
    def load_worker(self, path: Path) -> None:
        from trace_core import CTree, VectorDatabase

        stop = self.stop_check()
        target = sessions.imported_session_path(path)
        staging = target.with_name(target.name + ".importing")  # not a session until complete
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if stop():
                raise Cancelled
            if time.monotonic() - last[0] >= 0.5 or done == total:
                last[0] = time.monotonic()
                self.ui(self.show_progress, "load", f"/load {path.name}: imported {done:,}/{total:,} exchanges"
                        + (f" ({self.key_name('cancel')} cancels)" if done < total else ", writing the tree…"))

        try:
            self.ui(self.show_progress, "load", f"/load {path.name}: reading… ({self.key_name('cancel')} cancels)")
            tree = CTree.load(str(path), embed_fn=self.embed_fn, judge="embedding")
            if stop():
                raise Cancelled
            db = VectorDatabase(str(staging))
            try:
                tree.use_store(db, progress=progress)
                for user, reply in saved_unstored(db):  # answered, refused by the full disk they were saved from
                    tree.add([{"role": "user", "content": user}, {"role": "assistant", "content": reply}])
            finally:
                db.close()
            sessions.move(staging, target)
        except Cancelled:
            sessions.discard(staging)
            self.ui(self.end_progress, "load", f"/load {path.name} cancelled: nothing was imported.", "warning")
            return
        except Exception as exc:
            sessions.discard(staging)
            raise TaskFailed("Cannot load it" if str(path) in str(exc) else f"Cannot load {path}") from exc
        done = f"Imported {path} ({exchanges_said(tree.exchanges)}) as a new session {target.stem}."
        self.ui(self.end_progress, "load", done, "info", False)
        self.ui(self.open_session, target, done)  # said once the switch has cleared the chat pane

    def cmd_export(self, args: list[str]) -> None:
        from .export import EXPORT_TITLE, conversation_markdown, default_path, write_private

        C.refuse_unknown_options("export", args, ("--tree",))
        args = list(args)
        with_tree = "--tree" in args
        args = [a for a in args if a != "--tree"]  # "--tree --tree" wrote a file named "--tree" (a trial)
        session = self.need_session()
        try:
            path = file_in(args, default_path(self.session_path))
        except OSError as exc:  # a name too long for the file system, a loop of links
            self.file_not_written("Not exported", Path(" ".join(args)), exc)
            return
        problem = sessions.export_refusal(path, self.session_path)
        if problem:
            self.chat_notice(f"Not exported: {problem}. Choose another file (e.g. {self.session_path.stem}.md).",
                             "error")
            return
        if not self.replacing_confirmed("export", path, sessions.export_of):
            return
        waiting = self.unanswered_now(session)
        text = conversation_markdown(session.tree, f"{EXPORT_TITLE}{self.session_path.stem}", with_tree,
                                     session.settings.system, waiting, session.unstored)
        try:
            if args:
                made = make_folders(path.parent)
            else:  # Nexus's own exports folder, private like its sessions
                made = []
                private_dir(path.parent)
            write_private(path, text)
        except OSError as exc:
            self.file_not_written("Not exported", path, exc)
            return
        self.chat_notice(ends_a_sentence(
            f"Exported {exchanges_said(session.tree.exchanges)}{also_held(waiting, session.unstored)} to "
            f"{path.resolve()}"
            + (" with the topic outline" if with_tree else "") + folders_made(made), path.resolve()))


def also_held(waiting: list[str], unstored: list) -> str:
    """What a /save or /export holds besides the exchanges: the messages with no answer and
    the answered exchanges the session file could not take yet."""
    parts = [f"{counted(len(waiting), 'message')} with no answer"] if waiting else []
    if unstored:
        parts.append(f"{counted(len(unstored), 'answered exchange')} the session file could not take yet")
    return "".join(f" and {p}" for p in parts)


def file_in(args: list[str], default: Path) -> Path:
    """The file ``/save`` or ``/export`` writes: the path typed (with spaces, unquoted, as
    /ingest takes it and Tab completes it), or ``default``'s name inside it when it is a
    folder, or ends with "/" as a new one does (that wrote a file named as the folder: a
    trial); ``default`` when nothing is typed."""
    if not args:
        return default
    typed = " ".join(args)
    path = Path(typed).expanduser()
    if typed.endswith(("/", os.sep)) or path.is_dir():
        return path / default.name
    return path

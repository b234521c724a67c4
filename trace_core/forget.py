"""Forgetting exchanges: their words gone from memory and from the session file.

Archiving keeps an exchange to restore; forgetting is for what must not be kept ("forget
my gym locker code"). The exchange stays in its place in the conversation (indices are
stable), archived, its messages replaced by ``FORGOTTEN``; its vectors, keyword rows and
sentence parts are written again from that text; topic names that used its words are
made again from what is left, and every summary above it is written again; the undo
record of the last reorganisation (a copy of the tree's names and summaries) is dropped.
The file is then purged: deleted pages zeroed, full-text indexes merged, the write-ahead
log emptied, so the words cannot be read back from the file either.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .archive import Archive
from .embedders import Embedder, exchange_vector
from .group_names import GroupNames
from .judges import Judges
from .model import TreeModel
from .nodes import FORGOTTEN, MessageNode, TopicNode
from .persist import TreeStore
from .reorganize import UndoLog
from .sentence_index import SentenceIndex
from .summaries import Summaries
from .textutil import STOPWORDS, DocumentFrequency, ideographic, with_pieces, words_of

_TOKEN = re.compile(r"\w+")  # words and numbers (a code), in any script


def words_in(text: str) -> set[str]:
    """The words and numbers of ``text`` as ``ForgetResult.words`` counts them; an unspaced
    Japanese run also as the words a topic name takes of it (after /forget #0, the topic
    stayed named "名前 ポチ 柴犬" by the dog's name it had forgotten: a trial)."""
    return with_pieces(set(_TOKEN.findall(text.casefold())))


@dataclass(frozen=True)
class ForgetResult:
    forgotten: list[int] = field(default_factory=list)  # exchange indices forgotten now
    renamed: list[tuple[str, str]] = field(default_factory=list)  # topic names made again (old, new)
    undo_dropped: bool = False  # the last reorganisation can no longer be undone
    # the words only the forgotten exchanges held: an app's own copies of them (a search
    # typed, a note shown) can be told by these
    words: frozenset[str] = frozenset()
    # the write-ahead log was emptied; False while another connection reads the file (its
    # old pages stay until the next open), or with no store
    file_purged: bool = False


class Forgetting:
    """Handed the tree model, its archive, the judges and group names (topic names), the
    summaries, the store and sentence index (or ``None``), the undo log, the conversation's word statistics,
    the embedder and the tree's lock."""

    def __init__(self, model: TreeModel, archive: Archive, judges: Judges, group_names: GroupNames,
                 summaries: Summaries, store: TreeStore | None, sentence_index: SentenceIndex | None,
                 undo: UndoLog, words: DocumentFrequency, embedder: Callable[[], Embedder],
                 lock: threading.RLock) -> None:
        self.model = model
        self.archive = archive
        self.judges = judges
        self.group_names = group_names
        self.summaries = summaries
        self.store = store
        self.sentence_index = sentence_index
        self.undo = undo
        self.words = words
        self.embedder = embedder
        self.lock = lock

    def forget(self, exchanges: Iterable[MessageNode], meta: Mapping[str, str | None] | None = None) -> ForgetResult:
        meta = dict(meta or {})
        with self.lock:
            todo = [x for x in dict.fromkeys(exchanges) if not x.forgotten]
            if not todo and not meta:
                return ForgetResult()
            said = with_pieces(set().union(*(words_of(f"{x.user}\n{x.assistant}\n{x.system}") for x in todo)))
            unique = self._only_in(todo)
            homes = [x.parent if x.parent is not None else self.model.find(x.home_id) for x in todo]
            above = [t for h in homes if h is not None and h.is_topic for t in self.model.get_ancestors(h)]
            # asked before archiving: the archive ends the undo itself (``UndoLog.end``)
            had_undo = self.undo.last is not None or (
                self.store is not None and self.store.last_reorganization()[0] is not None)
            self.archive.archive([x for x in todo if not x.archived])
            live = [t for t in self.model.root.iter_topics() if t is not self.model.root]
            # the topics it was in, and any other that names or sums up a word only it held
            # (one archived earlier by /reorganize --prune kept "Wobblewick": a trial)
            mentions = [t for t in live if words_in(f"{t.topic_name}\n{t.summary}") & unique]
            touched = list(dict.fromkeys([t for t in above if t in set(live)] + mentions))
            vec = self.embedder().embed_batch([FORGOTTEN])[0]
            self._scrub(todo, vec)
            renamed = self._rename(touched, said)
            # a summary may quote the forgotten words: the archive wrote those off the
            # active path again; those on it, and those that mention them, are written now
            self.summaries.summarize([t for t in touched if t in self.model.stale or t in mentions])
            had_undo = had_undo or self.undo.last is not None
            self.undo.end()
            purged = False
            if self.store is not None:
                dropped, purged = self.store.write_forgotten(todo, vec, [old for old, _ in renamed], meta)
                had_undo = dropped or had_undo
            if self.sentence_index is not None:
                after = self.model.exchanges
                self.sentence_index.redo([(after[x.index + 1], "user") for x in todo if x.index + 1 < len(after)])
            return ForgetResult([x.index for x in todo], renamed, had_undo, frozenset(unique), purged)

    def _only_in(self, todo: list[MessageNode]) -> set[str]:
        """The words (and numbers: a code) of ``todo`` that no other exchange holds,
        common words aside."""
        def tokens(x: MessageNode) -> set[str]:
            return {w for w in words_in(f"{x.user}\n{x.assistant}\n{x.system}")
                    if w not in STOPWORDS and (len(w) > (1 if ideographic(w) else 2) or w.isdigit())}

        gone = set(todo)
        mine = set().union(*(tokens(x) for x in todo))
        for x in self.model.exchanges:
            if x not in gone and not x.forgotten:
                mine -= tokens(x)
                if not mine:
                    break
        return mine

    def _scrub(self, todo: list[MessageNode], vec) -> None:
        """Each message's text replaced, in the exchange, the conversation and the word
        statistics (archived: its vector is in no topic's sum)."""
        firsts = self.model.first_message_indices()
        for x in todo:
            self.words.forget(f"{x.user}\n{x.assistant}")
            x.messages = [{"role": m["role"], "content": FORGOTTEN} for m in x.messages]
            first = firsts[x.index]
            self.model.conversation[first:first + len(x.messages)] = [dict(m) for m in x.messages]
            self.model.text_revision += 1
            self.model.vectors.set_exchange(x.index, exchange_vector(vec, vec))
            self.words.observe(f"{x.user}\n{x.assistant}")

    def _rename(self, topics: list[TopicNode], said: set[str]) -> list[tuple[str, str]]:
        """Topics named with a forgotten word, named again from what they still hold
        (deepest first: a group is named from its parts' names)."""
        out = []
        for t in sorted(topics, key=lambda t: -len(self.model.get_ancestors(t))):
            if not words_of(t.topic_name) & said or not t.children:
                continue
            if t.is_group:
                name = self.group_names.name(list(t.children))
            else:
                name = self.judges.name_topic(self.model.texts(t))
            name = name or "Untitled"
            if name != t.topic_name:
                out.append((t.topic_name, name))
                t.topic_name = name
        return out

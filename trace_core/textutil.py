"""Words, names, summaries and sentence parts: what the embedding judge uses instead of
an LLM, and what search queries are made of.

One tokenizer (``tokens``: runs of letters and digits in any script, with inner
apostrophes and hyphens) and one stop-word list (``STOPWORDS``; its ``FUNCTION_WORDS``
part is what search drops) serve names, summaries, word statistics and FTS queries; names
also leave out German function words (``NAME_ONLY_STOPWORDS``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

# words that carry no subject: dropped from search queries (a keyword match then means a
# shared content word) ...
FUNCTION_WORDS = frozenset(
    "a an the is are was were be been being am to of and or but if in on at by for with from as it its "
    "this that these those i me my you your he him his she her we us our they them their do does did "
    "what when where who whom how why which there here not no so than then too very can could would "
    "should will shall may might must has have had into about".split()
)
# ... and, with the words of chat that name nothing in particular, from names and summaries
STOPWORDS = FUNCTION_WORDS | frozenset(
    """a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further get got had hadn't has hasn't have haven't having
    he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in
    into is isn't it it's its itself just let's like me more most mustn't my myself no nor not now of
    off on once only or other ought our ours ourselves out over own really same shan't she she'd she'll
    she's should shouldn't so some such than that that's the their theirs them themselves then there
    there's these they they'd they'll they're they've this those through to too under until up very
    was wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
    who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves yes yeah oh hey hi hello thanks thank okay ok sure great good nice cool wow
    know think going want one two lot things thing something anything make made much many well
    sounds sound glad love awesome amazing totally definitely absolutely maybe actually pretty
    tell told say said see seen way time day days still even back right
    however additionally furthermore moreover therefore overall instead certainly indeed perhaps probably
    usually generally typically normally mostly often sometimes exclusively especially particularly
    basically simply exactly fully completely entirely deeply gradually quickly slowly easily nearly
    slightly likely possibly hopefully honestly seriously literally obviously clearly currently recently
    without within upon onto toward towards besides
    """.split()
) | frozenset(
    # what a user asks with ("how do I set…", "should I keep…", "what's the best…"): the
    # user's words name first, and these would name every question
    "first next last set keep start need help use try find give take put best better new "
    "tip tips advice idea ideas suggestion suggestions question questions recommend "
    "today tonight tomorrow yesterday week weeks month months year years "
    # and what a user changes the subject with ("Switching subjects: …", "Quick question…",
    # "Let's talk about…"), the role labels a small model echoes ("Assistant: …"), and
    # what flags a message as one to keep ("Important: my sister…" named "Important Sister Porto")
    "let talk talking switch switching subject subjects topic quick assistant user "
    "important remember reminder please fyi".split()
)

# German function words, for names only (not search, nor the supersession rule's subject words):
# "Wie sagt man auf Deutsch …?" was named "Wie Deutsch Coffee" and "Welches deutsche Wort
# bedeutet …?" "Welches Deutsche Bedeutet" (a trial). Words that are English words too ("die",
# "man", "war") are in ``GERMAN_HOMOGRAPHS``, dropped only from a text that reads as German
NAME_ONLY_STOPWORDS = frozenset(
    """ich du er sie es wir ihr mich mir dich sich uns euch mein meine meinen meinem meiner meines
    dein deine deinen deinem deiner sein seine seinen seinem seiner ihre ihren ihrem ihrer unser unsere
    euer eure der das ein eine einen einem einer eines kein keine keinen keinem keiner
    und oder aber doch denn weil dass daß wenn ob wie wo woher wohin wer wen wem wessen warum wann
    welche welcher welches welchen welchem nicht nichts ist sind bist seid waren wird wirst werden
    wurde wurden habe hast haben hatte hatten kann kannst können könnte könnten muss musst müssen
    soll sollst sollen sollte möchte möchtest magst darf dürfen zum zur vom bei beim auf
    für über unter nach vor seit bis durch gegen ohne auch noch schon sehr mehr nur nein bitte danke
    sagt sagen heißt bedeutet bedeuten gibt geht macht jetzt dann hier dort immer etwas viel viele
    gern gerne heute morgen gestern zwischen jede jeder jeden jedes jedem alle allen alles andere anderen
    woche wochen monat monate monaten jahr jahre jahren tage tagen""".split()
)
GERMAN_HOMOGRAPHS = frozenset("die man war hat bin den gut also will tag rat sage mag mit aus dir dem des".split())
GERMAN_MARKERS = 2  # a text with this many German function words reads as German

_TOKEN = re.compile(r"[^\W_][\w'\-]*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})  # "Let’s" (a phone's, a model's) is "Let's"
_INNER = re.compile(r"['\-]")
# "Coltrane's" names Coltrane (the tokenizer keeps the apostrophe inside words)
_POSSESSIVE = re.compile(r"'s$", re.I)
# what stands in for the missing side of an exchange (a transcript turn without a partner)
PLACEHOLDERS = frozenset({"(no message)", "(no reply)"})
# the app's marks ("[reply cancelled]", "[reply cut at max_tokens]") are "[reply …]" lines
# at the end of a text, not conversation text: names, summaries and what the model is
# shown are made without them. A reply's own "[Chorus]", "[1]" or "[2019-12-05]" line is
# its text, at its end too
_MARK_LINE = re.compile(r"^[ \t]*\[reply [^\[\]\n]{1,34}\][ \t]*$", re.M)
_TRAILING_MARKS = re.compile(r"(?:(?:^|\n)[ \t]*\[reply [^\[\]\n]{1,34}\][ \t]*)+\s*\Z")
# a sentence ends at . ! ? and a space, or at a full-width 。！？ (no space follows in CJK)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
SEGMENTED_CHARS = 5000  # a longer text's rest is cut by the regex: the segmenter's rules cost more on long runs
_SEGMENTER: list = []  # pysbd's, made on first use (off the start-up path)


def split_sentences(text: str) -> list[str]:
    """``text`` (whitespace collapsed) cut into sentences by pysbd, a rule-based
    segmenter: "Dr. Kemal Aydın", "Mr. Weber", "U.S." or "z.B." end no sentence, where the
    regex cut the names out of a summary and the sentence index (a trial); "。！？" end one
    as well. Without pysbd, the regex."""
    text = " ".join(text.split())
    if not text:
        return []
    if not _SEGMENTER:
        try:
            import pysbd

            _SEGMENTER.append(pysbd.Segmenter(language="en", clean=False))
        except ImportError:
            _SEGMENTER.append(None)
    seg = _SEGMENTER[0]
    if seg is None:
        return [s for s in _SENTENCE.split(text) if s]
    head, rest = text[:SEGMENTED_CHARS], text[SEGMENTED_CHARS:]
    try:
        out = [s.strip() for s in seg.segment(head)]
    except Exception:  # a rule that fails on odd input costs only the better cut
        out = _SENTENCE.split(head)
    if rest:  # the rest, joined to the sentence the cut ran through
        tail = _SENTENCE.split(rest)
        out[-1:] = [(out[-1] if out else "") + tail[0]] + tail[1:]
    return [s for s in (x.strip() for x in out) if s]


def without_marks(text: str) -> str:
    """The text without the app's mark lines at its end: the model is not shown "[reply
    cancelled]" as words of its own (a small model then repeats it)."""
    return _TRAILING_MARKS.sub("", text).strip() if "[" in text else text


def marks(text: str) -> list[str]:
    """The app's mark lines at the end of ``text``, without their brackets ("reply cancelled")."""
    m = _TRAILING_MARKS.search(text) if "[" in text else None
    return [line.group(0).strip()[1:-1] for line in _MARK_LINE.finditer(m.group(0))] if m else []


def tokens(text: str) -> list[str]:
    """The one tokenizer: runs of letters and digits in any script, with inner
    apostrophes and hyphens ("don't", "self-care", "été", "東京")."""
    return _TOKEN.findall(text.translate(_APOSTROPHES))


def _ideographic(word: str) -> bool:
    """Written in a script where two characters make a word (CJK)."""
    return any(ord(c) >= 0x2E80 for c in word)


ideographic = _ideographic  # for callers outside: words the keyword index reads inside a longer run


def _length(sentence: str) -> int:
    """Its words; in CJK, where words are not spaced, two characters count as one."""
    return len(sentence) // 2 if _ideographic(sentence) and " " not in sentence.strip() else len(sentence.split())


def words(text: str) -> list[str]:
    """The words of names and word statistics: tokens that start with a letter, without
    edge apostrophes or hyphens, lower-cased."""
    return [t.strip("'-").lower() for t in _TOKEN.findall(text.translate(_APOSTROPHES)) if t[0].isalpha()]


def query_terms(text: str) -> list[str]:
    """The search terms of ``text``: lower-cased words of two or more characters that are
    not function words, each once, in order of appearance."""
    parts = (p.lower() for t in tokens(text) for p in _INNER.split(t))  # FTS5 splits at ' and -
    return list(dict.fromkeys(p for p in parts if len(p) > 1 and p not in FUNCTION_WORDS))


def words_of(text: str) -> set[str]:
    return set(words(text))


class DocumentFrequency:
    """How many exchanges each word appears in: words everyone uses (the speakers'
    names, "today") make poor topic names."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.docs = 0

    def observe(self, text: str) -> None:
        self.counts.update(words_of(text))
        self.docs += 1

    def clear(self) -> None:
        """Nothing counted (in place: the synthesizer and the judges hold this object)."""
        self.counts.clear()
        self.docs = 0

    def forget(self, text: str) -> None:
        """Take back what ``observe(text)`` counted (a forgotten exchange)."""
        for w in words_of(text):
            left = self.counts.get(w, 0) - 1
            if left > 0:
                self.counts[w] = left
            else:
                self.counts.pop(w, None)
        self.docs = max(self.docs - 1, 0)

    def is_common(self, word: str) -> bool:
        """In more than half of the exchanges (the speakers' names, "the"): names nothing
        in particular."""
        return self.counts.get(word, 0) > self.docs / 2

    def idf(self, word: str) -> float:
        import math

        return math.log((self.docs + 1) / (self.counts.get(word, 0) + 1)) + 1.0


# how much more a word of the user's side counts in a name: the user's message says what
# the exchange is about; a reply elaborates, often at length and in its own words
USER_WEIGHT = 2.0


# English nouns that end like adverbs
_LY_NOUNS = frozenset("assembly anomaly butterfly monopoly dragonfly firefly".split())


def _is_adverb(word: str) -> bool:
    """An English "-ly" adverb (or adjective: "friendly", "monthly") of seven letters
    or more: such words say how, not what, so they name no topic."""
    return len(word) >= 7 and word.endswith("ly") and word not in _LY_NOUNS


class Side(NamedTuple):
    """A text a name is made of: its words count ``weight`` each; the words of ``lead``
    sides name first, and the others only fill a name they leave short."""

    text: str
    weight: float = 1.0
    lead: bool = False


_HIRAGANA_RUN = re.compile(r"[\u3041-\u309f]+")


def _name_pieces(token: str) -> list[str]:
    """A run of Japanese as the words a name can take: unspaced, a whole sentence was one
    token ("犬の名前はビスケットです" named a topic, a trial). Hiragana runs are mostly
    particles and endings: the kanji and katakana between them are the words
    ("犬", "名前", "ビスケット"; "東京タワー" stays one)."""
    if not _HIRAGANA_RUN.search(token) or not _ideographic(token):
        return [token]
    return [p for p in _HIRAGANA_RUN.split(token) if p]


def with_pieces(words: set[str]) -> set[str]:
    """``words`` and, of each unspaced Japanese run among them, the words between its
    particles (``_name_pieces``): what a topic name made of that run holds ("ポチ" of
    "私の犬の名前はポチです")."""
    return words | {p for w in words if _ideographic(w) for p in _name_pieces(w)}


# a path, a URL or a slash command names nothing ("/ingest /tmp/hA-files/red.png" named its
# image "Ingest HA-files Red"; a URL named a topic "Https Example Items"): a run with a "/"
def _without_paths(text: str) -> str:
    """``text`` without its runs that hold a "/" (linear: the regex ``\\S*/\\S*`` took
    quadratic time on a long run without spaces, and held a server's every client: 52 s
    for a 200,000-character paste)."""
    return " ".join(w for w in text.split() if "/" not in w) if "/" in text else text


# a longer "word" names nothing: a URL's token, a hash, a run-on paste (a 6,000-character
# word named a topic, and a URL's token reached the tree pane and the log)
MAX_NAME_WORD = 36  # "Donaudampfschifffahrtsgesellschaft" is 34


def salient_words(text: str | Sequence[tuple[str, float]], n: int = 3, df: DocumentFrequency | None = None) -> list[str]:
    """The ``n`` most salient words: frequent, long, capitalised words that are not
    stopwords, weighted by rarity across the conversation when ``df`` is given. ``text``
    is one text or (text, weight) pairs or ``Side``s: a word's count is the sum of its
    texts' weights, and words of a lead side come before all others."""
    parts = [Side(text)] if isinstance(text, str) else [p if isinstance(p, Side) else Side(*p) for p in text]
    counts: Counter[str] = Counter()
    display: dict[str, str] = {}
    first: dict[str, int] = {}
    proper: set[str] = set()  # seen capitalised
    lower: set[str] = set()  # seen in lower case (so not only a name)
    led: set[str] = set()  # seen in a lead side
    i = 0
    for part, weight, lead in parts:
        part = _without_paths(without_marks(part).translate(_APOSTROPHES))
        german = sum(t.lower() in NAME_ONLY_STOPWORDS for t in _TOKEN.findall(part)) >= GERMAN_MARKERS
        for w in (p for m in _TOKEN.finditer(part) for p in _name_pieces(m.group())):
            w = _POSSESSIVE.sub("", w).strip("'-")
            if not w or not w[0].isalpha() or len(w) > MAX_NAME_WORD:  # a token, hash or run-on: no word
                continue
            low = w.lower()
            i += 1
            if (len(low) < (2 if _ideographic(low) else 3) or low in STOPWORDS or low in NAME_ONLY_STOPWORDS
                    or (german and low in GERMAN_HOMOGRAPHS)):
                continue
            counts[low] += weight
            first.setdefault(low, i)
            if lead:
                led.add(low)
            if w[0].isupper():
                proper.add(low)
                display[low] = w
            else:
                lower.add(low)
            display.setdefault(low, w)
    for low in [w for w in counts if w in lower and _is_adverb(w)]:
        del counts[low]  # "regularly", "exclusively": how, not what
    if not counts:
        return []

    import math

    if df is not None and df.docs >= 20:
        # a word in most exchanges (the speakers' names) names nothing in particular
        common = [w for w in counts if df.is_common(w)]
        if len(common) < len(counts):
            for w in common:
                del counts[w]

    def score(low: str) -> float:
        cap = 1.5 if low in proper else 1.0
        rarity = df.idf(low) if df is not None and df.docs >= 20 else 1.0
        return (1 + math.log(counts[low])) * cap * min(len(low), 10) / 10 * rarity

    # two words of the leading side (the user's) are a name: a reply's word only fills one
    # shorter ("my dog's name" and a small model's airplane reply named "Dog Name Airplane")
    pool = [w for w in counts if w in led] if len([w for w in counts if w in led]) >= 2 else list(counts)
    best = sorted(pool, key=lambda w: (w not in led, -score(w), first[w]))[:n]
    best.sort(key=lambda w: first[w])
    return [display[w] for w in best]


def exchange_sides(exchanges: Sequence[tuple[str, str]]) -> list[Side]:
    """The sides a name of these (user, assistant) exchanges is made of. The user's side
    leads: a reply only fills a name the user's words leave short (a small model's reply
    repeats odd words, "mendatang", that outscored "plant" and "shady" by count and
    length even with the user's words counted twice)."""
    return [s for u, a in exchanges for s in (Side(u, USER_WEIGHT, True), Side(a))]


def extractive_name(text: str | Sequence[tuple[str, float]], n: int = 3, df: DocumentFrequency | None = None) -> str:
    words = salient_words(text, n, df)
    if len(words) < 2:
        words = (words + ["Conversation", "Notes"])[:2]
    return " ".join(w[:1].upper() + w[1:] for w in words)


def extractive_summary(exchanges: list[tuple[str, str]], limit: int = 300,
                       df: DocumentFrequency | None = None, cache: dict[str, float] | None = None,
                       boilerplate: Sequence[str] = ()) -> str:
    """The most informative sentences of the exchanges, in conversation order, up to
    ``limit`` characters. A sentence's weight is the rarity of its content words, so
    greetings and "Thanks, Mel!" lose to "I went to a LGBTQ support group".

    ``cache`` keeps sentence weights between calls made with the same ``df`` counts
    (a reorganisation summarises each exchange once per level of its topic).
    ``boilerplate``: the system prompt's fixed lines; a reply's sentence that only says
    them again, in other words too, is none of the topic's ("I started learning to play the
    cello last month. You are a very helpful assistant with long-term memory of this
    conversation." was a trial's summary, from the bundled model's reply)."""
    import math

    sentences: list[str] = []
    for user, assistant in exchanges:
        for text, role in ((user, "user"), (assistant, "assistant")):
            for sent in split_sentences(without_marks(text)):
                if (sent and sent not in sentences and sent not in PLACEHOLDERS
                        and not (role == "assistant" and boilerplate and _only_words_of(sent, boilerplate, False))):
                    sentences.append(sent)

    use_df = df is not None and df.docs >= 20

    def weight(sent: str) -> float:
        if cache is not None and sent in cache:
            return cache[sent]
        content = [w for w in words(sent) if len(w) > 2 and w not in STOPWORDS]
        rarity = sum(df.idf(w) for w in content) if use_df else float(len(content))
        value = rarity / (1 + math.log(len(sent.split()))) if content else 0.0
        if cache is not None:
            cache[sent] = value
        return value

    ranked = sorted(range(len(sentences)), key=lambda i: (-weight(sentences[i]), i))
    picked: list[int] = []
    openings: set[str] = set()  # a small model's reply says a sentence again, whole or cut short
    used = 0
    for i in ranked:
        sent = sentences[i]
        opening = " ".join(words(sent)[:8])
        if opening in openings:
            continue
        if len(sent) > limit:
            sent = sent[: limit - 1].rsplit(" ", 1)[0] + "…"
        if used + len(sent) > limit and picked:
            continue
        picked.append(i)
        openings.add(opening)
        sentences[i] = sent
        used += len(sent) + 1
        if used >= limit * 0.8:
            break
    return " ".join(sentences[i] for i in sorted(picked))


def clean_name(name: str, max_words: int = 5, max_chars: int = 60) -> str:
    """Trim a model-given topic name to at most ``max_words`` plain words and
    ``max_chars`` characters (cut at a word, with "…")."""
    name = re.sub(r"[\r\n\t]+", " ", str(name)).strip().strip("\"'`*#:.- ")
    name = " ".join(name.split()[:max_words])
    if len(name) > max_chars:
        name = name[: max_chars - 1].rsplit(" ", 1)[0][: max_chars - 1] + "…"
    return name


# "Caroline: I went to..." — a transcript's speaker label opening a message
_LABEL = re.compile(r"^[^\W\d_][\w.'-]*(?: [^\W\d_][\w.'-]*){0,2}: ")


def speaker_label(text: str) -> str:
    """The speaker label opening ``text`` ("Caroline: ", "Zoë Müller: ", "さくら: "), or
    "": one to three names, each capitalised (in scripts that have case)."""
    m = _LABEL.match(text)
    if m is None or any(name[0].islower() for name in m.group(0)[:-2].split(" ")):
        return ""
    return m.group(0)


def sentence_parts(text: str, min_words: int = 3, max_parts: int = 16, max_chars: int = 300) -> list[str]:
    """The sentences of a longer message, each embedded on its own: a message's vector
    averages everything it says, so one fact among small talk ("BTW, I had a setback
    last month…") scores low as a whole. Short sentences are dropped; a message of fewer
    than two remaining sentences has no parts (its own vector is already that). Each
    part keeps the message's speaker label, if it opens with one. The app's marks
    ("[reply cancelled]") are no words of the message."""
    text = " ".join(without_marks(text).split())
    label = speaker_label(text)
    sents = [s for s in split_sentences(text[len(label):]) if _length(s) >= min_words]
    if len(sents) < 2:
        return []
    return [label + s[:max_chars] for s in sents[:max_parts]]


def message_parts(text: str, previous: str = "", context_chars: int = 300) -> list[str]:
    """What a message is indexed under besides its own vector: its sentences, and the
    message read after the one it answers ("Seven years now." means little alone; after
    "How long have you been painting?" it is an answer)."""
    parts = sentence_parts(text)
    previous = " ".join(without_marks(previous).split())
    if previous and previous not in PLACEHOLDERS:
        parts.append(f"{previous[-context_chars:]} {' '.join(without_marks(text).split())[:context_chars]}")
    return parts


# what a small base model answers when it copies the prompt's form and says nothing: a
# role label ("User:", "user"), the memory block's date lines ("[2026-12-03]", also
# written "[2015-7-18]") and status tags ("[current]"), the system prompt's fixed lines, symbols
ROLE_WORDS = ("user", "assistant", "model", "system")
# the labels small models write for a turn ("Me:", "AI:"): alone, with their colon, no answer
CHAT_LABELS = ("me", "you", "ai", "human", "bot", "answer", "response", "reply", "q", "a")
_BARE_LABEL = re.compile(r"^\s*(?:(?:" + "|".join(ROLE_WORDS) + r")\s*:?|(?:" + "|".join(CHAT_LABELS)
                         + r")\s*:)\s*$", re.I)
# a role label in square brackets, with or without a number, on every line ("[User: 13]"
# eight times, a bundled model's reply that was stored, then copied by each next reply: a
# trial); unbracketed, "Model 3" and "System 1" are answers
_LABEL_LINES = re.compile(r"^(?:\s*\[\s*(?:" + "|".join(ROLE_WORDS) + r")\s*[:#]?\s*\d{0,6}\s*\]\s*(?:\n|$))+\Z", re.I)
# an entry's status tag in the memory block ("- [current] User: …"): copied alone, it was
# stored as the answer to "When is my deadline?" and named the topic "Thesis Deadline Current" (a trial)
STATUS_TAGS = ("current", "superseded")
_DATE_LINE = re.compile(r"\[\d{4}-\d{1,2}-\d{1,2}\]|\[(?:" + "|".join(STATUS_TAGS) + r")\]", re.I)
# a date line or a status tag a stream has begun
_DATE_LINE_BEGUN = re.compile(r"\[(?:[\d-]{0,9}|" + "|".join(
    t[:k] for t in STATUS_TAGS for k in range(len(t), 0, -1)) + r")\Z", re.I)
_WORD_CHAR = re.compile(r"[^\W_]")  # a letter or digit, in any script
_WORD_RUN = re.compile(r"[^\W_]+")


def words_of_line(text: str) -> list[str]:
    """The runs of letters and digits in ``text``, in any script."""
    return _WORD_RUN.findall(text)


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


def _without(text: str, lines: Sequence[str]) -> str:
    """``text`` (case-folded) without any of ``lines`` said in it."""
    out = _folded(text)
    for line in lines:
        out = out.replace(_folded(line), " ")
    return out


def without_echo(text: str, boilerplate: Sequence[str] = ()) -> str:
    """``text`` case-folded, without date lines and ``boilerplate`` lines: what a reply
    says beyond copying the prompt's form."""
    return _without(_DATE_LINE.sub(" ", text), boilerplate)


_CONTRACTION_TAILS = frozenset({"re", "m", "s", "ve", "ll", "d", "t"})  # "you're" reads "you", "re"


# a reply this long said in the system prompt's words but one is still the prompt said
# again ("You are a useful assistant with long-term memory of this conversation.", stored
# as an answer in a trial): a sentence of the user's own in those words needs two more
PARAPHRASE_WORDS = 8


def _only_words_of(text: str, lines: Sequence[str], partial: bool) -> bool:
    """Whether a reply of three words or more (any number, ``partial``) is made only of the
    words of ``lines``: the system prompt said again in other words ("You're a helpful
    assistant with long-term memory of this conversation, by topic:"); from
    ``PARAPHRASE_WORDS`` words, all but one of them."""
    vocab = {w for line in lines for w in _WORD_RUN.findall(line.casefold())} | _CONTRACTION_TAILS
    said = _WORD_RUN.findall(_DATE_LINE.sub(" ", text).casefold())
    if not said or (len(said) < 3 and not partial):
        return False
    last_ok = said[-1] in vocab or (partial and any(v.startswith(said[-1]) for v in vocab))
    others = sum(w not in vocab for w in said[:-1]) + (not last_ok)
    return others == 0 or (len(said) >= PARAPHRASE_WORDS and others == 1)


def says_something(text: str, *, partial: bool = False, boilerplate: Sequence[str] = ()) -> bool:
    """A reply holds words: more than whitespace, symbols, a bare role label, a copied
    date line or the ``boilerplate`` lines (the system prompt's fixed ones), in any case.
    An answer that is a number or a date ("42", "2026-12-03") does. ``partial``: ``text``
    is the start of a streamed reply, which says nothing yet while it may still become a
    role label, a date line or a boilerplate line ("Use", "[2026-", "You are a")."""
    if _BARE_LABEL.match(text) or (not partial and _LABEL_LINES.match(text)):
        return False
    if boilerplate and _only_words_of(text, boilerplate, partial):
        return False
    rest = without_echo(text, boilerplate)
    if partial:
        rest = _DATE_LINE_BEGUN.sub("", rest)
        begun = rest.strip(" -*|\n\t")
        if any(f"{w}:".startswith(begun) for w in ROLE_WORDS) or any(
                _folded(line).startswith(begun) for line in boilerplate):
            return False
    return _WORD_CHAR.search(rest) is not None

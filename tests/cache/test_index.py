"""FAISS scope indexes: exact search while small, IVF past the flat limit, removals, LRU bound, expiry."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.cache import index as index_mod
from gateway.cache.index import EntryMeta, IndexSet, ScopeIndex

DIM = 32


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def meta(i: int, scope: str = "s", ns: str = "ns", expires_at: float = 1e12) -> EntryMeta:
    return EntryMeta(f"e{i}", ns, scope, f"text {i}", 0.0, expires_at)


def test_flat_search_finds_the_exact_vector_first() -> None:
    rng = np.random.default_rng(1)
    vecs = unit(rng, 50)
    idx = ScopeIndex(DIM)
    for i, v in enumerate(vecs):
        assert idx.add(meta(i), v)
    assert not idx.add(meta(3), vecs[3])  # idempotent by entry id
    hits = idx.search(vecs[[7, 21]], 3)
    assert hits[0][0][0].entry_id == "e7" and hits[0][0][1] == pytest.approx(1.0, abs=1e-5)
    assert hits[1][0][0].entry_id == "e21"
    assert idx.kind == "flat"


def test_large_scope_switches_to_ivf_and_still_finds_near_duplicates(monkeypatch) -> None:
    monkeypatch.setattr(index_mod, "FLAT_MAX", 1000)
    rng = np.random.default_rng(2)
    vecs = unit(rng, 3000)
    idx = ScopeIndex(DIM)
    idx.add_many([meta(i) for i in range(2000)], vecs[:2000])
    assert idx.kind == "ivf"
    for i in range(2000, 3000):
        idx.add(meta(i), vecs[i])
    noisy = vecs[::97] + 0.01 * unit(rng, len(vecs[::97]))
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    found = idx.search(noisy.astype(np.float32), 1)
    expected = [f"e{i}" for i in range(0, 3000, 97)]
    assert [row[0][0].entry_id for row in found] == expected
    assert idx.remove("e0")
    assert all(m.entry_id != "e0" for m, _ in idx.search(vecs[:1], 5)[0])


def test_removed_slots_are_reused_and_never_returned() -> None:
    rng = np.random.default_rng(3)
    vecs = unit(rng, 40)
    idx = ScopeIndex(DIM)
    for i in range(20):
        idx.add(meta(i), vecs[i])
    for i in range(0, 20, 2):
        assert idx.remove(f"e{i}")
    assert not idx.remove("e0")
    for i in range(20, 40):
        idx.add(meta(i), vecs[i])
    assert len(idx) == 30
    for i in range(40):
        top = idx.search(vecs[i:i + 1], 1)[0][0][0].entry_id
        if i < 20 and i % 2 == 0:
            assert top != f"e{i}"
        else:
            assert top == f"e{i}"


def test_scope_bound_evicts_least_recently_used() -> None:
    rng = np.random.default_rng(4)
    vecs = unit(rng, 4)
    s = IndexSet(DIM)
    for i in range(3):
        s.add(meta(i), vecs[i], max_entries=3)
    s.touch("s", "e0")  # e0 used: e1 is now the least recent
    evicted = s.add(meta(3), vecs[3], max_entries=3)
    assert evicted == ["e1"]
    assert len(s) == 3


def test_namespaces_scopes_and_expiry() -> None:
    rng = np.random.default_rng(5)
    vecs = unit(rng, 6)
    s = IndexSet(DIM)
    s.add(meta(0, scope="a", ns="n1"), vecs[0])
    s.add(meta(1, scope="b", ns="n1"), vecs[1])
    s.add(meta(2, scope="c", ns="n2"), vecs[2])
    s.add(meta(3, scope="c", ns="n2", expires_at=10.0), vecs[3])
    assert s.sweep_expired(now=100.0) == 1
    assert s.has_entries("a") and s.has_entries("c")
    assert s.drop_namespace("n1") == 2
    assert not s.has_entries("a") and not s.has_entries("b") and s.has_entries("c")
    assert len(s) == 1
    assert s.remove("e2") and not s.has_entries("c")


def test_a_newer_store_of_the_same_entry_replaces_it_and_a_replay_does_not() -> None:
    rng = np.random.default_rng(6)
    v = unit(rng, 2)
    idx = ScopeIndex(DIM)
    old = EntryMeta("e", "ns", "s", "q", stored_at=1.0, expires_at=10.0)
    assert idx.add(old, v[0])
    assert not idx.add(EntryMeta("e", "ns", "s", "q", stored_at=1.0, expires_at=10.0), v[0])  # own event replayed
    assert idx.add(EntryMeta("e", "ns", "s", "q", stored_at=20.0, expires_at=30.0), v[1])  # stored again later
    assert len(idx) == 1
    (meta, score), = idx.search(v[1:2], 1)[0]
    assert meta.stored_at == 20.0 and meta.live(25.0) and score == pytest.approx(1.0, abs=1e-5)

"""FAISS indexes of the semantic cache: one per hard scope, exact (flat) while small, IVF when large.

Not thread-safe on purpose: every mutation and search runs on the semantic worker's single thread
(gateway/cache/worker.py), so they never race. The event loop only reads sizes (`has_entries`, `len`) as a
hint to skip embedding a query whose scope is empty; a stale answer there costs one miss, nothing more.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass

import faiss
import numpy as np

FLAT_MAX = 10_000  # up to here exact search costs < 2 ms; past it an IVF index keeps search sub-millisecond
IVF_NPROBE = 16
IVF_RETRAIN_GROWTH = 4  # retrain the coarse quantiser when the scope grew this many times past its training


@dataclass(slots=True)
class EntryMeta:
    entry_id: str
    namespace: str
    scope: str
    text: str
    stored_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at


class ScopeIndex:
    """Vectors of one scope with their metadata, a local LRU order, and flat/IVF search by inner product."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._vectors = np.zeros((16, dim), dtype=np.float32)
        self._slots: dict[str, int] = {}
        self._meta: list[EntryMeta | None] = [None] * 16
        self._free: list[int] = list(range(15, -1, -1))
        self._lru: OrderedDict[str, None] = OrderedDict()
        self._index: faiss.Index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._trained_size = 0  # 0 while flat
        self._quantizer: faiss.Index | None = None

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self._slots

    @property
    def kind(self) -> str:
        return "ivf" if self._trained_size else "flat"

    def add(self, meta: EntryMeta, vector: np.ndarray) -> bool:
        """Insert; an entry already held is replaced only by a newer store of it (the same question asked
        again after its TTL ran out), so replaying one's own store event changes nothing."""
        slot = self._slots.get(meta.entry_id)
        if slot is not None:
            held = self._meta[slot]
            if held is not None and held.stored_at >= meta.stored_at:
                return False
            self.remove(meta.entry_id)
        slot = self._alloc()
        self._vectors[slot] = vector
        self._meta[slot] = meta
        self._slots[meta.entry_id] = slot
        self._lru[meta.entry_id] = None
        self._index.add_with_ids(vector.reshape(1, -1), np.array([slot], dtype=np.int64))
        n = len(self._slots)
        if (not self._trained_size and n > FLAT_MAX) or (
            self._trained_size and n > self._trained_size * IVF_RETRAIN_GROWTH
        ):
            self._rebuild_ivf()
        return True

    def add_many(self, metas: list[EntryMeta], vectors: np.ndarray) -> int:
        """Bulk insert (start-up load, benchmarks): one FAISS call, then at most one rebuild."""
        fresh = [(m, v) for m, v in zip(metas, vectors, strict=True) if m.entry_id not in self._slots]
        if not fresh:
            return 0
        slots = []
        for meta, vec in fresh:
            slot = self._alloc()
            self._vectors[slot] = vec
            self._meta[slot] = meta
            self._slots[meta.entry_id] = slot
            self._lru[meta.entry_id] = None
            slots.append(slot)
        ids = np.array(slots, dtype=np.int64)
        n = len(self._slots)
        if n > FLAT_MAX and (not self._trained_size or n > self._trained_size * IVF_RETRAIN_GROWTH):
            self._rebuild_ivf()
        else:
            self._index.add_with_ids(np.ascontiguousarray(self._vectors[ids]), ids)
        return len(fresh)

    def remove(self, entry_id: str) -> bool:
        slot = self._slots.pop(entry_id, None)
        if slot is None:
            return False
        self._index.remove_ids(np.array([slot], dtype=np.int64))
        self._meta[slot] = None
        self._free.append(slot)
        self._lru.pop(entry_id, None)
        return True

    def touch(self, entry_id: str) -> None:
        if entry_id in self._lru:
            self._lru.move_to_end(entry_id)

    def least_recent(self, count: int) -> list[str]:
        return [eid for eid, _ in zip(self._lru, range(count), strict=False)]

    def expired(self, now: float) -> list[str]:
        return [m.entry_id for m in self._meta if m is not None and not m.live(now)]

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[EntryMeta, float]]]:
        """Top-k (meta, cosine) per query row; vectors are unit length so inner product is cosine."""
        if not self._slots:
            return [[] for _ in range(len(queries))]
        scores, ids = self._index.search(queries, min(k, len(self._slots)))
        out: list[list[tuple[EntryMeta, float]]] = []
        for row_scores, row_ids in zip(scores, ids, strict=True):
            hits = []
            for score, slot in zip(row_scores, row_ids, strict=True):
                meta = self._meta[slot] if slot >= 0 else None
                if meta is not None:
                    hits.append((meta, float(score)))
            out.append(hits)
        return out

    def _alloc(self) -> int:
        if not self._free:
            old = len(self._meta)
            grown = np.zeros((old * 2, self.dim), dtype=np.float32)
            grown[:old] = self._vectors
            self._vectors = grown
            self._meta.extend([None] * old)
            self._free = list(range(old * 2 - 1, old - 1, -1))
        return self._free.pop()

    def _rebuild_ivf(self) -> None:
        ids = np.fromiter(self._slots.values(), dtype=np.int64, count=len(self._slots))
        vectors = np.ascontiguousarray(self._vectors[ids])
        nlist = max(64, min(4096, int(2 * math.sqrt(len(ids)))))
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample = vectors if len(vectors) <= 64 * nlist else vectors[rng.choice(len(vectors), 64 * nlist, replace=False)]
        ivf.train(sample)
        ivf.add_with_ids(vectors, ids)
        ivf.nprobe = IVF_NPROBE
        self._index = ivf
        self._quantizer = quantizer  # keep the quantiser alive as long as the index that points at it
        self._trained_size = len(ids)


class IndexSet:
    """Every scope this process knows, with the namespace (tenant, model) each belongs to."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.scopes: dict[str, ScopeIndex] = {}
        self._scope_ns: dict[str, str] = {}
        self._ns_scopes: dict[str, set[str]] = {}
        self._entry_scope: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._entry_scope)

    def __contains__(self, entry_id: object) -> bool:
        """Read from the event loop too (backfill): a dict membership test, atomic under the GIL."""
        return entry_id in self._entry_scope

    def has_entries(self, scope: str) -> bool:
        index = self.scopes.get(scope)
        return index is not None and len(index) > 0

    def add(self, meta: EntryMeta, vector: np.ndarray, max_entries: int | None = None) -> list[str]:
        """Insert one entry; returns the ids evicted locally to keep the scope within max_entries."""
        index = self._scope(meta)
        if index.add(meta, vector):
            self._entry_scope[meta.entry_id] = meta.scope
        evicted: list[str] = []
        if max_entries is not None and len(index) > max_entries:
            evicted = index.least_recent(len(index) - max_entries)
            for eid in evicted:
                self.remove(eid)
        return evicted

    def touch(self, scope: str, entry_id: str) -> None:
        index = self.scopes.get(scope)
        if index is not None:
            index.touch(entry_id)

    def add_many(self, metas: list[EntryMeta], vectors: np.ndarray) -> int:
        by_scope: dict[str, list[int]] = {}
        for i, meta in enumerate(metas):
            by_scope.setdefault(meta.scope, []).append(i)
        added = 0
        for rows in by_scope.values():
            first = metas[rows[0]]
            added += self._scope(first).add_many([metas[i] for i in rows], vectors[rows])
            for i in rows:
                self._entry_scope[metas[i].entry_id] = metas[i].scope
        return added

    def remove(self, entry_id: str) -> bool:
        scope = self._entry_scope.pop(entry_id, None)
        if scope is None:
            return False
        index = self.scopes[scope]
        index.remove(entry_id)
        if not len(index):
            self._drop_scope(scope)
        return True

    def drop_namespace(self, namespace: str) -> int:
        dropped = 0
        for scope in list(self._ns_scopes.get(namespace, ())):
            index = self.scopes[scope]
            dropped += len(index)
            for eid in list(index._slots):
                self._entry_scope.pop(eid, None)
            self._drop_scope(scope)
        return dropped

    def sweep_expired(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        removed = 0
        for index in list(self.scopes.values()):
            for eid in index.expired(now):
                removed += self.remove(eid)
        return removed

    def _scope(self, meta: EntryMeta) -> ScopeIndex:
        index = self.scopes.get(meta.scope)
        if index is None:
            index = self.scopes[meta.scope] = ScopeIndex(self.dim)
            self._scope_ns[meta.scope] = meta.namespace
            self._ns_scopes.setdefault(meta.namespace, set()).add(meta.scope)
        return index

    def _drop_scope(self, scope: str) -> None:
        self.scopes.pop(scope, None)
        ns = self._scope_ns.pop(scope, None)
        if ns is not None:
            scopes = self._ns_scopes.get(ns)
            if scopes is not None:
                scopes.discard(scope)
                if not scopes:
                    del self._ns_scopes[ns]

"""L2: the semantic cache, shared through Redis by every gateway process.

Entries (vector, metadata, completion) live in Redis under the namespace's hash tag; every process loads the
vectors at start and follows the events stream, so an entry stored by one worker is served by any other.
Locally only vectors and metadata are held; the completion is read from Redis on a hit, which also makes TTL
expiry and purges effective everywhere at once (a vanished entry is a miss and is dropped locally).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import orjson
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.retry import Retry

from gateway.cache import keyspace as ks
from gateway.cache.exact import namespace_member, parse_namespace_member, replayable
from gateway.cache.index import EntryMeta
from gateway.cache.keys import SemanticQuery
from gateway.cache.lean_get import LeanGet
from gateway.cache.learning import Evidence, Probe
from gateway.cache.verifier import verify as verify_pair
from gateway.deadline import retrieve
from gateway.redis_client import ClusterClient, execute_partial
from gateway.redis_guard import RedisUnavailable

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.connection import AbstractConnection

    from gateway.cache.config import SemanticConfig
    from gateway.cache.judge import Judge
    from gateway.cache.worker import SemanticWorker
    from gateway.redis_guard import RedisGuard

log = logging.getLogger("gateway.cache")
T = TypeVar("T")
LOAD_CHUNK = 512
FOLLOW_BLOCK_MS = 500  # below the client's 1 s socket timeout
FOLLOW_COUNT = 1000  # events per XREAD
SWEEP_EVERY_S = 30.0
MAX_FETCHES = 2  # candidates read from Redis per lookup before giving up
TOUCH_DELAY_S = 1.0  # LRU uses gather this long before one write: a hit pays no Redis write of its own
# A belt: close() ends its tasks without waiting on a cancel (see close()); should one still not end, shutdown
# goes on after this long without it.
CLOSE_WAIT_S = 5.0
MAX_JUDGE_CALLS = 1  # live judge calls per lookup (cached verdicts are free): bounds a miss's extra latency
LEARN_FLOOR = 0.70  # candidates from here up may be served on evidence of their own, and are compared on a miss
FIELDS = (b"c", b"lo", b"hi")  # an entry's completion and what was learned of it (learning.py)


@dataclass(slots=True)
class Outcome:
    result: str  # hit | miss | rejected | unavailable | error | timeout | overflow
    vector: np.ndarray | None = None  # the query's embedding, reused by the store after a miss
    completion: dict | None = None
    similarity: float | None = None
    reason: str | None = None  # the verifier's reason (or "judge") when a candidate was turned down
    evidence: Evidence | None = None  # what the hit's entry learned (None for a judge's hit)
    probe: Probe | None = None  # the would-be hit, or on a miss the nearest look-alike, to learn from


def entry_id(scope: str, text: str) -> str:
    """Deterministic, so two processes storing the same question write one entry, not two."""
    return hashlib.sha256(f"{scope}\0{text}".encode()).hexdigest()[:24]


class SemanticCache:
    def __init__(self, redis: aioredis.Redis, lookup_guard: RedisGuard, store_guard: RedisGuard,
                 worker: SemanticWorker) -> None:
        self._redis = redis
        self._lookup_guard = lookup_guard
        self._store_guard = store_guard
        self.worker = worker
        self._tasks: set[asyncio.Task] = set()
        self._sync_task: asyncio.Task | None = None
        self._fetches: list[tuple[str, asyncio.Future]] = []
        self._fetcher: asyncio.Task | None = None
        self._touches: list[tuple[str, EntryMeta]] = []
        self._toucher: asyncio.Task | None = None
        self._touch_now = asyncio.Event()  # set: write the gathered uses without waiting out TOUCH_DELAY_S
        self._reading = False  # a lone completion read is in flight (others meanwhile are pipelined)
        self._lean = LeanGet.for_client(redis)  # None where the server needs redis-py (TLS, cluster)
        self.synced = asyncio.Event()  # set once the start-up load finished and the stream is followed
        self._stop = asyncio.Event()  # set by close(): the loops below end at their next check
        self._follow_conn: AbstractConnection | None = None  # the follower's own connection (see _follow)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the model and the shared entries in the background; idempotent."""
        if self._sync_task is None:
            self._sync_task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        if not await self.worker.wait_ready_or_load():
            return
        last_id = await self._retry(self._load_all)
        if self._stop.is_set():  # closed meanwhile, and a cancel was lost on the way (see close())
            return
        self.synced.set()
        await self._follow(last_id)

    async def _retry(self, fn: Any) -> Any:
        delay = 0.2
        while True:
            try:
                return await fn()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis down at start: keep trying, lookups miss meanwhile
                if self._stop.is_set():
                    return None
                log.warning("semantic cache: loading entries failed (%s); retrying in %.1fs", e, delay)
                await self._pause(delay)
                delay = min(delay * 2, 5.0)

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less when close() comes first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    async def close(self) -> None:
        """Stop the background work; returns once it has ended.

        The follower is not cancelled: close() sets `_stop` and closes the follower's own connection, so its
        XREAD fails at once and the loop ends at its next check. A cancel can be lost there. On Python 3.11
        redis-py sends every command under `asyncio.wait_for`, and that wait_for returns the send's result
        instead of raising when the cancel lands after the write finished but before wait_for resumed. The
        old follower then read on for good and held the gateway's shutdown (the 60 s teardown hang of issue
        #8). The other tasks (loading, stores, reads, LRU writes) are cancelled. A lost cancel only lets one
        command finish, and the loading loop checks `_stop`. CLOSE_WAIT_S bounds the wait should anything still
        not end."""
        self._stop.set()
        conn = self._follow_conn
        if conn is not None:
            await _disconnect(conn)
        tasks = [t for t in (self._sync_task, self._fetcher, self._toucher, *self._tasks) if t is not None]
        following = self._sync_task if self.synced.is_set() else None  # ends by itself, told by _stop
        stuck = await cancel_and_wait([t for t in tasks if t is not following], CLOSE_WAIT_S,
                                      also=[following] if following is not None else [])
        if stuck:
            log.warning("semantic cache: %d background task(s) still running %.0fs after close; not waiting",
                        len(stuck), CLOSE_WAIT_S)
        if self._lean is not None:
            self._lean.close()

    async def connect(self) -> None:
        """Open the connection hits read their completion on now (LeanGet.connect), not at the first hit."""
        if self._lean is not None:
            await self._lean.connect()

    async def drain(self) -> None:
        """Wait for background stores and LRU updates (tests and benchmarks)."""
        self._touch_now.set()
        try:
            while self._tasks or (self._toucher is not None and not self._toucher.done()):
                pending = [*self._tasks, *([self._toucher] if self._toucher is not None else [])]
                await asyncio.gather(*pending, return_exceptions=True)
        finally:
            self._touch_now.clear()

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- lookup -------------------------------------------------------------------------------------------

    async def lookup(self, ns: str, query: SemanticQuery, threshold: float, verify: bool,
                     max_age: float | None, *, deadline_s: float | None = None, judge: Judge | None = None,
                     judge_threshold: float | None = None, learn: bool = False) -> Outcome:
        """Candidates at or above `threshold` that the verifier accepts are served. With a judge, candidates
        from `judge_threshold` up to `threshold` that the verifier accepts are asked to the judge."""
        if not self.worker.ready:
            return Outcome("unavailable")
        if not self.worker.indexes.has_entries(query.scope):
            return Outcome("miss")  # nothing to compare with: skip the embedding, the store computes it
        try:
            async with asyncio.timeout(deadline_s):
                vector, candidates = await self.worker.lookup(query.text, query.scope)
        except TimeoutError:
            return Outcome("timeout")
        if vector is None:
            return Outcome("overflow")
        judge_floor = judge_threshold if judge is not None and judge_threshold is not None else threshold
        floor = min(threshold, judge_floor, LEARN_FLOOR if learn else threshold)
        now = time.time()
        t0 = time.perf_counter()
        direct: list[tuple[EntryMeta, float]] = []
        band: list[tuple[EntryMeta, float]] = []
        rejected: str | None = None
        turned_down: tuple[EntryMeta, float] | None = None
        for meta, score in candidates:
            if score < floor:
                break  # FAISS returns candidates best first
            if not meta.live(now) or (max_age is not None and now - meta.stored_at > max_age):
                continue
            if verify:
                verdict = verify_pair(query.text, meta.text)
                if not verdict.ok:
                    rejected = rejected or verdict.reason
                    turned_down = turned_down or (meta, score)
                    continue
            (direct if score >= threshold else band).append((meta, score))
        timings = self.worker.timings
        timings.verify_s += time.perf_counter() - t0
        timings.verified += 1
        found = await self._first_stored(ns, direct[:MAX_FETCHES])
        if not isinstance(found, str):
            meta, score, completion, evidence = found
            return Outcome("hit", vector, completion, score, evidence=evidence,
                           probe=Probe(ns, meta.entry_id, score, "explore", True, completion))
        missed = found
        probe: Probe | None = None
        if learn and band:  # the nearest verified look-alike below the threshold: served on its own evidence
            meta, score = band[0]
            read = await self._read(ns, meta)
            if not isinstance(read, str):
                completion, evidence = read
                verdict = evidence.verdict(score)
                if verdict == "right":
                    self._touch(ns, meta)
                    return Outcome("hit", vector, completion, score, evidence=evidence,
                                   probe=Probe(ns, meta.entry_id, score, "explore", True, completion))
                # Compared with the fresh answer after this miss, without reading it again (one already found
                # wrong is checked again too: each ask is one more labelled observation of its band).
                probe = Probe(ns, meta.entry_id, score, "near", True, completion)
        elif learn and turned_down is not None:
            probe = Probe(ns, turned_down[0].entry_id, turned_down[1], "near", False, None)
        if judge is not None and band:
            live_calls = 0
            for meta, score in band:
                if score < judge_floor:
                    break
                if live_calls >= MAX_JUDGE_CALLS:
                    break
                said = await judge.same_answer(meta.text, query.text, ns=ns, scope=query.scope)
                live_calls += not said.cached
                if not said.same:
                    rejected = rejected or "judge"
                    continue
                found = await self._first_stored(ns, [(meta, score)])
                if not isinstance(found, str):
                    return Outcome("hit", vector, found[2], found[1])
                missed = "error" if found == "error" else missed
        if missed == "error":  # counted as the exact layer counts an entry it cannot replay
            return Outcome("error", vector, reason=rejected)
        return Outcome("rejected" if rejected else "miss", vector, reason=rejected, probe=probe)

    async def _first_stored(self, ns: str, accepted: list[tuple[EntryMeta, float]],
                            ) -> tuple[EntryMeta, float, dict, Evidence] | str:
        """The first accepted candidate whose completion is still in Redis (recording the use for the LRU) and
        whose own evidence does not say it is wrong at its similarity. Without one, the lookup's result:
        "error" when a candidate read back was not an answer the gateway stores, else "miss"."""
        missed = "miss"
        for meta, score in accepted:
            read = await self._read(ns, meta)
            if isinstance(read, str):
                missed = "error" if read == "error" else missed
                continue
            completion, evidence = read
            if evidence.verdict(score) == "wrong":
                continue
            self._touch(ns, meta)
            return meta, score, completion, evidence
        return missed

    async def _read(self, ns: str, meta: EntryMeta) -> tuple[dict, Evidence] | str:
        """An entry's completion and evidence, or "miss" (gone) / "error" (not an answer the gateway stores)."""
        timings = self.worker.timings
        t1 = time.perf_counter()
        row = await self._fetch(ks.semantic_entry(ns, meta.entry_id))
        timings.fetch_s += time.perf_counter() - t1
        timings.fetched += 1
        raw = row[0] if row else None
        if raw is None:  # expired or evicted elsewhere before its event reached us
            self.spawn(self.worker.run(self.worker.indexes.remove, meta.entry_id))
            return "miss"
        completion = _completion(raw)
        if completion is None:
            # Another program's value, or one cut short: replayed it would be a 500 or an answer with no
            # choices. A missing entry, then, dropped here so it is neither read nor logged again; a store
            # of the same question writes over it.
            log.warning("semantic cache: entry %s of namespace %s holds no answer the gateway stores; "
                        "a miss, dropped from this process's index", meta.entry_id, ns)
            self.spawn(self.worker.run(self.worker.indexes.remove, meta.entry_id))
            return "error"
        return completion, Evidence.parse(row[1], row[2])

    async def has_entry(self, ns: str, eid: str) -> bool:
        """Whether Redis holds the entry (the local index may not have seen its event yet)."""
        key = ks.semantic_entry(ns, eid)
        return bool(await self._store_guard.call(lambda: self._redis.exists(key), key=key))

    async def fetch_completion(self, ns: str, eid: str) -> dict | None:
        """An entry's completion (a look-alike's answer to compare with a fresh one), None when gone."""
        row = await self._fetch(ks.semantic_entry(ns, eid))
        return _completion(row[0]) if row and row[0] is not None else None

    async def _fetch(self, key: str) -> list | None:
        """Read a hit's completion and evidence (FIELDS). On a plain Redis it is one HMGET on the lean connection: a few microseconds
        of Python instead of redis-py's pool, packing and retry layers (~0.4 ms of a C=1 hit on one core), and
        the reads of lookups that resume in the same loop turn leave in one write. Elsewhere (TLS, cluster) a
        lone read goes out at once as one HMGET, and reads that arrive meanwhile are coalesced into one pipeline
        on one connection instead of one connection each."""
        if self._lean is not None:
            return await self._lookup_guard.call(self._lean.hmget(key, *FIELDS), key=key)
        if not self._reading and not self._fetches:
            self._reading = True
            try:
                return await self._lookup_guard.call(lambda: self._redis.hmget(key, *FIELDS), key=key)
            finally:
                self._reading = False
        future = asyncio.get_running_loop().create_future()
        self._fetches.append((key, future))
        if self._fetcher is None or self._fetcher.done():
            self._fetcher = asyncio.create_task(self._flush_fetches())
        return await future

    async def _flush_fetches(self) -> None:
        while self._fetches:
            batch, self._fetches = self._fetches, []

            async def read(batch: list[tuple[str, asyncio.Future]] = batch) -> list:
                pipe = self._redis.pipeline(transaction=False)
                for key, _ in batch:
                    pipe.hmget(key, *FIELDS)
                return await pipe.execute()

            try:
                values = await self._lookup_guard.call(read, key=batch[0][0])
            except RedisUnavailable as e:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (_, future), value in zip(batch, values, strict=True):
                if not future.done():
                    future.set_result(value)

    def _touch(self, ns: str, meta: EntryMeta) -> None:
        """Record a use for LRU eviction. Uses gather for up to TOUCH_DELAY_S and go out in one pipeline, off the
        path of the hits that made them; an eviction in this process writes them first. Another process's
        eviction may not see the last second's uses: the order is advisory. The TTL is absolute: a hit never
        extends it."""
        self._touches.append((ns, meta))
        if self._toucher is None or self._toucher.done():
            self._toucher = asyncio.create_task(self._flush_touches(TOUCH_DELAY_S))

    async def _write_touches(self) -> None:
        """Write the gathered uses now (before the LRU order is read to evict)."""
        toucher = self._toucher
        if toucher is not None and not toucher.done():
            self._touch_now.set()
            try:
                await asyncio.gather(toucher, return_exceptions=True)
            finally:
                self._touch_now.clear()

    async def _flush_touches(self, delay: float = 0.0) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._touch_now.wait(), delay)
        while self._touches:
            batch, self._touches = self._touches, []
            await self.worker.run(self._touch_locally, [meta for _, meta in batch])

            async def write(batch: list[tuple[str, EntryMeta]] = batch) -> list:
                pipe = self._redis.pipeline(transaction=False)
                for ns, meta in batch:
                    pipe.zadd(ks.semantic_lru(ns, meta.scope), {meta.entry_id: time.time()}, xx=True)
                return await pipe.execute()

            try:
                await self._store_guard.call(write, key=ks.semantic_lru(batch[0][0], batch[0][1].scope))
            except RedisUnavailable:
                pass  # the LRU order is advisory; the entries themselves are intact

    def _touch_locally(self, metas: list[EntryMeta]) -> None:
        for meta in metas:
            self.worker.indexes.touch(meta.scope, meta.entry_id)

    # ---- store --------------------------------------------------------------------------------------------

    async def store(self, tenant: str, model: str, ns: str, query: SemanticQuery, completion: dict,
                    config: SemanticConfig, vector: np.ndarray | None, stored_at: float | None = None) -> str:
        """Embed (unless the lookup already did), write to Redis, announce on the stream, index locally.

        `stored_at` is when the answer was produced (a backfill from an older exact entry): the TTL and
        max-age count from then. Returns "stored", "overflow" (the text does not fit the embedding window) or
        "expired" (a backfilled answer already older than the semantic TTL)."""
        if vector is None:
            vector = await self.worker.embed(query.text)
            if vector is None:
                return "overflow"
        now = time.time()
        born = now if stored_at is None else min(stored_at, now)
        expires_at = born + config.ttl
        if expires_at <= now:
            return "expired"
        eid = entry_id(query.scope, query.text)
        meta = EntryMeta(eid, ns, query.scope, query.text, born, expires_at)
        v64 = base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes())
        meta_doc = orjson.dumps({"scope": query.scope, "text": query.text, "at": born, "exp": expires_at})
        key, lru = ks.semantic_entry(ns, eid), ks.semantic_lru(ns, query.scope)

        async def write() -> int:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hset(key, mapping={"v": v64, "m": meta_doc, "c": orjson.dumps(completion)})
            pipe.pexpireat(key, int(expires_at * 1000))
            pipe.zadd(ks.semantic_index(ns), {eid: expires_at})
            pipe.zremrangebyscore(ks.semantic_index(ns), "-inf", now)
            pipe.zadd(lru, {eid: now})  # a backfill is a use: it comes from an exact hit
            pipe.sadd(ks.semantic_scopes(ns), query.scope)
            pipe.zcard(lru)
            essential = len(pipe)  # the entry's own commands; the zcard is the last of them
            # Shared keys last: on a cluster they may live on another master, whose failure must not fail
            # this store (other processes then learn of the entry when they next load, not by event).
            pipe.sadd(ks.NAMESPACES, namespace_member(tenant, model, ns))
            pipe.xadd(ks.EVENTS, {"op": "add", "ns": ns, "id": eid, "m": meta_doc, "v": v64},
                      maxlen=ks.EVENTS_MAXLEN, approximate=True)
            return (await execute_partial(pipe, essential))[essential - 1]

        count = await self._store_guard.call(write, key=key)
        await self.worker.run(self.worker.indexes.add, meta, vector)
        excess = int(count) - config.max_entries
        if excess > 0:
            await self._evict(ns, query.scope, excess)
        return "stored"

    async def _evict(self, ns: str, scope: str, count: int) -> None:
        """Drop the scope's least recently used entries everywhere (Redis, then every process by event)."""
        await self._write_touches()  # this process's latest uses first, so they count in the order
        async def pop() -> list:
            return await self._redis.zpopmin(ks.semantic_lru(ns, scope), count)

        popped = await self._store_guard.call(pop, key=ks.semantic_lru(ns, scope))
        ids = _ids(member for member, _score in popped)
        if not ids:
            return

        async def delete() -> list:
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(*(ks.semantic_entry(ns, eid) for eid in ids))
            pipe.zrem(ks.semantic_index(ns), *ids)
            essential = len(pipe)
            pipe.xadd(ks.EVENTS, {"op": "del", "ns": ns, "ids": ",".join(ids)},
                      maxlen=ks.EVENTS_MAXLEN, approximate=True)
            return await execute_partial(pipe, essential)

        await self._store_guard.call(delete, key=ks.semantic_index(ns))
        for eid in ids:
            await self.worker.run(self.worker.indexes.remove, eid)

    # ---- sharing between processes ------------------------------------------------------------------------

    async def _load_all(self) -> str:
        """Load every live entry of every namespace; returns the stream id to follow from."""
        newest = await self._redis.xrevrange(ks.EVENTS, count=1)
        last_id = _text(newest[0][0]) if newest else "0-0"
        now = time.time()
        loaded = 0
        skipped = 0  # what the gateway did not write: skipped, and told once per load, not once per entry
        dim = self.worker.indexes.dim
        for member in await self._redis.smembers(ks.NAMESPACES):
            parsed = parse_namespace_member(member)
            if parsed is None:
                skipped += 1
                continue
            ns = parsed[2]
            listed = await self._redis.zrangebyscore(ks.semantic_index(ns), now, "+inf")
            ids = _ids(listed)
            skipped += len(listed) - len(ids)
            for start in range(0, len(ids), LOAD_CHUNK):
                if self._stop.is_set():  # close() came, and its cancel may have been lost (see close())
                    return last_id
                chunk = ids[start:start + LOAD_CHUNK]
                pipe = self._redis.pipeline(transaction=False)
                for eid in chunk:
                    pipe.hmget(ks.semantic_entry(ns, eid), "v", "m")
                # A key of another type under an entry's name answers WRONGTYPE: that entry is skipped, not the
                # load failed (and retried for good). Any other error (Redis gone) still fails the load.
                rows = await pipe.execute(raise_on_error=False)
                metas, vectors = [], []
                for eid, row in zip(chunk, rows, strict=True):
                    if isinstance(row, ResponseError):
                        skipped += 1
                        continue
                    if isinstance(row, Exception):
                        raise row
                    v64, meta_doc = row
                    if v64 is None or meta_doc is None:  # expired or deleted since the index was read
                        continue
                    entry = _entry(eid, ns, meta_doc, v64, dim)
                    if entry is None:
                        skipped += 1
                        continue
                    metas.append(entry[0])
                    vectors.append(entry[1])
                if metas:
                    loaded += await self.worker.run(self.worker.indexes.add_many, metas, np.stack(vectors))
        if skipped:
            log.warning("semantic cache: skipped %d namespace-set members or entries the gateway did not write "
                        "(another shape)", skipped)
        if loaded:
            log.info("semantic cache: loaded %d entries from Redis", loaded)
        return last_id

    async def _follow(self, last_id: str) -> None:
        """Apply the events stream to the local index until close() sets `_stop`. The stream is read with
        blocking XREADs on a connection of the follower's own, outside the client's pool: close() closes it,
        so a blocked read fails at once, and the follower is never cancelled mid-command (see close())."""
        delay = 0.2
        next_sweep = time.monotonic() + SWEEP_EVERY_S
        try:
            while not self._stop.is_set():
                try:
                    events = await self._read_events(last_id)
                    delay = 0.2
                except Exception as e:  # Redis restarting, or close(): keep the local index, try again shortly
                    await self._drop_follow_connection()
                    if self._stop.is_set():
                        return
                    log.debug("semantic cache: following events failed: %s", e)
                    if isinstance(self._redis, ClusterClient):  # a failover or a moved slot: a fresh slot map
                        self._redis.refresh_soon()
                    await self._pause(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                skipped = 0
                for event_id, fields in events:
                    last_id = _text(event_id)
                    skipped += not await self._apply(fields)
                if skipped:  # once per read, not once per event
                    log.warning("semantic cache: skipped %d events of another shape on the stream", skipped)
                if time.monotonic() >= next_sweep:
                    await self.worker.run(self.worker.indexes.sweep_expired)
                    next_sweep = time.monotonic() + SWEEP_EVERY_S
        finally:
            await self._drop_follow_connection()

    async def _read_events(self, last_id: str) -> list[tuple[Any, dict[str, Any]]]:
        """One XREAD BLOCK after `last_id` on the follower's connection (opened first where there is none)."""
        conn = self._follow_conn
        if conn is None:
            conn = self._follow_conn = await self._unless_closing(self._events_connection())
            await self._unless_closing(conn.connect())
            if self._stop.is_set():  # close() came while it connected: it found nothing to close yet
                raise RedisConnectionError("semantic cache closing")
        await conn.send_command("XREAD", "COUNT", FOLLOW_COUNT, "BLOCK", FOLLOW_BLOCK_MS, "STREAMS", ks.EVENTS,
                                last_id)
        return _stream_events(await conn.read_response())

    async def _unless_closing(self, step: Coroutine[Any, Any, T]) -> T:
        """Run one connecting step of the follower, given up as soon as close() is called.

        The follower is never cancelled (see close()), and close() can only close a connection that exists.
        A connect, or a cluster's initialisation (ClusterClient.initialize), against an unreachable or slow
        Redis would otherwise hold close() until its socket timeout (once per node for a cluster's slot map,
        past CLOSE_WAIT_S). The step runs in a task of its own that is cancelled when close() comes first;
        should that cancel be lost (see close()), the step only ends on its own timeout, waited for by no one."""
        task = asyncio.ensure_future(step)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                task.add_done_callback(retrieve)
        if not task.done():
            raise RedisConnectionError("semantic cache closing")
        return task.result()

    async def _events_connection(self) -> AbstractConnection:
        """A new connection, like the client's own, to the server that holds the events stream. No retries:
        the follower has its own backoff, and a close() must not wait out redis-py's."""
        if isinstance(self._redis, ClusterClient):
            await self._redis.initialize()
            node = self._redis.get_node_from_key(ks.EVENTS)
            if node is None:  # the slot map is being rebuilt
                raise RedisConnectionError("no node serves the events stream yet")
            make, kwargs = node.connection_class, node.connection_kwargs
        else:
            pool = self._redis.connection_pool
            make, kwargs = pool.connection_class, pool.connection_kwargs
        return make(**{**kwargs, "retry": Retry(NoBackoff(), 0)})

    async def _drop_follow_connection(self) -> None:
        conn, self._follow_conn = self._follow_conn, None
        if conn is not None:
            await _disconnect(conn)

    async def _apply(self, event: dict[str, Any]) -> bool:
        """Apply one event of the stream (field names as str); False when it was skipped. An event the gateway
        did not write (a field missing or not UTF-8, metadata or a vector of another shape) is: raised here, it
        would end the follower, and no later event would reach this process."""
        try:
            op, ns = _text(event.get("op", b"")), _text(event.get("ns", b""))
        except UnicodeDecodeError:
            return False
        indexes = self.worker.indexes
        if op == "add":
            try:
                entry = _entry(_text(event["id"]), ns, event["m"], event["v"], indexes.dim)
            except (KeyError, UnicodeDecodeError):
                entry = None
            if entry is None:
                return False
            meta, vector = entry
            if meta.live(time.time()):
                await self.worker.run(indexes.add, meta, vector)
        elif op == "del":
            try:
                ids = _text(event.get("ids", b""))
            except UnicodeDecodeError:
                return False
            for eid in ids.split(","):
                if eid:
                    await self.worker.run(indexes.remove, eid)
        elif op == "purge":
            await self.worker.run(indexes.drop_namespace, ns)
        return True  # applied, or nothing to do (an op no version writes, an entry trimmed while being read)

    # ---- administration -----------------------------------------------------------------------------------

    async def purge_namespace(self, ns: str) -> int:
        """Delete every semantic entry of a namespace in Redis and tell every process. Returns entries deleted."""
        ids = _ids(await self._redis.zrange(ks.semantic_index(ns), 0, -1))
        scopes = _ids(await self._redis.smembers(ks.semantic_scopes(ns)))
        deleted = 0
        for start in range(0, len(ids), LOAD_CHUNK):
            chunk = ids[start:start + LOAD_CHUNK]
            deleted += await self._redis.delete(*(ks.semantic_entry(ns, eid) for eid in chunk))
        pipe = self._redis.pipeline(transaction=False)
        pipe.delete(ks.semantic_index(ns), ks.semantic_scopes(ns), *(ks.semantic_lru(ns, s) for s in scopes))
        pipe.xadd(ks.EVENTS, {"op": "purge", "ns": ns}, maxlen=ks.EVENTS_MAXLEN, approximate=True)
        await pipe.execute()
        await self.worker.run(self.worker.indexes.drop_namespace, ns)
        return int(deleted)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ids(values: Iterable[Any]) -> list[str]:
    """Entry ids (or scopes) read from a set or sorted set, less members that are not UTF-8: the gateway writes
    hex digests there, so such a member is another program's and names no entry it could read or delete."""
    ids = []
    for value in values:
        with contextlib.suppress(UnicodeDecodeError):
            ids.append(_text(value))
    return ids


def _stream_events(reply: Any) -> list[tuple[Any, dict[str, Any]]]:
    """(id, fields) of each event in a raw XREAD reply: None when the block timed out, else one
    [stream, [[id, [field, value, ...]], ...]] per stream (a map of streams under RESP3)."""
    if not reply:
        return []
    streams = reply.items() if isinstance(reply, dict) else reply
    events = []
    for _stream, entries in streams:
        for event_id, flat in entries:
            # An entry trimmed away while being read comes back without fields: kept (as no event) so the
            # follower still moves past its id instead of reading it again.
            # Field names not UTF-8 are another program's: replaced, never read, instead of failing every read
            # of this batch (the follower would retry it for good, never moving past it).
            events.append((event_id, {_field(flat[i]): flat[i + 1] for i in range(0, len(flat or ()), 2)}))
    return events


async def _disconnect(conn: AbstractConnection) -> None:
    """Close a connection without waiting for the server: a read pending on it fails at once."""
    with contextlib.suppress(Exception):
        await conn.disconnect(nowait=True)


def _field(name: Any) -> str:
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _completion(raw: bytes) -> dict | None:
    """A hit's completion as read from the entry's "c" field; None when it is not an answer the gateway stores."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if replayable(value) else None


def _entry(eid: str, ns: str, meta_doc: Any, v64: Any, dim: int) -> tuple[EntryMeta, np.ndarray] | None:
    """An entry's metadata and vector as the gateway writes them (store()), or None for anything else: in the
    index, a value of another type fails every search or lookup that meets it, not just this entry."""
    try:
        doc = orjson.loads(meta_doc)
        vector = np.frombuffer(base64.b64decode(v64, validate=True), dtype=np.float32)
    except (orjson.JSONDecodeError, ValueError, TypeError):  # binascii.Error is a ValueError
        return None
    if not isinstance(doc, dict) or vector.shape != (dim,) or not np.isfinite(vector).all():
        return None
    scope, text, at, exp = doc.get("scope"), doc.get("text"), doc.get("at"), doc.get("exp")
    if not (isinstance(scope, str) and isinstance(text, str) and _number(at) and _number(exp)):
        return None
    return EntryMeta(eid, ns, scope, text, at, exp), vector.copy()


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


async def cancel_and_wait(tasks: list[asyncio.Task], wait_s: float, also: list[asyncio.Task] | None = None,
                          ) -> set[asyncio.Task]:
    """Cancel `tasks` and wait up to `wait_s` seconds for them and for `also` (told to stop some other way) to
    finish; return those still running. Errors of the finished ones are consumed (they end with the cache,
    which is closing)."""
    for task in tasks:
        task.cancel()
    waited = [*tasks, *(also or ())]
    if not waited:
        return set()
    done, pending = await asyncio.wait(waited, timeout=wait_s)
    for task in done:
        if not task.cancelled():
            task.exception()
    return pending

"""The engine pool's replica choice on the issue's workload, without model processes: three simulated replicas,
each the engine's own BlockManager (its chained block hashes, LRU eviction of free blocks and KV events) with a
136-block KV cache (what 96 MiB holds for SmolLM2-135M), serving one request at a time in arrival order, their
events mirrored into the PrefixRouter as /kv_events would. 12 users of 4 shared system prompts, 4 turns each,
4 turns in flight: `prefix_aware` must prefill about half the prompt tokens `weighted` does, with no replica
serving more than twice the requests of another. (The floor here, every turn on the replica holding its
history and each system prompt prefilled once, is 0.44x weighted; spreading the 4 prompts' conversations evenly
over 3 replicas needs two copies of one prompt, 0.50x. Before the route's strategy reached the engine pool,
every strategy was prefix-routed: 1.0x.) Milliseconds, deterministic; the real replicas are measured by
`python bench/routing.py --fleet engine`, and tests/routing/test_engine_replicas.py checks the mirror end to end.

Also: the route's strategy reaches the engine pool (before, `weighted` and `least_loaded` routes over an engine
backend were prefix-routed anyway, so the benchmark compared prefix routing with itself), and recorded views
from the benchmark's choice log decide as they should."""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field

import pytest

from engine.block_manager import BlockManager, hash_prompt_blocks
from gateway.config.loader import parse_policy
from gateway.metrics import Metrics
from gateway.routing.balancer import Router
from gateway.routing.choice import ROUTE_STRATEGY
from gateway.routing.prefix import PrefixRouter

B = 16
KV_BLOCKS = 136
DECODE_COST = 100  # a request's decode, in prefilled-token units of time


def tokens(*key: object, n: int) -> list[int]:
    digest = hashlib.sha256(repr(key).encode()).digest()
    return [1000 + (digest[i % 32] * 131 + i * 7919) % 40000 for i in range(n)]


@dataclass
class Seq:
    """What the BlockManager needs of a sequence."""

    token_ids: list[int]
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_registered_blocks: int = 0


@dataclass
class Turn:
    user: int
    prompt: list[int]
    reply: list[int]
    ticket: object = None


class Replica:
    def __init__(self, name: str, router: PrefixRouter) -> None:
        self.name, self.router = name, router
        self.blocks = BlockManager(KV_BLOCKS, B)
        self.queue: list[Turn] = []
        self.busy = False
        self.served = 0

    def admit(self, turn: Turn) -> tuple[int, int]:
        """Prefill the prompt (cached blocks reused), generate the reply; returns (prompt, prefilled) tokens."""
        seq = Seq(list(turn.prompt), block_hashes=hash_prompt_blocks(turn.prompt, B))
        cached = self.blocks.find_cached_blocks(seq)
        assert self.blocks.allocate(seq, len(seq.token_ids) - len(cached) * B, cached)
        seq.num_computed_tokens = len(seq.token_ids)
        self.blocks.cache_full_blocks(seq)
        seq.token_ids += turn.reply
        assert self.blocks.allocate(seq, len(turn.reply))
        seq.num_computed_tokens = len(seq.token_ids) - 1  # the last generated token is never computed
        seq.block_hashes = hash_prompt_blocks(seq.token_ids, B)
        self.blocks.cache_full_blocks(seq)
        self.blocks.free_sequence(seq)
        self.publish()
        self.served += 1
        return len(turn.prompt), len(turn.prompt) - len(cached) * B

    def publish(self) -> None:
        for e in self.blocks.drain_events():
            self.router.apply_event(self.name, {"type": e.kind, "block_hashes": e.block_hashes})


def run_pool(strategy: str, users: int = 12, prompts: int = 4, turns: int = 4, concurrency: int = 4,
             system_tokens: int = 240, user_tokens: int = 40, reply_tokens: int = 16) -> tuple[float, list[int]]:
    """(prefilled share of prompt tokens, requests per replica) of the workload routed by `strategy`."""
    router = PrefixRouter(B, rng=random.Random(7))
    replicas = {n: Replica(n, router) for n in ("e0", "e1", "e2")}
    for n in replicas:
        router.add_replica(n)
    history = {u: tokens("system", u % prompts, n=system_tokens) for u in range(users)}
    turns_done = dict.fromkeys(range(users), 0)
    ready = list(range(users))  # users waiting to send their next turn, in order
    events: list[tuple[float, int, str, Turn]] = []  # (finish time, tie, replica, turn)
    now, tie, inflight, prompt_total, prefilled = 0.0, 0, 0, 0, 0

    def start(r: Replica) -> None:
        nonlocal tie, prompt_total, prefilled
        turn = r.queue.pop(0)
        r.busy = True
        n, filled = r.admit(turn)
        prompt_total, prefilled = prompt_total + n, prefilled + filled
        tie += 1
        heapq.heappush(events, (now + filled + DECODE_COST, tie, r.name, turn))

    while ready or events:
        while ready and inflight < concurrency:
            u = ready.pop(0)
            prompt = history[u] + tokens("user", u, turns_done[u], n=user_tokens)
            turn = Turn(u, prompt, tokens("reply", u, turns_done[u], n=reply_tokens))
            hashes = hash_prompt_blocks(prompt, B)
            decision = router.choose(hashes, len(prompt), strategy)
            turn.ticket = router.start(decision, hashes, len(prompt))
            replica = replicas[decision.replica]
            replica.queue.append(turn)
            inflight += 1
            if not replica.busy:
                start(replica)
        now, _, name, turn = heapq.heappop(events)
        replica = replicas[name]
        replica.busy = False
        router.finish(turn.ticket)  # type: ignore[arg-type]
        inflight -= 1
        history[turn.user] = turn.prompt + turn.reply
        turns_done[turn.user] += 1
        if turns_done[turn.user] < turns:
            ready.append(turn.user)
        if replica.queue:
            start(replica)
    return prefilled / prompt_total, [r.served for r in replicas.values()]


def test_prefix_aware_prefills_at_most_half_of_weighted_with_balanced_load() -> None:
    weighted, _ = run_pool("weighted")
    least, _ = run_pool("least_loaded")
    prefix, loads = run_pool("prefix_aware")
    assert prefix <= 0.52 * weighted, (prefix, weighted)
    assert prefix <= 0.52 * least, (prefix, least)
    assert max(loads) <= 2 * min(loads), loads


def test_at_concurrency_one_too() -> None:
    weighted, _ = run_pool("weighted", concurrency=1)
    prefix, loads = run_pool("prefix_aware", concurrency=1)
    assert prefix <= 0.5 * weighted, (prefix, weighted)
    assert max(loads) <= 2 * min(loads), loads


# ---- recorded views (bench/routing.py --choice-log, prefix_aware at concurrency 4, before this fix) ------------

def recorded(inflight: dict[str, int], recent: dict[str, float], cached: dict[str, int], shared: int,
             total_blocks: int, mean: float) -> PrefixRouter:
    """A router holding a recorded decision's view: each replica's cached prefix of the request, its requests
    in flight and its recent share, the request's shared depth (two conversations branch after it)."""
    router = PrefixRouter(B)
    request = list(range(1, total_blocks + 1))
    for name in inflight:
        router.add_replica(name)
        router.apply_snapshot(name, request[: cached[name]])
        router.replicas[name].inflight = inflight[name]
        router.recent.counts[name] = recent[name] * router.recent.window
    router.branches.observe([*request[:shared], 900])
    router.branches.observe([*request[:shared], 901])
    router.mean_request.value = mean
    return router


def test_a_conversation_stays_with_its_history_when_its_replica_is_a_little_busier() -> None:
    """Turn two of a conversation: its replica holds 17 blocks (15 of them the shared system prompt) and has two
    requests in flight; another is idle. The old discount on shared blocks priced the move at 5.75 blocks and
    made it: 272 tokens prefilled again. Twice in 48 requests of that run."""
    router = recorded({"a": 0, "b": 2, "c": 1}, {"a": 0.35, "b": 0.68, "c": 0.38}, {"a": 0, "b": 17, "c": 0},
                      shared=15, total_blocks=21, mean=13.3)
    decision = router.choose(list(range(1, 21)), 325, "prefix_aware")
    assert (decision.replica, decision.reason) == ("b", "prefix")


def test_a_new_conversation_may_still_copy_its_system_prompt_to_an_idle_replica() -> None:
    """A first turn holds nothing of its own anywhere: copying the shared prompt is paid once for every later
    conversation routed there, so the discount stands and the idle replica takes it."""
    router = recorded({"a": 3, "b": 0, "c": 1}, {"a": 0.9, "b": 0.2, "c": 0.4}, {"a": 15, "b": 0, "c": 0},
                      shared=15, total_blocks=17, mean=13.0)
    assert router.choose(list(range(1, 17)), 270, "prefix_aware").replica == "b"


def test_a_deep_queue_still_moves_a_history() -> None:
    router = recorded({"a": 0, "b": 6, "c": 5}, {"a": 0.2, "b": 1.6, "c": 1.2}, {"a": 0, "b": 17, "c": 0},
                      shared=15, total_blocks=21, mean=13.3)
    assert router.choose(list(range(1, 21)), 325, "prefix_aware").replica == "a"


# ---- the route's strategy reaches the engine pool --------------------------------------------------------------

def test_engine_pool_routes_by_the_given_strategy() -> None:
    router = PrefixRouter(B, rng=random.Random(1))
    for n in ("a", "b", "c"):
        router.add_replica(n)
    hashes = [1, 2, 3, 4]
    router.apply_snapshot("a", hashes)
    router.replicas["a"].inflight = 1
    router.replicas["b"].inflight = 2
    assert router.choose(hashes, 4 * B + 1, "prefix_aware").replica == "a"
    assert router.choose(hashes, 4 * B + 1, "least_loaded").replica == "c"
    picks = {router.choose(hashes, 4 * B + 1, "weighted").replica for _ in range(60)}
    assert picks == {"a", "b", "c"}  # spread regardless of prefix or load
    router.set_healthy("c", False)
    assert {router.choose(hashes, 4 * B + 1, "weighted").replica for _ in range(30)} == {"a", "b"}
    assert router.choose(hashes, 4 * B + 1).replica == "a"  # outside any route: prefix-aware
    router.replicas["b"].inflight = 0  # now the strategies disagree: prefix-aware still picks a
    assert router.choose(hashes, 4 * B + 1).replica == "a"
    token = ROUTE_STRATEGY.set("least_loaded")
    try:
        assert router.choose(hashes, 4 * B + 1).replica == "b"  # fewest in flight among a and b
    finally:
        ROUTE_STRATEGY.reset(token)


class Pool:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def get(self, name: str) -> object:
        return self

    def names(self) -> list[str]:
        return ["pool"]


@pytest.mark.parametrize("strategy", ["weighted", "least_loaded", "prefix_aware"])
async def test_the_router_hands_the_route_strategy_to_the_backend(strategy: str) -> None:
    policy = parse_policy("backends: {pool: {type: openai, base_url: 'http://127.0.0.1:9/v1'}}\n"
                          f"routes: [{{match: {{model: m}}, backends: [pool], routing: {{strategy: {strategy}}}}}]\n")
    router, pool = Router(Metrics()), Pool()

    async def op(backend: object) -> dict:
        pool.seen.append(ROUTE_STRATEGY.get())  # what an engine backend's replica choice reads
        return {}

    await router.call(policy.routes[0], pool, op, body={"model": "m", "messages": []})  # type: ignore[arg-type]
    assert pool.seen == [strategy]
    await router.close()

"""What does not fit the embedding window is exact-only; a huge prompt stalls nobody; every lookup has a deadline.

Real embedder, real FAISS, real Redis, openai SDK as client.
"""

from __future__ import annotations

import threading

import psutil

from gateway.cache.window import MAX_CHARS, WINDOW_TOKENS, minilm_window
from tests.cache.gateway_helpers import admin, ask, policy, semantic_ready, settle, stage, store

MB = 1024 * 1024
RSS_BUDGET = 300 * MB


def huge_prompt(size: int = 5 * MB) -> str:
    """A pasted log: 100-character lines, mostly opaque tokens, 5 MB."""
    line = "2026-11-30T15:19:48Z worker-7 job=3f9c2a17 status=retry backoff=250ms upstream=10.0.3.17:8443 ok\n"
    return (line * (size // len(line) + 1))[:size]


def preamble() -> str:
    """A shared contract preamble well past 256 word pieces, well under the character cap."""
    clauses = [f"Clause {i}: the tenant keeps the premises clean, reports any damage within seven days and "
               f"lets the landlord inspect the flat with notice." for i in range(1, 25)]
    return " ".join(clauses)


def test_the_preamble_overflows_the_window_by_tokens_not_by_characters() -> None:
    text = preamble() + "\n\nSummarise the contract above in one sentence."
    assert len(text) < MAX_CHARS
    window = minilm_window()
    assert window.fits([text]) == [False]
    assert window.fits(["What is the capital of France?"]) == [True]
    assert window.fits(["word " * (MAX_CHARS // 5 + 1)]) == [False]  # cut by characters, never tokenized
    assert window.window == WINDOW_TOKENS


def test_prompts_sharing_a_long_preamble_never_hit_semantically(gw) -> None:
    fake, srv = gw
    summarise = preamble() + "\n\nSummarise the contract above in one sentence."
    translate = preamble() + "\n\nTranslate the contract above into French."
    store(srv, "What is the notice period?")  # the scope has an entry, so lookups there really embed
    store(srv, summarise)
    completion, headers = ask(srv, translate)
    assert headers["x-cache"] == "MISS"
    assert completion.choices[0].message.content.endswith("Translate the contract above into French.")
    assert fake.request_count == 3
    settle(srv)
    assert ask(srv, summarise)[1]["x-cache"] == "HIT-EXACT"  # exact-only, not off
    assert ask(srv, summarise + " ")[1]["x-cache"] == "MISS"  # not even a near-repeat is matched on the window
    counts = stage(srv).counts
    assert counts[("semantic", "overflow")] == 3 and counts[("semantic", "hit")] == 0
    assert admin(srv, "GET", "/admin/cache/stats").json()["semantic_entries"] == 1  # only the short question


def test_a_prompt_past_the_character_cap_is_exact_only(gw) -> None:
    fake, srv = gw
    base = "Please review this configuration: " + "retry_backoff_ms=250 " * (MAX_CHARS // 20)
    assert len(base) > MAX_CHARS
    store(srv, base + "\nIs it valid?")
    assert ask(srv, base + "\nIs it secure?")[1]["x-cache"] == "MISS"
    assert ask(srv, base + "\nIs it valid?")[1]["x-cache"] == "HIT-EXACT"
    assert stage(srv).counts[("semantic", "overflow")] == 2  # the exact hit never reached L2
    assert admin(srv, "GET", "/admin/cache/stats").json()["semantic_entries"] == 0


def test_a_huge_prompt_delays_no_other_tenant_and_memory_stays_flat(gw) -> None:
    fake, srv = gw
    store(srv, "What is the capital of France?", key="key-a")
    store(srv, "Hello, who are you?", key="key-b")  # team-b's scope has entries: its lookups would embed
    process = psutil.Process()
    rss_before = process.memory_info().rss
    prompt = huge_prompt()
    results: list[str] = []
    errors: list[BaseException] = []

    def flood() -> None:
        try:
            for i in range(3):
                _, headers = ask(srv, prompt + str(i), key="key-b")
                results.append(headers["x-cache"])
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)

    sender = threading.Thread(target=flood)
    sender.start()
    near_repeats = []
    while sender.is_alive() or len(near_repeats) < 3:
        completion, headers = ask(srv, "what is the capital of France", key="key-a",
                                  headers={"Cache-Control": "no-store"})
        near_repeats.append(headers["x-cache"])
        assert completion.choices[0].message.content == "echo: What is the capital of France?"
    sender.join()
    assert not errors, errors
    assert results == ["MISS"] * 3
    assert set(near_repeats) == {"HIT-SEMANTIC"}  # none ran past its deadline (that is a MISS)
    settle(srv)
    counts = stage(srv).counts
    assert counts[("semantic", "timeout")] == 0
    assert counts[("semantic", "overflow")] == 3
    assert process.memory_info().rss - rss_before < RSS_BUDGET


def test_a_lookup_past_its_deadline_is_a_miss_counted_as_timeout(fake_openai, serve_gateway) -> None:
    fake, up = fake_openai
    srv = serve_gateway(policy(up.url, cache="{exact: false, semantic: {threshold: 0.9, lookup_timeout_ms: 1}}"))
    semantic_ready(srv)
    store(srv, "How do I boil an egg?")  # stores are not lookups: no deadline
    completion, headers = ask(srv, "how do I boil an egg")  # no MiniLM pass takes under a millisecond
    assert headers["x-cache"] == "MISS"
    assert completion.choices[0].message.content == "echo: how do I boil an egg"
    assert stage(srv).counts[("semantic", "timeout")] == 1
    metrics = admin(srv, "GET", "/metrics").text
    assert 'gateway_cache_lookups_total{layer="semantic",result="timeout"} 1.0' in metrics
    assert 'gateway_cache_lookups_total{layer="semantic",result="overflow"} 0.0' in metrics

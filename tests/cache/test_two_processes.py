"""Two `llm-gateway serve` processes on one Redis share both cache layers: what one stores, the other serves."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from tests.gateway.test_serve import wait_ready
from tests.helpers import free_port


def ask(url: str, text: str, **headers: str) -> tuple[str, str]:
    client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": text}], temperature=0, extra_headers=headers
    )
    return raw.parse().choices[0].message.content or "", raw.headers["x-cache"]


def test_two_processes_share_exact_and_semantic_entries(tmp_path: Path, fake_openai, redis_url: str) -> None:
    fake, up = fake_openai
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"""
redis: {{url: "{redis_url}", timeout_ms: 250}}
server: {{data_dir: "{tmp_path}"}}
backends:
  up: {{type: openai, base_url: "{up.url}/v1"}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    cache: {{exact: {{ttl: 600}}, semantic: {{threshold: 0.9, ttl: 600}}}}
""")
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy), "--port",
                               str(p), "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for p in ports]
    a, b = (f"http://127.0.0.1:{p}" for p in ports)
    try:
        for url, proc in zip((a, b), procs, strict=True):
            wait_ready(url, proc, timeout=120)
        question = "What is the boiling point of water at sea level in Celsius?"
        answer, cache = ask(a, question)
        assert cache == "MISS" and answer == f"echo: {question}"
        assert ask(b, question) == (answer, "HIT-EXACT")  # L1, stored by the other process
        paraphrase = "What is the boiling point of water at sea level, in Celsius?"
        deadline = time.monotonic() + 30
        while True:  # the semantic entry reaches the other process through the Redis stream
            # no-store: a miss while the entry is on its way must not put the paraphrase into L1 itself
            got, cache = ask(b, paraphrase, **{"Cache-Control": "no-store"})
            if cache == "HIT-SEMANTIC":
                break
            assert time.monotonic() < deadline, f"process B never served A's semantic entry (last {cache})"
            time.sleep(0.5)
        assert got == answer  # the echo of A's question, not of the paraphrase: it came from the cache
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(60) == 0

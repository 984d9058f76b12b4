"""The checks deploy/smoke.sh runs against a started stack, through the official openai SDK.

  python deploy/smoke_check.py first STATE.json    answers, a MISS then HIT-EXACT, streamed and not; /ready;
                                                   Prometheus' targets and rules; remembers the answers in STATE
  python deploy/smoke_check.py again STATE.json    after a restart: the same requests are HIT-EXACT with the same
                                                   answers (the cache survived in Redis' append-only file)

Each step prints one line; any failure exits 1 with what was expected and what came."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from openai import OpenAI, OpenAIError

GATEWAY = os.environ.get("SMOKE_GATEWAY", "http://127.0.0.1:8080")
PROMETHEUS = os.environ.get("SMOKE_PROMETHEUS", "http://127.0.0.1:9090")
MODEL = "smollm2-135m"
JOBS = {"gateway": 1, "engine": 2}  # prometheus.yml's jobs and their targets


class SmokeFailure(Exception):
    pass


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SmokeFailure(what)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def client() -> OpenAI:
    return OpenAI(base_url=f"{GATEWAY}/v1", api_key="smoke", max_retries=0, timeout=120)


def ask(prompt: str) -> tuple[str, str]:
    """(X-Cache, answer) of a deterministic (cacheable) chat completion."""
    raw = client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=24)
    answer = raw.parse().choices[0].message.content or ""
    return raw.headers.get("x-cache", ""), answer


def ask_streamed(prompt: str) -> tuple[str, str, int]:
    """(X-Cache, answer, chunks) of the same request streamed."""
    raw = client().chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=24, stream=True)
    pieces = [c.choices[0].delta.content or "" for c in raw.parse() if c.choices]
    return raw.headers.get("x-cache", ""), "".join(pieces), len(pieces)


def check_ready() -> None:
    body = get_json(f"{GATEWAY}/ready")  # urlopen raises on a 503
    check(body.get("status") in ("ok", "ready", "degraded"), f"/ready: {body}")
    print(f"ok   /ready 200: status {body.get('status')}")


def check_prometheus(deadline_s: float = 90.0) -> None:
    """Every gateway and engine target up (scraped at least once), and the alerting rules loaded."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            targets = get_json(f"{PROMETHEUS}/api/v1/targets")["data"]["activeTargets"]
        except OSError as e:  # still starting (just after `up`): asked again until the deadline
            if time.monotonic() > deadline:
                raise SmokeFailure(f"Prometheus does not answer: {e}") from e
            targets = []
        up = {job: sum(1 for t in targets if t["labels"]["job"] == job and t["health"] == "up") for job in JOBS}
        if up == JOBS:
            break
        if time.monotonic() > deadline:
            raise SmokeFailure(f"Prometheus targets up {up}, expected {JOBS}: "
                               f"{[(t['scrapeUrl'], t['health'], t['lastError']) for t in targets]}")
        time.sleep(2)
    groups = get_json(f"{PROMETHEUS}/api/v1/rules")["data"]["groups"]
    rules = sum(len(g["rules"]) for g in groups)
    check(rules > 0, "Prometheus loaded no alerting rules")
    print(f"ok   Prometheus: targets up {up}; {rules} alerting rules in {len(groups)} groups loaded")


def first(state: Path) -> None:
    nonce = uuid.uuid4().hex[:8]  # a prompt no earlier run cached
    prompt, streamed = f"Name one colour of the sky ({nonce}).", f"Say hello to a friend ({nonce})."
    check_ready()
    cache, answer = ask(prompt)
    check(cache == "MISS" and answer.strip() != "", f"first answer: X-Cache {cache!r}, answer {answer!r}")
    print(f"ok   SDK chat: MISS, answer {answer[:40]!r}")
    cache, again = ask(prompt)
    check(cache == "HIT-EXACT" and again == answer, f"repeat: X-Cache {cache!r}, {again!r} vs {answer!r}")
    print("ok   SDK chat repeated: HIT-EXACT, same answer")
    cache, text, chunks = ask_streamed(streamed)
    check(cache == "MISS" and chunks > 1 and text.strip() != "", f"stream: X-Cache {cache!r}, {chunks} chunks")
    print(f"ok   SDK stream: MISS, {chunks} chunks, {text[:40]!r}")
    cache, text_again, chunks = ask_streamed(streamed)
    check(cache == "HIT-EXACT" and text_again == text, f"stream repeated: X-Cache {cache!r}, {text_again!r}")
    print(f"ok   SDK stream repeated: HIT-EXACT, {chunks} chunks, same text")
    check_prometheus()
    state.write_text(json.dumps({"prompt": prompt, "answer": answer, "streamed": streamed, "text": text}))


def again(state: Path) -> None:
    saved = json.loads(state.read_text())
    check_ready()
    cache, answer = ask(saved["prompt"])
    check(cache == "HIT-EXACT" and answer == saved["answer"],
          f"after restart: X-Cache {cache!r}, {answer!r} vs {saved['answer']!r}")
    print("ok   after restart, SDK chat: HIT-EXACT, the answer from before the restart")
    cache, text, _ = ask_streamed(saved["streamed"])
    check(cache == "HIT-EXACT" and text == saved["text"], f"after restart, stream: X-Cache {cache!r}, {text!r}")
    print("ok   after restart, SDK stream: HIT-EXACT, the text from before the restart")
    check_prometheus()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("first", "again"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        (first if argv[0] == "first" else again)(Path(argv[1]))
    except (SmokeFailure, OSError, OpenAIError) as e:  # OSError: urllib's HTTP and connection errors
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

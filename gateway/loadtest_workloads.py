"""Request bodies for `llm-gateway bench`: built-in workloads and JSONL files of request bodies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

Body = dict[str, Any]

TOPICS = (
    "the water cycle", "photosynthesis", "how a compiler works", "the French revolution", "black holes",
    "TCP congestion control", "the immune system", "plate tectonics", "inflation", "how vaccines work",
    "the printing press", "neural networks", "the Roman empire", "climate and weather", "public key cryptography",
    "coral reefs", "the stock market", "volcanoes", "the human heart", "how bridges stay up",
)
PARAPHRASES = (
    "What is {t}?", "Can you explain {t}?", "Tell me about {t}.", "Give me an explanation of {t}.",
)
# A long, fixed system prompt: every request shares it, so engine prefix caches and prompt caches can help.
LONG_SYSTEM = " ".join(
    f"Rule {i}: answer plainly, cite no sources you cannot name, keep units in SI, and prefer short sentences "
    f"when the reader asks about {TOPICS[i % len(TOPICS)]}."
    for i in range(60)
)


def chat_short(i: int, max_tokens: int | None) -> Body:
    """Distinct short questions (request i asks a question no other request asks): cache misses."""
    topic = TOPICS[i % len(TOPICS)]
    return {
        "messages": [{"role": "user", "content": f"In one sentence (note {i}): what is {topic}?"}],
        "max_tokens": max_tokens or 32,
        "temperature": 0,
    }


def chat_long(i: int, max_tokens: int | None) -> Body:
    """A long shared system prompt and a distinct question: prefill-heavy, prefix-cache friendly."""
    topic = TOPICS[i % len(TOPICS)]
    return {
        "messages": [
            {"role": "system", "content": LONG_SYSTEM},
            {"role": "user", "content": f"Question {i}: explain {topic} in a short paragraph."},
        ],
        "max_tokens": max_tokens or 128,
        "temperature": 0,
    }


def repeat(i: int, max_tokens: int | None) -> Body:
    """Four questions asked over and over, deterministically: exact-cache hits after the first round."""
    topic = TOPICS[i % 4]
    return {
        "messages": [{"role": "user", "content": f"In one sentence: what is {topic}?"}],
        "max_tokens": max_tokens or 32,
        "temperature": 0,
    }


def paraphrase(i: int, max_tokens: int | None) -> Body:
    """Five topics asked in four wordings: semantic-cache hits (exact keys differ)."""
    topic = TOPICS[i % 5]
    wording = PARAPHRASES[(i // 5) % len(PARAPHRASES)]
    return {
        "messages": [{"role": "user", "content": wording.format(t=topic)}],
        "max_tokens": max_tokens or 32,
        "temperature": 0,
    }


BUILTIN: dict[str, Callable[[int, int | None], Body]] = {
    "chat-short": chat_short,
    "chat-long": chat_long,
    "repeat": repeat,
    "paraphrase": paraphrase,
}


class WorkloadError(ValueError):
    pass


def load_jsonl(path: Path) -> list[Body]:
    """One request body (a JSON object) per line; blank lines and lines starting with # are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise WorkloadError(f"cannot read workload {path}: {e.strerror or e}") from e
    bodies: list[Body] = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            body = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise WorkloadError(f"{path}:{n}: not valid JSON: {e}") from e
        if not isinstance(body, dict) or not any(k in body for k in ("messages", "prompt", "input")):
            raise WorkloadError(f"{path}:{n}: expected a request body with messages, prompt or input")
        bodies.append(body)
    if not bodies:
        raise WorkloadError(f"{path}: no request bodies")
    return bodies


def make_workload(name: str, max_tokens: int | None) -> Callable[[int], Body]:
    """Body factory for request i: a built-in name, or a JSONL file whose bodies are used in turn."""
    if name in BUILTIN:
        build = BUILTIN[name]
        return lambda i: build(i, max_tokens)
    path = Path(name)
    if not path.suffix and not path.exists():
        raise WorkloadError(f"unknown workload {name!r}: one of {', '.join(BUILTIN)}, or a .jsonl file")
    bodies = load_jsonl(path)

    def from_file(i: int) -> Body:
        body = dict(bodies[i % len(bodies)])
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return body

    return from_file

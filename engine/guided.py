"""Constrained (grammar-guided) decoding with xgrammar: specs, compiled-grammar cache, per-step bitmasks.

A request carries a `GuidedSpec` (JSON schema, any JSON object, regex or a choice of strings). The
`GrammarRuntime` of an engine compiles it once per distinct spec (LRU) against the engine's vocabulary;
each sequence then owns a `GrammarMatcher` that has accepted exactly the sequence's output tokens.
Before sampling, the runner asks `StepMasks` to fill one bitmask row per constrained row (in a worker
thread while the forward pass runs) and applies it to the logits; after sampling the engine advances
each matcher by the sampled token. Preemption by recompute keeps a sequence's tokens, and its matcher
with them, so nothing has to be rolled back; prefix hits and prefill chunks never sample, so they never
touch a matcher.
"""

from __future__ import annotations

import collections
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import torch
    import xgrammar as xg

    from engine.tokenizer import Tokenizer

GRAMMAR_CACHE_SIZE = 128  # distinct compiled specs kept per engine
GUIDED_KINDS = ("json_schema", "json_object", "regex", "choice")


@dataclass(frozen=True, slots=True)
class GuidedSpec:
    """What the output must match. `payload`: the schema (JSON text), a regex, or the choices as JSON."""

    kind: str
    payload: str = ""

    @classmethod
    def json_schema(cls, schema: dict | bool) -> GuidedSpec:
        # Not key-sorted: property order is the order the grammar emits them in.
        return cls("json_schema", orjson.dumps(schema).decode())

    @classmethod
    def choice(cls, choices: list[str]) -> GuidedSpec:
        return cls("choice", orjson.dumps(choices).decode())


class UnsupportedGrammarError(ValueError):
    """The grammar library cannot compile this spec (a schema feature it lacks, a bad regex)."""


def _token_bytes(tokenizer: Tokenizer) -> list[bytes]:
    """Each token id's raw bytes, as xgrammar's RAW vocabulary wants them; special tokens as b"" (xgrammar
    then never allows them inside a grammar, only as the stop token)."""
    from tokenizers import decoders

    from engine.tokenizer import _byte_alphabet

    backend = tokenizer.backend
    special = {i for i, t in backend.get_added_tokens_decoder().items() if t.special}
    byte_level = isinstance(backend.decoder, decoders.ByteLevel)
    inverse = {c: b for b, c in _byte_alphabet().items()}
    out: list[bytes] = []
    for i in range(tokenizer.vocab_size):
        token = backend.id_to_token(i)
        if token is None or i in special:
            out.append(b"")
        elif byte_level and all(c in inverse for c in token):
            out.append(bytes(inverse[c] for c in token))
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):  # SentencePiece byte fallback
            out.append(bytes([int(token[3:5], 16)]))
        else:
            out.append(token.replace("\u2581", " ").encode())
    return out


class GrammarRuntime:
    """One per engine: the vocabulary as xgrammar sees it, a compiler and an LRU of compiled grammars."""

    def __init__(self, tokenizer: Tokenizer, logits_size: int) -> None:
        import xgrammar as xg

        self.xg = xg
        # The model's logits may be wider than the tokenizer's vocabulary (padding rows): xgrammar masks
        # ids past the encoded vocabulary.
        self.vocab_size = max(logits_size, tokenizer.vocab_size)
        self.info = xg.TokenizerInfo(_token_bytes(tokenizer), xg.VocabType.RAW, vocab_size=self.vocab_size,
                                     stop_token_ids=sorted(tokenizer.eos_token_ids) or None)
        self.compiler = xg.GrammarCompiler(self.info, max_threads=2, cache_enabled=False)
        self._cache: collections.OrderedDict[GuidedSpec, xg.CompiledGrammar] = collections.OrderedDict()
        self._lock = threading.Lock()  # compiled in executor threads (serving) and on the engine thread
        self.compilations = 0

    def compile(self, spec: GuidedSpec) -> xg.CompiledGrammar:
        with self._lock:
            hit = self._cache.get(spec)
            if hit is not None:
                self._cache.move_to_end(spec)
                return hit
        compiled = self._compile(spec)
        with self._lock:
            self.compilations += 1
            self._cache[spec] = compiled
            while len(self._cache) > GRAMMAR_CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def _compile(self, spec: GuidedSpec) -> xg.CompiledGrammar:
        # Compact JSON (no free whitespace): a small model given `any_whitespace` can loop on newlines.
        # strict_mode (as vLLM runs xgrammar, whatever the request's `strict`): properties a schema does not
        # name are never generated unless it says `additionalProperties`; OpenAI's non-strict mode promises
        # nothing more, and small models otherwise ramble on in invented keys.
        try:
            if spec.kind == "json_schema":
                return self.compiler.compile_json_schema(spec.payload, any_whitespace=False, strict_mode=True)
            if spec.kind == "json_object":
                return self.compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if spec.kind == "regex":
                return self.compiler.compile_regex(spec.payload)
            if spec.kind == "choice":
                alternatives = " | ".join(orjson.dumps(c).decode() for c in orjson.loads(spec.payload))
                return self.compiler.compile_grammar(f"root ::= {alternatives}")
        except Exception as e:  # xgrammar raises RuntimeError/ValueError with a readable reason
            raise UnsupportedGrammarError(_first_line(str(e)) or type(e).__name__) from e
        raise UnsupportedGrammarError(f"unknown guided decoding kind {spec.kind!r}")

    def matcher(self, compiled: xg.CompiledGrammar) -> xg.GrammarMatcher:
        return self.xg.GrammarMatcher(compiled)


def _first_line(text: str) -> str:
    """xgrammar's reason without its C++ source location ("[12:00:00] /project/cpp/x.cc:94: ")."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", line)[:300]


class StepMasks:
    """Fills the bitmask rows of one step's constrained rows, off the calling thread, and applies them.

    `start` runs in a worker thread (xgrammar releases the GIL while filling), so on a GPU the fill
    overlaps the forward pass; `apply` waits for it and masks the logits in place.
    """

    def __init__(self, runtime: GrammarRuntime, max_rows: int) -> None:
        self.runtime = runtime
        xg = runtime.xg
        self.bitmask = xg.allocate_token_bitmask(max_rows, runtime.vocab_size)
        self.batch = xg.BatchGrammarMatcher(max_threads=2)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-mask")
        self.rows: list[int] = []
        self.future: Future[None] | None = None

    def start(self, matchers: list[Any | None]) -> bool:
        """Begin filling for the rows whose matcher is set; False when no row is constrained."""
        self.rows = [i for i, m in enumerate(matchers) if m is not None]
        if not self.rows:
            return False
        if len(matchers) > self.bitmask.shape[0]:
            self.bitmask = self.runtime.xg.allocate_token_bitmask(len(matchers), self.runtime.vocab_size)
        active = [matchers[i] for i in self.rows]
        self.future = self.pool.submit(self.batch.batch_fill_next_token_bitmask, active, self.bitmask, self.rows)
        return True

    def apply(self, logits: torch.Tensor) -> None:
        assert self.future is not None
        self.future.result()
        self.future = None
        mask = self.bitmask[: logits.shape[0]]
        if logits.device.type != "cpu":
            mask = mask.to(logits.device, non_blocking=True)
        self.runtime.xg.apply_token_bitmask_inplace(logits, mask, indices=self.rows)

    def close(self) -> None:
        self.pool.shutdown(wait=False)

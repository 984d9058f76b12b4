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
# Bounds on what is compiled. xgrammar's compile time grows much faster than a spec's size (an enum of 10,000
# values: 0.8 s, 40,000: 3 s, 100,000: 44 s; a pattern `[a-z]{0,4000}`: 0.8 s; `([a-z]{0,2}){0,100}`: 21 s),
# and a compile cannot be stopped once begun, so specs past these are refused before it.
MAX_GRAMMAR_BYTES = 64 * 1024  # the spec's JSON (schema, regex or choices)
MAX_ENUM_VALUES = 1000  # enum and const values in a schema, or choices (OpenAI's limit for a schema's enums)
MAX_REPEAT = 1000  # the largest count of a regex's {n,m}
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


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


class GrammarTooLargeError(UnsupportedGrammarError):
    """The spec is past a bound on what is compiled (MAX_GRAMMAR_BYTES, MAX_ENUM_VALUES, MAX_REPEAT)."""


def check_grammar_size(spec: GuidedSpec) -> None:
    """GrammarTooLargeError when compiling `spec` could take seconds or more; cheap next to any compile."""
    if len(spec.payload) > MAX_GRAMMAR_BYTES:
        raise GrammarTooLargeError(f"the spec is {len(spec.payload):,} bytes; at most {MAX_GRAMMAR_BYTES:,} are "
                                   "compiled")
    if spec.kind == "regex":
        check_regex(spec.payload)
    elif spec.kind == "choice":
        _check_values(len(orjson.loads(spec.payload)))
    elif spec.kind == "json_schema":
        values, patterns = _schema_load(orjson.loads(spec.payload))
        _check_values(values)
        for pattern in patterns:
            check_regex(pattern)


def _check_values(n: int) -> None:
    if n > MAX_ENUM_VALUES:
        raise GrammarTooLargeError(f"{n:,} enum, const or choice values; at most {MAX_ENUM_VALUES:,} are compiled")


def _schema_load(schema: Any) -> tuple[int, list[str]]:
    """The enum and const values in a schema, and its string patterns (walked without recursion)."""
    values, patterns, stack = 0, [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        enum = node.get("enum")
        values += len(enum) if isinstance(enum, list) else "const" in node
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            patterns.extend(node["patternProperties"])
        # A property may be named "enum": only an enum's list of values is left unwalked.
        stack.extend(v for k, v in node.items() if isinstance(v, dict | list) and not (k == "enum" and isinstance(v, list)))
    return values, patterns


def check_regex(pattern: str) -> None:
    """Counts above MAX_REPEAT, and a counted repetition of a group holding a count range (`(a{0,2}){0,100}`,
    ambiguous and slow to compile whatever its counts), are refused."""
    open_groups: list[bool] = []  # per open group: holds a count range
    closed: bool | None = None  # the group just closed, if the last token closed one: did it hold a range?
    i = 0
    while i < len(pattern):
        c = pattern[i]
        after_group, closed = closed, None
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _class_end(pattern, i)
            continue
        if c == "(":
            open_groups.append(False)
        elif c == ")" and open_groups:
            closed = open_groups.pop()
            if closed and open_groups:
                open_groups[-1] = True
        elif c == "{" and (m := _REPEAT.match(pattern, i)):
            is_range = _check_count(m)
            if after_group:
                raise GrammarTooLargeError(f"a counted repetition of a group holding a count range ({pattern[:60]!r})")
            if is_range and open_groups:
                open_groups[-1] = True
            i = m.end()
            continue
        i += 1


def _check_count(m: re.Match[str]) -> bool:
    """Whether a `{n}` / `{n,}` / `{n,m}` is a range; GrammarTooLargeError past MAX_REPEAT."""
    low, comma, high = m.group(1), m.group(2), m.group(3)
    if max(int(low), int(high or 0)) > MAX_REPEAT:
        raise GrammarTooLargeError(f"the regex count {m.group(0)} is over {MAX_REPEAT:,}")
    return comma is not None and high != low


def _class_end(pattern: str, i: int) -> int:
    """The index after the character class that starts at `i` (escapes and a leading ] inside it)."""
    j = i + 1
    if pattern[j:j + 1] == "^":
        j += 1
    if pattern[j:j + 1] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


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
        check_grammar_size(spec)
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

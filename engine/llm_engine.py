"""The engine: requests in, one scheduled forward pass per step(), outputs out."""

from __future__ import annotations

import itertools
import logging
import threading

import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig, resolve_model_path
from engine.detokenizer import IncrementalDetokenizer
from engine.guided import GrammarRuntime
from engine.kv_events import KVEvent
from engine.loader import read_model_config
from engine.model_runner import ModelRunner
from engine.outputs import CompletionOutput, CompletionResult, EngineStats, RequestOutput
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.spec_decode import propose_ngram
from engine.tokenizer import Tokenizer

log = logging.getLogger(__name__)


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        config.validate()
        self.config = config
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        path = resolve_model_path(config.model)
        self.model_path = path
        self.model_name = config.model
        self.tokenizer = Tokenizer.from_model_path(path)
        model_config = read_model_config(path)
        if config.load_format == "dummy":
            model_config = model_config.updated(config.dummy_config)
        self.model_config = model_config
        self.max_model_len = config.max_model_len or model_config.max_position_embeddings
        self.runner = ModelRunner(config, path, model_config, self.max_model_len)
        self.block_manager = BlockManager(self.runner.num_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.enable_chunked_prefill)
        self.requests: dict[str, list[Sequence]] = {}
        self.aborted: list[Sequence] = []
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.spec_draft_tokens = 0  # proposed by n-gram lookup and verified
        self.spec_accepted_tokens = 0
        self._grammar: GrammarRuntime | None = None
        self._grammar_lock = threading.Lock()

    def grammar_runtime(self) -> GrammarRuntime:
        """The constrained-decoding runtime, built on first use (about 2 s: the vocabulary for xgrammar);
        thread-safe, so servers compile grammars in executor threads ahead of `add_request`."""
        with self._grammar_lock:
            if self._grammar is None:
                self._grammar = GrammarRuntime(self.tokenizer, self.model_config.vocab_size)
                self.runner.grammar = self._grammar
            return self._grammar

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Queue a request; ValueError when it can never run (too long, bad params, bigger than the cache)."""
        params.validate()
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        n = len(prompt_token_ids)
        if n == 0:
            raise ValueError("the prompt is empty")
        vocab = self.model_config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        if n >= self.max_model_len:
            raise ValueError(
                f"the prompt has {n} tokens but the model's context window is {self.max_model_len}; "
                "shorten the prompt to leave room for at least one output token"
            )
        if params.max_tokens is not None and n + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"max_tokens ({params.max_tokens}) plus the prompt ({n} tokens) exceeds the context window "
                f"of {self.max_model_len} tokens"
            )
        capacity = self.block_manager.num_blocks * self.config.block_size
        need = n + (params.max_tokens or 1)
        if need > capacity:
            raise ValueError(
                f"the request needs {self.block_manager.blocks_needed(need)} KV cache blocks but the whole cache "
                f"has {self.block_manager.num_blocks}; shorten the prompt or max_tokens"
            )
        max_len = min(self.max_model_len, capacity)
        grammar = None
        if params.guided is not None:
            runtime = self.grammar_runtime()
            grammar = runtime, runtime.compile(params.guided)  # UnsupportedGrammarError is a ValueError
        seqs = []
        for index in range(params.n):
            detok = IncrementalDetokenizer(self.tokenizer, prompt_token_ids, params.stop,
                                          params.stop_repeated_items)
            seq = Sequence(request_id, index, prompt_token_ids, params, self.config.block_size, max_len, detok)
            if grammar is not None:
                seq.matcher = grammar[0].matcher(grammar[1])
            seq.leader = seqs[0] if seqs else None
            seqs.append(seq)
            self.scheduler.add(seq)
        self.requests[request_id] = seqs
        self.prompt_tokens += n

    def abort_request(self, request_id: str) -> None:
        """Stop the request and free its blocks now; the next step() reports it finished with 'abort'."""
        for seq in self.requests.pop(request_id, []):
            if not seq.is_finished:
                self.scheduler.finish(seq, "abort")
                self.aborted.append(seq)

    def _discard(self, request_id: str) -> None:
        for seq in self.requests.pop(request_id, []):
            if not seq.is_finished:
                self.scheduler.finish(seq, "abort")

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self.aborted)

    def step(self) -> list[RequestOutput]:
        outputs = [self._output(seq, []) for seq in self.aborted]
        self.aborted = []
        if self.config.speculative:
            self._propose()
        batch = self.scheduler.schedule()
        if not batch.seqs:
            return outputs
        result = self.runner.execute(batch)
        row = spec_row = 0
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            if seq.draft_token_ids:
                assert result is not None
                self._accept_speculated(seq, n, result.spec_token_ids[spec_row])
                spec_row += 1
                outputs.append(self._output(seq, seq.output_token_ids[seq.num_emitted_tokens:]))
                continue
            seq.num_computed_tokens += n
            self.block_manager.cache_full_blocks(seq)
            if seq.num_computed_tokens < seq.num_tokens:
                continue  # a prefill chunk that does not reach the end yet
            assert result is not None
            token, logprob = result.token_ids[row], result.logprobs[row]
            row += 1
            reason = self._append(seq, token, logprob)
            if reason is not None:
                self.scheduler.finish(seq, reason)
            outputs.append(self._output(seq, seq.output_token_ids[seq.num_emitted_tokens:]))
        return outputs

    def _append(self, seq: Sequence, token: int, logprob: dict | None) -> str | None:
        """Add one sampled token to the sequence; the finish reason it causes, if any."""
        seq.append_token(token)
        self.generation_tokens += 1
        if logprob is not None:
            logprob["token"] = self.tokenizer.decode([token], skip_special_tokens=False)
            seq.logprobs.append(logprob)
        reason = seq.check_stop(token, self.tokenizer.eos_token_ids)
        if seq.matcher is not None:
            reason = self._advance_grammar(seq, token, reason)
        return reason

    def _propose(self) -> None:
        """Fresh n-gram drafts for running sequences at their last token. Not for grammar-constrained
        sequences (the mask would have to follow each draft token) nor ones asking for logprobs: those decode
        one token per step as usual, in the same batch."""
        cfg = self.config
        for seq in self.scheduler.running:
            seq.draft_token_ids = []
            if seq.num_tokens - seq.num_computed_tokens != 1 or seq.matcher is not None:
                continue
            if seq.params.logprobs is not None:
                continue
            # room: draft positions stay inside the window, and the bonus token inside max_tokens
            room = seq.max_len - seq.num_tokens - 1
            if seq.params.max_tokens is not None:
                room = min(room, seq.params.max_tokens - seq.num_output_tokens - 1)
            k = min(cfg.num_speculative_tokens, room)
            if k > 0:
                seq.draft_token_ids = propose_ngram(seq.token_ids, cfg.prompt_lookup_min, cfg.prompt_lookup_max, k)

    def _accept_speculated(self, seq: Sequence, n: int, tokens: list[int]) -> None:
        """Append the verified tokens (accepted draft prefix + one more); rejected positions' KV is left to be
        overwritten, as num_computed_tokens counts only accepted tokens."""
        draft = seq.draft_token_ids
        seq.num_computed_tokens += n - len(draft)  # through the last real token
        self.spec_draft_tokens += len(draft)
        self.spec_accepted_tokens += len(tokens) - 1
        seq.draft_token_ids = []
        reason = None
        for i, token in enumerate(tokens):
            if i:
                seq.num_computed_tokens += 1  # the accepted draft token before this one has its KV in place
            reason = self._append(seq, token, None)
            if reason is not None:
                break
        self.block_manager.cache_full_blocks(seq)
        if reason is not None:
            self.scheduler.finish(seq, reason)

    def _advance_grammar(self, seq: Sequence, token: int, reason: str | None) -> str | None:
        """Feed the sampled token to the sequence's matcher; a finished grammar ends the sequence."""
        if reason is not None and token in self.tokenizer.eos_token_ids:
            return reason
        if not seq.matcher.accept_token(token):
            # The mask only lets grammar tokens through, so this means a matcher bug: end it rather than
            # let the output leave the grammar.
            log.warning("grammar rejected sampled token %d of request %s", token, seq.request_id)
            return reason or "stop"
        if reason is None and seq.matcher.is_terminated():
            return "stop"
        return reason

    def _output(self, seq: Sequence, new_tokens: list[int]) -> RequestOutput:
        seq.num_emitted_tokens = seq.num_output_tokens
        logprobs, seq.logprobs = (seq.logprobs, []) if seq.params.logprobs is not None else (None, [])
        text = seq.detokenizer.take(seq.is_finished) if seq.detokenizer else ""
        if seq.is_finished and all(s.is_finished for s in self.requests.get(seq.request_id, [])):
            self.requests.pop(seq.request_id, None)
        return RequestOutput(
            request_id=seq.request_id, index=seq.index, new_token_ids=new_tokens, new_text=text, logprobs=logprobs,
            finished=seq.is_finished, finish_reason=seq.finish_reason, num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_tokens or 0, num_output_tokens=seq.num_output_tokens,
        )

    def generate(self, prompts: list[str] | list[list[int]],
                 params: SamplingParams | list[SamplingParams]) -> list[CompletionResult]:
        """Offline helper: run prompts (text or token ids) to completion, results in input order."""
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError("need one SamplingParams per prompt")
        results: dict[str, CompletionResult] = {}
        prefix = f"generate-{next(_generate_calls)}-"
        for i, (prompt, p) in enumerate(zip(prompts, params_list, strict=True)):
            ids = self.tokenizer.encode(prompt, add_special_tokens=True) if isinstance(prompt, str) else list(prompt)
            rid = f"{prefix}{i}"
            try:
                self.add_request(rid, ids, p)
            except ValueError:
                for queued in results:  # leave nothing half-submitted behind (nobody awaits their outputs)
                    self._discard(queued)
                raise
            results[rid] = CompletionResult(rid, ids, [CompletionOutput(j, "", [], None, None) for j in range(p.n)])
        while self.has_unfinished_requests():
            for out in self.step():
                if out.request_id not in results:
                    continue
                result = results[out.request_id]
                choice = result.outputs[out.index]
                choice.text += out.new_text
                choice.token_ids.extend(out.new_token_ids)
                if out.logprobs is not None:
                    choice.logprobs = (choice.logprobs or []) + out.logprobs
                choice.finish_reason = out.finish_reason
                result.num_cached_tokens = out.num_cached_tokens
        return list(results.values())

    def stats(self) -> EngineStats:
        bm, sched = self.block_manager, self.scheduler
        return EngineStats(
            running=len(sched.running), waiting=len(sched.waiting), kv_cache_usage_ratio=bm.usage(),
            prefix_cache_queries=sched.prefix_cache_queries, prefix_cache_hits=sched.prefix_cache_hits,
            preemptions=sched.num_preemptions, prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens, num_free_blocks=bm.num_free_blocks,
            num_total_blocks=bm.num_blocks, spec_draft_tokens=self.spec_draft_tokens,
            spec_accepted_tokens=self.spec_accepted_tokens,
        )

    def drain_kv_events(self) -> list[KVEvent]:
        return self.block_manager.drain_events()


_generate_calls = itertools.count()

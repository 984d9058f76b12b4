"""What the engine hands back: per-step request outputs, offline results, stats."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestOutput:
    request_id: str
    index: int  # choice index when n > 1
    new_token_ids: list[int]
    new_text: str  # incremental detokenised text, stop strings trimmed
    logprobs: list[dict] | None  # one entry per new token: {"token_id", "token", "logprob", "top_logprobs"}
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort"
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[dict] | None = None


@dataclass
class CompletionResult:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    num_cached_tokens: int = 0

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids


@dataclass
class EngineStats:
    running: int
    waiting: int
    kv_cache_usage_ratio: float
    prefix_cache_queries: int  # tokens looked up
    prefix_cache_hits: int  # tokens found cached
    preemptions: int
    prompt_tokens: int
    generation_tokens: int
    num_free_blocks: int
    num_total_blocks: int
    spec_draft_tokens: int = 0  # speculative draft tokens verified
    spec_accepted_tokens: int = 0  # of which accepted

    @property
    def spec_acceptance_rate(self) -> float:
        return self.spec_accepted_tokens / self.spec_draft_tokens if self.spec_draft_tokens else 0.0

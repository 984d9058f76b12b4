"""A small paged-attention inference engine (nano-vllm style) with a CPU path."""

from engine.config import EngineConfig, resolve_model_path
from engine.kv_events import KVEvent
from engine.llm_engine import LLMEngine
from engine.outputs import CompletionOutput, CompletionResult, EngineStats, RequestOutput
from engine.sampling_params import SamplingParams
from engine.tokenizer import Tokenizer

__all__ = [
    "CompletionOutput", "CompletionResult", "EngineConfig", "EngineStats", "KVEvent", "LLMEngine",
    "RequestOutput", "SamplingParams", "Tokenizer", "resolve_model_path",
]

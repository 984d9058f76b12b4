"""KV-cache events: which block hashes this engine stores and drops, for prefix-aware routers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class KVEvent:
    kind: Literal["stored", "removed"]
    block_hashes: list[int]
    parent_hash: int | None = None  # hash of the block before the first stored one (stored only)
    token_ids: list[int] = field(default_factory=list)  # the stored blocks' tokens, concatenated (stored only)
    block_size: int = 0

"""Redis key names of the cache.

Every key of one namespace (tenant, model) carries the hash tag `{ns}`, so on Redis Cluster they share a slot
and a store or a purge is a single-slot pipeline. Purges walk per-namespace indexes (sorted sets scored by
expiry), never `KEYS`/`SCAN`.
"""

from __future__ import annotations

PREFIX = "llmgw:cache"
NAMESPACES = f"{PREFIX}:namespaces"  # set of orjson [tenant, model, ns]
EVENTS = f"{PREFIX}:events"  # stream of semantic add/del/purge events that every process follows
EVENTS_MAXLEN = 200_000


def _tag(ns: str) -> str:
    return f"{PREFIX}:{{{ns}}}"


def exact_entry(ns: str, digest: str) -> str:
    return f"{_tag(ns)}:x:{digest}"


def exact_index(ns: str) -> str:
    """zset: exact digests scored by expiry time."""
    return f"{_tag(ns)}:xi"


def semantic_entry(ns: str, entry_id: str) -> str:
    """hash: v (vector, base64 float32), m (orjson meta), c (orjson completion)."""
    return f"{_tag(ns)}:s:{entry_id}"


def semantic_index(ns: str) -> str:
    """zset: semantic entry ids scored by expiry time."""
    return f"{_tag(ns)}:si"


def semantic_lru(ns: str, scope: str) -> str:
    """zset: entry ids of one scope scored by last use, for the per-scope size bound."""
    return f"{_tag(ns)}:sl:{scope}"


def semantic_scopes(ns: str) -> str:
    """set: the scopes of a namespace, so a purge can find their LRU sets."""
    return f"{_tag(ns)}:ss"

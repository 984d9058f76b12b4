"""Redis key names of the cache.

Every key of one namespace (tenant, model) carries the hash tag `{ns}`, so on Redis Cluster they share a slot
and a store or a purge is a single-slot pipeline. Purges walk per-namespace indexes (sorted sets scored by
expiry), never `KEYS`; a purge of everything then SCANs every master for what no index lists (NAMESPACED).
The two shared keys (the namespace set, the events stream) are one key each: one slot, whichever master.
"""

from __future__ import annotations

PREFIX = "llmgw:cache"
NAMESPACES = f"{PREFIX}:namespaces"  # set of orjson [tenant, model, ns]
EVENTS = f"{PREFIX}:events"  # stream of semantic add/del/purge events that every process follows
EVENTS_MAXLEN = 200_000
NAMESPACED = f"{PREFIX}:{{*"  # SCAN pattern of every key under a namespace's hash tag


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


def learning(route: str) -> str:
    """hash: a route's would-be hits observed right/wrong and served, per similarity band (learning.py)."""
    return f"{PREFIX}:learn:{{{route}}}"


def namespace_of(key: str) -> str | None:
    """The namespace whose hash tag `key` carries, or None for a key outside any namespace."""
    head = f"{PREFIX}:{{"
    if not key.startswith(head):
        return None
    end = key.find("}", len(head))
    return key[len(head):end] if end > len(head) else None


def is_entry(key: str) -> bool:
    """An exact or semantic entry (what a purge counts), not an index, LRU set or verdict."""
    ns = namespace_of(key)
    return ns is not None and key[len(_tag(ns)) + 1:len(_tag(ns)) + 3] in ("x:", "s:")

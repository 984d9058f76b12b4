"""Typed reads of plain YAML values that record every problem (with its key path) instead of stopping at one."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from gateway.config.errors import PolicyError, PolicyErrors
from gateway.config.yamltree import join

_MISSING: Any = object()
T = TypeVar("T")


def describe(value: Any) -> str:
    """How a value reads in an error message: `a string 'abc'`, `an integer 5`, `a list`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"an integer {value}"
    if isinstance(value, float):
        return f"a number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string {shown!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _bounds(minimum: float | None, maximum: float | None, exclusive: bool) -> str:
    """`>= 1`, `<= 5`, or with both ends an interval: `in (0, 1]` (a round bracket excludes its end)."""
    if minimum is not None and maximum is not None:
        return f"in {'(' if exclusive else '['}{_num(minimum)}, {_num(maximum)}]"
    if minimum is not None:
        return f"{'>' if exclusive else '>='} {_num(minimum)}"
    return f"<= {_num(maximum)}"


def _num(x: float | None) -> str:
    """31536000 as written, not 3.1536e+07; 0.5 as 0.5."""
    return str(int(x)) if x is not None and float(x).is_integer() else f"{x:g}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Checker:
    """Collects PolicyErrors; each `get_*` returns the value, its default when absent, or None when wrong."""

    def __init__(self) -> None:
        self.errors: list[PolicyError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(PolicyError(path, message))

    def mapping(
        self, raw: Any, path: str, allowed: Collection[str], required: Iterable[str] = ()
    ) -> dict[str, Any] | None:
        """A mapping with only `allowed` keys (null reads as empty). None when it is not a mapping."""
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            self.error(path, f"expected a mapping, got {describe(raw)}")
            return None
        for key in raw:
            if key not in allowed:
                self.unknown_key(path, key, allowed)
        for key in required:
            if key not in raw:
                self.error(join(path, key), "required key is missing")
        return raw

    def get_str(self, m: dict, key: str, path: str, default: Any = None, *, nonempty: bool = True) -> Any:
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        p = join(path, key)
        if not isinstance(value, str):
            self.error(p, f"expected a string, got {describe(value)}")
            return None
        if nonempty and not value.strip():
            self.error(p, "must not be empty")
            return None
        return value

    def get_int(
        self, m: dict, key: str, path: str, default: Any = None, *, minimum: int | None = None,
        maximum: int | None = None,
    ) -> Any:
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        p = join(path, key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(p, f"expected an integer, got {describe(value)}")
            return None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            self.error(p, f"must be {_bounds(minimum, maximum, False)}, got {value}")
            return None
        return value

    def get_number(
        self, m: dict, key: str, path: str, default: Any = None, *, minimum: float | None = None,
        exclusive: bool = False, maximum: float | None = None,
    ) -> Any:
        """An int or float; `minimum` with exclusive=True means strictly greater; `maximum` is inclusive."""
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        p = join(path, key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(p, f"expected a number, got {describe(value)}")
            return None
        low = minimum is not None and (value <= minimum if exclusive else value < minimum)
        if low or (maximum is not None and value > maximum):
            self.error(p, f"must be {_bounds(minimum, maximum, exclusive)}, got {value:g}")
            return None
        return float(value)

    def get_bool(self, m: dict, key: str, path: str, default: bool = False) -> bool:
        value = m.get(key, _MISSING)
        if value is _MISSING or value is None:
            return default
        if not isinstance(value, bool):
            self.error(join(path, key), f"expected true or false, got {describe(value)}")
            return default
        return value

    def get_str_list(self, m: dict, key: str, path: str, *, drop_empty: bool = False) -> list[str]:
        """A list of non-empty strings; drop_empty removes "" items (env vars that expanded to nothing)."""
        value = m.get(key)
        if value is None:
            return []
        p = join(path, key)
        if not isinstance(value, list):
            self.error(p, f"expected a list of strings, got {describe(value)}")
            return []
        out: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.error(join(p, i), f"expected a string, got {describe(item)}")
            elif item.strip():
                out.append(item)
            elif not drop_empty:
                self.error(join(p, i), "must not be empty")
        return out

    def get_choice(self, m: dict, key: str, path: str, choices: Collection[str], default: str) -> str:
        value = self.get_str(m, key, path, default)
        if value is None:
            return default
        if value not in choices:
            hint = did_you_mean(value, choices)
            self.error(join(path, key), f"must be one of {', '.join(sorted(choices))}, got {value!r}{hint}")
            return default
        return value

    def unknown_key(self, path: str, key: object, allowed: Collection[str]) -> None:
        hint = did_you_mean(str(key), allowed) or f" (allowed: {', '.join(sorted(allowed))})"
        self.error(join(path, str(key)), f"unknown key {key!r}{hint}")

    def check_http_url(self, url: str | None, path: str) -> None:
        if url is None:
            return
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            self.error(path, f"expected an http:// or https:// URL, got {url!r}")


def run_checked(parse: Callable[[Checker], T], check: Checker | None) -> T:
    """Run a section parser that records into a Checker. Inside the policy loader (`check` given) its errors join
    every other section's; standalone (check=None) they are raised together as PolicyErrors (first one first), so
    a subsystem's parser has one way to validate whatever calls it."""
    own = Checker() if check is None else check
    result = parse(own)
    if check is None and own.errors:
        raise PolicyErrors(own.errors)
    return result

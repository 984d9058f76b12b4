"""Policy validation errors: `path` is the key path (`routes[0].cache.exact.ttl`) that the loader maps to a line."""

from __future__ import annotations


class PolicyError(Exception):
    def __init__(self, path: str, message: str, filename: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.message = message
        self.filename = filename
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.filename or '<policy>'}:{self.line}" if self.line is not None else (self.filename or "<policy>")
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class PolicyErrors(PolicyError):
    """Several PolicyErrors at once (the loader sorts them by line). Catching PolicyError catches this too; its
    path and message are the first error's."""

    def __init__(self, errors: list[PolicyError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.path, first.message, first.filename, first.line)

    def __str__(self) -> str:
        return "\n".join(PolicyError.__str__(e) for e in self.errors)


class PolicyRefused(Exception):
    """A valid policy that may not replace the running one on reload (it would drop every API key without
    saying `auth: {open: true}`). The running policy stays."""

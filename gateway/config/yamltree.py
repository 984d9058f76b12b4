"""YAML text -> plain Python values, with `${VAR}` expansion and a map from key paths to source lines.

Expansion happens on scalar values after parsing (as docker-compose does), so a value containing `#`, `:` or
quotes cannot break the YAML around it; a plain (unquoted) scalar is re-typed after expansion, so
`retries: ${RETRIES:-2}` is the integer 2. Key paths look like `routes[1].backends[0]` and `backends.local.type`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from gateway.config.errors import PolicyError

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PARENT = re.compile(r"^(.*?)(\[\d+\]|\.[^.\[\]]*)$")
MAX_NODES = 100_000  # bounds alias expansion ("billion laughs")


class ExpandError(ValueError):
    pass


def expand_vars(value: str, env: Mapping[str, str], strict: bool = True) -> str:
    """Expand `${VAR}`, `${VAR:-default}` (default when unset or empty) and `$$` (a literal `$`).

    strict=False leaves unresolvable references as written (used for the digest of the whole text).
    """
    if "$" not in value:
        return value
    out: list[str] = []
    i = 0
    while True:
        j = value.find("$", i)
        if j < 0:
            out.append(value[i:])
            return "".join(out)
        out.append(value[i:j])
        nxt = value[j + 1 : j + 2]
        if nxt == "$":
            out.append("$")
            i = j + 2
            continue
        if nxt != "{":
            out.append("$")
            i = j + 1
            continue
        end = value.find("}", j + 2)
        try:
            if end < 0:
                raise ExpandError(f"unclosed '${{' in {value[j:]!r}")
            out.append(_resolve(value[j + 2 : end], env))
        except ExpandError:
            if strict:
                raise
            out.append(value[j : end + 1] if end >= 0 else value[j:])
            if end < 0:
                return "".join(out)
        i = end + 1


def _resolve(inner: str, env: Mapping[str, str]) -> str:
    name, sep, default = inner.partition(":-")
    if not _VAR_NAME.match(name):
        raise ExpandError(f"invalid variable reference '${{{inner}}}' (expected ${{NAME}} or ${{NAME:-default}})")
    if "${" in default:
        raise ExpandError(f"nested references are not supported in '${{{inner}}}'")
    value = env.get(name)
    if sep:
        return value if value else default
    if value is None:
        raise ExpandError(f"environment variable {name} is not set (write ${{{name}:-default}} to give a default)")
    return value


def parent_path(path: str) -> str | None:
    m = _PARENT.match(path)
    return m.group(1) if m else None


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@dataclass
class Tree:
    """A parsed document: `data`, the line of every key path, and errors found while building it."""

    data: Any
    lines: dict[str, int] = field(default_factory=dict)
    errors: list[PolicyError] = field(default_factory=list)
    bad_paths: set[str] = field(default_factory=set)  # values that failed to expand: no further errors there

    def line_for(self, path: str) -> int | None:
        p: str | None = path
        while p:
            if p in self.lines:
                return self.lines[p]
            p = parent_path(p)
        return self.lines.get("")


def read_tree(text: str, env: Mapping[str, str]) -> Tree:
    """Parse one YAML document. Syntax errors come back in `errors` with their line; `data` is then None."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(str(p) for p in (e.context, e.problem) if p) or "invalid YAML"
        lines = text.splitlines()
        if mark and mark.line < len(lines) and "${" in lines[mark.line] and "flow" in msg:
            msg += " (a ${...} value inside {...} or [...] must be quoted, or written in block style)"
        err = PolicyError("", f"YAML syntax error: {msg}", line=mark.line + 1 if mark else None)
        return Tree(None, errors=[err])
    except yaml.YAMLError as e:
        return Tree(None, errors=[PolicyError("", f"YAML error: {e}")])
    tree = Tree(None)
    if root is None:
        return tree
    builder = _Builder(tree, env)
    tree.lines[""] = root.start_mark.line + 1
    tree.data = builder.value(root, "")
    return tree


class _Builder:
    def __init__(self, tree: Tree, env: Mapping[str, str]) -> None:
        self.tree = tree
        self.env = env
        self.constructor = SafeConstructor()
        self.resolver = Resolver()
        self.stack: set[int] = set()
        self.merged: dict[int, int] = {}  # mapping node id -> how many of its pairs came from merge keys
        self.count = 0

    def error(self, path: str, message: str, node: Node) -> None:
        self.tree.errors.append(PolicyError(path, message, line=node.start_mark.line + 1))

    def value(self, node: Node, path: str) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            if self.count == MAX_NODES + 1:
                self.error(path, f"document too large (over {MAX_NODES} values after aliases)", node)
            return None
        self.tree.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if id(node) in self.stack:
            self.error(path, "recursive alias", node)
            return None
        self.stack.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return [self.value(item, join(path, i)) for i, item in enumerate(node.value)]
            if isinstance(node, MappingNode):
                return self.mapping(node, path)
        finally:
            self.stack.discard(id(node))
        self.error(path, f"unsupported YAML node {node.tag}", node)
        return None

    def mapping(self, node: MappingNode, path: str) -> dict[str, Any]:
        if id(node) not in self.merged:  # flatten once: an aliased node is visited again already flat
            own = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
            try:
                self.constructor.flatten_mapping(node)  # applies `<<: *anchor`, merged pairs first
            except yaml.YAMLError as e:
                self.error(path, f"bad merge key: {getattr(e, 'problem', e)}", node)
            self.merged[id(node)] = len(node.value) - own
        n_merged = self.merged[id(node)]
        out: dict[str, Any] = {}
        # the mapping's own keys win over merged ones; among merged pairs the last one wins (as PyYAML's)
        own_pairs = node.value[n_merged:]
        for index, (key_node, value_node) in enumerate(own_pairs + node.value[:n_merged][::-1]):
            from_merge = index >= len(own_pairs)
            if not isinstance(key_node, ScalarNode):
                self.error(path, "mapping keys must be plain strings", key_node)
                continue
            key = key_node.value  # as written: `on:`/`yes:` stay strings, not YAML 1.1 booleans
            child = join(path, key)
            if key in out:
                if not from_merge:
                    self.error(child, f"duplicate key {key!r}", key_node)
                continue
            self.tree.lines[child] = key_node.start_mark.line + 1
            out[key] = self.value(value_node, child)
        return out

    def scalar(self, node: ScalarNode, path: str) -> Any:
        if "$" in node.value:
            try:
                expanded = expand_vars(node.value, self.env)
            except ExpandError as e:
                self.error(path, str(e), node)
                self.tree.bad_paths.add(path)
                return node.value
            tag = node.tag
            if not node.style and tag == self.resolver.resolve(ScalarNode, node.value, (True, False)):
                tag = self.resolver.resolve(ScalarNode, expanded, (True, False))  # re-type plain scalars
            node = ScalarNode(tag, expanded, node.start_mark, node.end_mark, node.style)
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            self.error(path, f"cannot read value: {getattr(e, 'problem', None) or e}", node)
            self.tree.bad_paths.add(path)
            return node.value

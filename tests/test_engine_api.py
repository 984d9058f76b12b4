"""The seam between the gateway and the engine: the gateway imports only `engine`'s public names, the engine
never imports the gateway, the core never imports its serving layer, and the light public names load without
torch (a gateway with no engine backend must not pay for it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent


def imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, names) for every import statement of a module, nested ones included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_gateway_imports_only_names_engine_exports() -> None:
    public = set(engine.__all__)
    wrong = []
    for path in python_files("gateway"):
        for line, module, names in imports(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{line}"
            if is_under(module, "engine") and (module != "engine" or not names):
                wrong.append(f"{where}: imports {module} (use `from engine import ...`)")
            elif module == "engine":
                wrong.extend(f"{where}: engine does not export {n}" for n in names if n not in public)
    assert wrong == []


def test_engine_never_imports_the_gateway_and_the_core_never_its_serving_layer() -> None:
    wrong = []
    for path in python_files("engine"):
        # the package's __init__ (the public API) and __main__ sit above both layers
        above_core = path.is_relative_to(ROOT / "engine" / "serving") or path.parent == ROOT / "engine" and \
            path.name in ("__init__.py", "__main__.py")
        for line, module, _ in imports(ast.parse(path.read_text(), str(path))):
            if is_under(module, "gateway") or (not above_core and is_under(module, "engine.serving")):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert wrong == []


def test_every_public_name_resolves_and_all_lists_them() -> None:
    assert sorted(engine.__all__) == sorted(engine._EXPORTS)
    for name in engine.__all__:
        assert getattr(engine, name) is not None
    assert engine.parse_size("512MiB") == 512 * 2**20


def test_the_gateway_and_the_engines_light_names_load_without_torch() -> None:
    code = ("import sys, gateway.app, gateway.cli\n"
            "from engine import parse_size, Tokenizer, chat_messages, EngineRequestError, hash_prompt_blocks\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

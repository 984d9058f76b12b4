"""`llm-gateway policy check FILE...`: validate policy files without starting anything.

Prints `file:line: key: message` per problem and exits 1, or one OK line per file and exits 0.
"""

from __future__ import annotations

import argparse
import re
import sys

from gateway.config.errors import PolicyError
from gateway.config.loader import load_policy
from gateway.config.schema import Policy


def summary(policy: Policy) -> str:
    keys = sum(len(t.api_keys) for t in policy.tenants)
    tenants = f"{len(policy.tenants)} tenant(s), {keys} API key(s)" if keys else "no API keys (runs open)"
    return (
        f"OK: {len(policy.routes)} route(s), {len(policy.backends)} backend(s), {tenants}, "
        f"redis {re.sub(r'//[^@/]*@', '//***@', policy.redis.url)}, digest {policy.digest[:12]}"
    )


def main(argv: list[str]) -> int:
    """`argv` is what follows `policy check` on the command line."""
    parser = argparse.ArgumentParser(
        prog="llm-gateway policy check", description="Validate policy files: every error with file, line and key."
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="policy YAML file(s)")
    args = parser.parse_args(argv)
    failed = False
    for file in args.files:
        try:
            policy = load_policy(file)
        except PolicyError as e:
            failed = True
            for err in getattr(e, "errors", None) or [e]:
                print(str(err), file=sys.stdout)
            continue
        print(f"{file}: {summary(policy)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

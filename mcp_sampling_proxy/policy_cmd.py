"""`mcp-sampling-proxy policy check FILE...`: validate policy files without starting anything."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mcp_sampling_proxy.config import load_settings
from mcp_sampling_proxy.yamlnodes import PolicyError


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="mcp-sampling-proxy policy",
                                     description="Work with policy files.")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate policy files; exit 0 when all are valid, 1 otherwise")
    check.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(list(argv))
    failed = 0
    for path in args.files:
        try:
            settings = load_settings(path, environ={})
        except PolicyError as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        providers = ", ".join(f"{p.name} ({p.type})" for p in settings.providers) or "from the environment"
        print(f"{path}: ok ({len(settings.rules)} rules; providers: {providers})")
    return 1 if failed else 0

"""`mcp-sampling-proxy doctor [--policy FILE]`: check the setup the proxy depends on and say what to fix.

Checks, in order: the policy file (loaded exactly as the proxy loads it), each LLM provider (its
models list, or a 1-token completion when it has none; the status it got and whether the key
variable is set, never the key), the approval channels (this terminal, the companion console's
socket directory and who is attached, which hosts answer elicitation), the audit log's directory
and the state directory, every host config in the usual places, and each wrapped server entry as
its host will start it (proxy, server command on its PATH, policy, key variables),
and containment: whether servers run in the sandbox here, and whether the sealed state still verifies
(a remembered approval or a budgets file something else wrote).
Prints a checklist and exits 1 when something is broken; warnings (a
missing console, a model the provider does not list) do not fail it. Provider checks run in
parallel with a short timeout, so a dead provider costs seconds, not minutes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.paths import policy_or_default
from mcp_sampling_proxy.doctor.approval import check_approval
from mcp_sampling_proxy.doctor.files import check_containment, check_files
from mcp_sampling_proxy.doctor.hosts import check_hosts, check_remote_logins, check_wrapped_servers, host_configs
from mcp_sampling_proxy.doctor.policy import check_policy
from mcp_sampling_proxy.doctor.providers import check_providers
from mcp_sampling_proxy.doctor.startup import check_startup

PROG = "mcp-sampling-proxy doctor"
DEFAULT_TIMEOUT = 5.0

# -- output ---------------------------------------------------------------------------------------------


def _marks() -> dict[str, str]:
    marks = {"ok": "✓", "fail": "✗", "warn": "!", "info": "·"}
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "".join(marks.values()).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        marks = {"ok": "ok", "fail": "XX", "warn": "!", "info": "-"}
    return marks


def main(argv: Sequence[str]) -> int:
    parser = Parser(
        prog=PROG,
        description="Check the policy file, the LLM providers, the approval channels, the audit log, the "
        "state directory, the sandbox and the sealed state, and every wrapped server in the hosts' "
        "configs (proxy, server command, policy, key variables); print what to fix. "
        "Exit 1 when something is broken, 0 when all is well.",
        epilog="Providers are checked with this shell's environment. Wrapped servers are checked with the "
        "environment each host gives the proxy: a CLI started from a terminal passes that shell's, an editor "
        "such as VS Code a login shell's, a desktop app such as Claude Desktop only the entry's env (and "
        "the session's short PATH, where a command only your shell finds is not found).",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the policy file the proxy runs with (default: the one "
        "`init` writes, ~/.config/mcp-sampling-proxy/policy.yaml, when it exists)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"per provider (default {DEFAULT_TIMEOUT:g})",
    )
    args = parser.parse_args(list(argv))
    path, is_default = policy_or_default(args.policy)
    settings, policy = check_policy(path)
    statuses = host_configs()
    if is_default:
        policy.add("info", f"no --policy: using the default policy file {path}, as the proxy does")
    sections = [
        policy,
        check_providers(settings, args.timeout),
        check_approval(settings),
        check_files(settings),
        check_containment(settings),
        check_startup(),
        check_hosts(statuses),
        check_wrapped_servers(statuses),
        check_remote_logins(statuses),
    ]
    marks = _marks()
    print(
        f"{PROG}: providers are checked with this shell's environment; wrapped servers with the one each "
        "host gives the proxy (a desktop app does not see this shell's variables)"
    )
    for section in sections:
        print(f"\n{section.title}")
        for check in section.checks:
            print(f"  {marks[check.status]} {check.text}")
            if check.fix and check.status in ("fail", "warn"):
                print(f"      fix: {check.fix}")
    failures = sum(c.status == "fail" for s in sections for c in s.checks)
    warnings = sum(c.status == "warn" for s in sections for c in s.checks)
    summary = f"{failures} problem{'s' if failures != 1 else ''}, {warnings} warning{'s' if warnings != 1 else ''}"
    print(f"\n{summary}" if failures or warnings else "\neverything checked is in order")
    return 1 if failures else 0

"""Words defined once: what a rule says, how a request ended, size units, the CLI's subcommands.

Each vocabulary is a `Literal` type (mypy checks every place that produces a value) and the tuple
of its values (for validation and messages), derived from the type so the two cannot drift.
Protocol method names live in `protocol`, JSON-RPC error codes in `jsonrpc`.
"""

from __future__ import annotations

from typing import Literal, get_args

# What a rule decides (`action:`); with no matching rule, `prompt`.
Action = Literal["allow", "deny", "prompt"]
ACTIONS: tuple[Action, ...] = get_args(Action)

# What a size cap on maxTokens does to a request over it (`limits.max_tokens_action`).
MaxTokensAction = Literal["clamp", "deny"]
MAX_TOKENS_ACTIONS: tuple[MaxTokensAction, ...] = get_args(MaxTokensAction)

# How a request ended: an audit record's `decision` (auto_answered: a form answered by elicitation.auto_answers).
Outcome = Literal["allow", "deny", "approved", "rejected", "timeout", "error", "cancelled", "auto_answered"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
ALLOWED_OUTCOMES: tuple[Outcome, ...] = ("allow", "approved", "auto_answered")
REFUSED_OUTCOMES: tuple[Outcome, ...] = ("deny", "rejected", "timeout")

# How an approval of a host's tool call names its tool (`tools/call:NAME`), so that a remembered approval of
# the call never counts for sampling during that tool's calls, and the consoles can tell what they ask about.
TOOL_CALL_APPROVAL = "tools/call:"
# ... and of a sandboxed server's connection to a host its network grant does not list (`network:HOST:PORT`)
NETWORK_APPROVAL = "network:"

# Size units, as the policy file spells them (`512KiB`, `1MiB`; `KB`/`MB` are powers of 1000).
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# The command line's helper subcommands -> the module of `mcp_sampling_proxy.commands` that runs each
# (commands/cli.py imports it when used). Here, not in the CLI, because telling a running relay from a
# helper (`hardening.is_relay`) needs the names at the bottom layer.
SUBCOMMANDS = {
    "try": "try_sampling",
    "policy": "policy",
    "console": "console",
    "audit": "audit",
    "wrap": "wrap",
    "unwrap": "wrap",
    "doctor": "doctor",
    "login": "login",
    "logout": "login",
    "init": "init",
    "approvals": "approvals",
    "tools": "tools",
    "serve": "serve",
}

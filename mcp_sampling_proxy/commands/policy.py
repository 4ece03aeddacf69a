"""`mcp-sampling-proxy policy check FILE...` and `policy explain FILE (--prompt TEXT | --request REQUEST.json)`.

`check` validates policy files without starting anything. `explain` shows, rule by rule, what
the policy decides for one `sampling/createMessage` or `elicitation/create` request and what then
happens, by running the proxy's own judging code (`assess`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from mcp_sampling_proxy.commands.parsing import Parser
from mcp_sampling_proxy.config.settings import load_settings, settings_from_environment
from mcp_sampling_proxy.explain.elicitation import explain_elicitation
from mcp_sampling_proxy.explain.request import PROMPT_MAX_TOKENS, InputError, checked, prompt_request, read_request
from mcp_sampling_proxy.explain.sampling import explain
from mcp_sampling_proxy.explain.tool_call import explain_call
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest
from mcp_sampling_proxy.services.assess import Origin
from mcp_sampling_proxy.transport.sandbox import policy_grant_problems

PROG = "mcp-sampling-proxy policy"


def main(argv: Sequence[str]) -> int:
    parser = Parser(prog=PROG, description="Work with policy files.")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser(
        "check",
        help="validate policy files, naming every mistake as FILE:LINE:COL; exit 0 when all are valid, 1 otherwise",
    )
    check.add_argument("files", nargs="+", metavar="FILE")
    explain = sub.add_parser(
        "explain",
        help="show which rule decides a sampling or elicitation request, and what then happens",
        description="Show, rule by rule, what the policy FILE decides for one sampling/createMessage or "
        "elicitation/create request, then the limits that apply and the model (sampling) or the route "
        "(elicitation). It runs the proxy's own code. Give the request as a prompt (--prompt, with --model "
        "and --max-tokens), or as a file (--request; --template prints one to start from). Exit 0 when it "
        "ran, whatever the decision; 2 on bad input.",
        epilog="examples:\n"
        '  mcp-sampling-proxy policy explain policy.yaml --prompt "Summarise this" --server notes --tool summarize\n'
        "  mcp-sampling-proxy policy explain --template > request.json\n"
        "  mcp-sampling-proxy policy explain policy.yaml --request request.json --server notes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument("file", metavar="FILE", nargs="?", help="the policy file")
    given = explain.add_mutually_exclusive_group()
    given.add_argument(
        "--prompt",
        metavar="TEXT",
        help="the request is a sampling request with this text as its one user message",
    )
    given.add_argument(
        "--request",
        metavar="REQUEST.json",
        help="the request in a file: a sampling/createMessage or elicitation/create JSON-RPC request, or "
        "its params; lines starting with // are comments (see --template)",
    )
    given.add_argument(
        "--call",
        metavar="TOOL",
        help="the request is the host's tools/call of TOOL (with --arguments and --server): the tools: rules",
    )
    given.add_argument(
        "--template",
        action="store_true",
        help="print a commented REQUEST.json that --request takes as it is, and exit",
    )
    explain.add_argument(
        "--model",
        metavar="M",
        action="append",
        help="with --prompt: a model hint of the request (repeat for several, in order of preference)",
    )
    explain.add_argument(
        "--max-tokens",
        metavar="N",
        type=int,
        help=f"with --prompt: the maxTokens the request asks for (default {PROMPT_MAX_TOKENS})",
    )
    explain.add_argument("--server", default="", metavar="NAME", help="the server's name (as rules see it)")
    explain.add_argument(
        "--tool",
        metavar="NAME",
        action="append",
        help="the host's tools/call in flight (default: none, a request outside any tool call); "
        "repeat it for several calls in flight: the strictest outcome over them wins, as in the proxy",
    )
    explain.add_argument(
        "--server-reported",
        metavar="NAME",
        help="the name the server reports for itself (untrusted; for server_reported: rules)",
    )
    explain.add_argument("--host", default="", metavar="NAME", help="the host's clientInfo name")
    explain.add_argument(
        "--client",
        metavar="NAME",
        help="the caller's name under serve, its bearer token's name (for client: rules; default: none, as over stdio)",
    )
    explain.add_argument(
        "--arguments", metavar="JSON", help="with --call: the call's arguments, a JSON object (default {})"
    )
    args = parser.parse_args(list(argv))
    if args.action == "explain":
        if args.template:
            print(REQUEST_TEMPLATE, end="")
            return 0
        if args.arguments is not None and args.call is None:
            explain.error("--arguments goes with --call")
        if args.call is not None:
            if args.file is None:
                explain.error("give the policy FILE before --call")
            return explain_call_main(args.file, args.call, args.arguments, server=args.server, client=args.client)
        if args.prompt is None and (args.model or args.max_tokens is not None):
            explain.error(
                "--model and --max-tokens go with --prompt (in a --request file: modelPreferences, maxTokens)"
            )
        if args.max_tokens is not None and args.max_tokens < 1:
            explain.error(f"--max-tokens must be at least 1, got {args.max_tokens}")
        if args.file is None or (args.prompt is None and args.request is None):
            explain.error(
                "give the policy FILE and the request: --prompt TEXT, or --request REQUEST.json "
                "(--template prints one to start from)"
            )
        request: str | dict[str, Any] = args.request
        if args.prompt is not None:
            request = prompt_request(args.prompt, models=args.model or (), max_tokens=args.max_tokens)
        return explain_main(
            args.file,
            request,
            server=args.server,
            tool=args.tool,
            host=args.host,
            server_reported=args.server_reported,
            client=args.client,
        )
    failed = 0
    for path in args.files:
        try:
            settings = load_settings(path, environ={})
        except PolicyError as exc:
            print(exc, file=sys.stderr)
            count = len(exc.mistakes)
            if count > 1:
                print(f"{path}: {count} mistakes; fix them all, then check again", file=sys.stderr)
            failed += 1
            continue
        refused = policy_grant_problems(settings.sandbox, path, settings.named_files())
        if refused:
            for problem in refused:
                print(f"{path}: {problem}", file=sys.stderr)
            failed += 1
            continue
        providers = ", ".join(f"{p.name} ({p.type})" for p in settings.providers) or "from the environment"
        tools = f"; tools rules: {len(settings.tools.rules)}" if settings.tools.rules else ""
        print(f"{path}: ok ({len(settings.rules)} rules; providers: {providers}{tools})")
    return 1 if failed else 0


REQUEST_TEMPLATE = """\
// A request for: mcp-sampling-proxy policy explain POLICY --request THIS_FILE [--server NAME] [--tool NAME]
// It holds the params of a sampling/createMessage request, as a server sends them (a whole JSON-RPC
// request, {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {...}}, works too).
// Who sends it is given on the command line: --server (the name your rules see), --tool (the host's
// tool call in flight), --host, --client (the caller under serve). Lines starting with // are comments;
// explain skips them.
// For an elicitation/create request, give its params instead: {"message": "...", "requestedSchema": {...}}.
{
  // what the server asks the LLM, oldest first; role: user or assistant; a content block is
  // {"type": "text", "text": ...}, or image/audio: {"type": "image", "data": BASE64, "mimeType": "image/png"}
  "messages": [
    {"role": "user", "content": {"type": "text", "text": "Summarise this"}}
  ],
  // the most tokens the server asks for (required); rules with max_tokens_over: see it
  "maxTokens": 1000,
  // optional: the server's system prompt (text_matches: rules read it too)
  "systemPrompt": "You are a concise assistant.",
  // optional: the models the server would like, best first (model: rules and the model choice see them)
  "modelPreferences": {"hints": [{"name": "claude-sonnet"}], "intelligencePriority": 0.5},
  // optional: none, thisServer or allServers (include_context: rules)
  "includeContext": "none"
}
"""


def explain_main(
    policy: str,
    request: str | dict[str, Any],
    *,
    server: str,
    tool: str | Sequence[str] | None,
    host: str,
    server_reported: str | None = None,
    client: str | None = None,
) -> int:
    try:
        asked = read_request(request) if isinstance(request, str) else checked("--prompt", request)
        settings = load_settings(policy, environ={})
    except (InputError, PolicyError) as exc:
        print(f"{PROG} explain: error: {exc}", file=sys.stderr)
        return 2
    if not settings.providers:  # as the proxy does: a policy without llm takes the environment's providers
        settings.providers = settings_from_environment(dict(os.environ)).providers
    tools = (tool,) if isinstance(tool, str) else tuple(tool or ())
    origin = Origin(server, host, tools, server_reported, client)
    if isinstance(asked, SamplingRequest):
        lines = explain(settings, asked.wire, origin)
    else:
        lines = explain_elicitation(settings, asked, origin)
    print("\n".join(lines))
    return 0


def explain_call_main(policy: str, tool: str, arguments: str | None, *, server: str, client: str | None = None) -> int:
    """`explain --call`: which `tools:` rule decides a host's tools/call, and why the earlier ones do not."""
    try:
        settings = load_settings(policy, environ={})
        parsed = json.loads(arguments) if arguments is not None else {}
        if not isinstance(parsed, dict):
            raise InputError(f"--arguments must be a JSON object, got {type(parsed).__name__}")
    except ValueError as exc:
        print(f"{PROG} explain: error: --arguments is not JSON ({exc})", file=sys.stderr)
        return 2
    except (InputError, PolicyError) as exc:
        print(f"{PROG} explain: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(explain_call(settings, server or "upstream", tool, parsed, client=client)))
    return 0

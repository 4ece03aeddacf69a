"""Which `tools:` rule decides a host's tools/call, and why the earlier ones do not (`explain --call`)."""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.config.tool_settings import why_not
from mcp_sampling_proxy.text.sanitize import one_line


def explain_call(
    settings: Settings, server: str, tool: str, arguments: dict[str, Any], *, client: str | None = None
) -> list[str]:
    by = f" by client '{one_line(client, 80)}'" if client is not None else ""
    lines = [f"tools/call of '{one_line(tool, 80)}' on server '{one_line(server, 80)}'{by}"]
    for rule in settings.tools.rules:
        why = why_not(rule, server, tool, arguments, client=client)
        if why is not None:
            lines.append(f"  tools rule '{rule.name}' (line {rule.line}): no: {why}")
            continue
        lines.append(f"  tools rule '{rule.name}' (line {rule.line}): matches -> {rule.action}")
        hides = rule.action == "deny" and rule.arguments is None
        outcome = {
            "allow": "the call goes to the server (recorded in the audit log)",
            "deny": "the call is refused" + (", and the tool is hidden from tools/list" if hides else ""),
            "prompt": "a human is asked (approval.channels) before the call goes to the server",
        }[rule.action]
        lines.append(f"decision: {rule.action}: {outcome}")
        break
    else:
        lines.append("decision: allow: no tools rule matches, so the call goes to the server")
    pinning = "off" if not settings.tools.pin else f"on, on_change: {settings.tools.on_change}"
    lines.append(
        f"pinning: {pinning} (a tool changed since it was pinned is held whatever the rules say; "
        "see `mcp-sampling-proxy tools list`)"
    )
    return lines

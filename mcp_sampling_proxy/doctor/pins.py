"""doctor's check of the tool pins: a pins file that no longer verifies, and each server with held
changes (`mcp-sampling-proxy tools` shows and accepts them)."""

from __future__ import annotations

from mcp_sampling_proxy.doctor.checklist import Check
from mcp_sampling_proxy.quotas.integrity import start_anew
from mcp_sampling_proxy.quotas.state import state_dir
from mcp_sampling_proxy.quotas.tool_pins import PINS_FILE, ToolPins, trust_problem
from mcp_sampling_proxy.text.sanitize import one_line

TOOLS_COMMAND = "mcp-sampling-proxy tools"


def check_pins() -> list[Check]:
    """Untrusted pins (a failure: proxies then hold every tool), and each server with held changes."""
    pins = ToolPins(state_dir(create=False) / PINS_FILE)
    problem = trust_problem(pins)
    if problem is not None:
        return [
            Check(
                "fail",
                f"tool pins: {problem}: proxies hold every tool",
                f"{start_anew(pins.path)} to pin anew (something running as you changed it: a server without a "
                "sandbox?)",
            )
        ]
    checks: list[Check] = []
    for server in pins.servers() if pins.path.exists() else []:
        if server.pending:
            names = ", ".join(one_line(n, 60) for n in sorted(server.pending)[:10])
            more = f" and {len(server.pending) - 10} more" if len(server.pending) > 10 else ""
            checks.append(
                Check(
                    "warn",
                    f"tools held for server '{one_line(server.name, 80)}' (changed or new since pinned): {names}{more}",
                    f"`{TOOLS_COMMAND} diff {server.name}` shows what changed; "
                    f"`{TOOLS_COMMAND} accept {server.name} TOOL` lets it through",
                )
            )
    return checks

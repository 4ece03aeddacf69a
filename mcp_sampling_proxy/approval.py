"""Human approval for `prompt` decisions, failing closed.

Channels are tried in order; today that is the controlling terminal. When no channel can be
reached, or nobody answers within the timeout, the request is denied with a message that says
why and how to configure the proxy so the server author and the user both know what to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from mcp_sampling_proxy.terminal import Terminal

DEFAULT_TIMEOUT = 120.0

NO_CHANNEL_HINT = (
    "no approval channel is available (the proxy has no terminal; hosts such as Claude Desktop start it "
    "without one). Add a rule with 'action: allow' for this server to the policy file (--policy), "
    "or run the host from a terminal"
)


@dataclass(frozen=True)
class Approval:
    approved: bool
    channel: str | None  # "terminal", or None when nobody was asked
    reason: str
    outcome: str = ""  # approved | rejected | timeout | unavailable (for the audit record)


class Approver:
    def __init__(self, terminal: Terminal | None, timeout: float = DEFAULT_TIMEOUT):
        self._terminal = terminal
        self._timeout = timeout

    @property
    def available(self) -> bool:
        return self._terminal is not None

    async def ask(self, summary: str, rule: str) -> Approval:
        """Show the (already sanitised) summary and wait for yes/no."""
        terminal = self._terminal
        if terminal is None:
            return Approval(
                False, None, f"approval required by policy rule '{rule}' but {NO_CHANNEL_HINT}", "unavailable"
            )
        with anyio.move_on_after(self._timeout):
            async with terminal.lock:
                terminal.write("\n" + summary + "\nAllow this request? [y/N] ")
                answer = await terminal.readline()
            if answer is not None and answer.strip().lower() in ("y", "yes"):
                return Approval(True, "terminal", "approved at the terminal", "approved")
            return Approval(False, "terminal", "rejected at the terminal", "rejected")
        terminal.write("\n(no answer: request denied)\n")
        return Approval(
            False, "terminal", f"nobody answered the approval prompt within {self._timeout:g} s; denied",
            "timeout",
        )

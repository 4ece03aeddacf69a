"""The approval channels by name, made for one running proxy in the order `approval.channels` gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_sampling_proxy.approval.channels import Channel, ConsoleChannel, HostChannel
from mcp_sampling_proxy.approval.terminal_channel import TerminalChannel
from mcp_sampling_proxy.terminal import Terminal

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.console.server import ConsoleServer


def build_channels(order: tuple[str, ...], terminal: Terminal | None, console: ConsoleServer | None) -> list[Channel]:
    by_name: dict[str, Channel] = {"terminal": TerminalChannel(terminal), "host": HostChannel()}
    if console is not None:
        by_name["console"] = ConsoleChannel(console)
    return [by_name[name] for name in order if name in by_name]

"""The approval channels by name: what makes each one for a running proxy, in the order `approval.channels`
gives.

Adding a channel is its module (a class meeting `channels.Channel`) and one row in `FACTORIES`. The policy
file's `approval.channels` is checked against `config/settings.py`'s `APPROVAL_CHANNELS`, a layer below this
one; the names there must be these (checked when this module loads, and by
tests/unit/approval/test_approval_registry.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from msgspec import Struct

from mcp_sampling_proxy.approval.channels import Channel
from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.approval.console_channel import ConsoleChannel
from mcp_sampling_proxy.approval.host_channel import HostChannel
from mcp_sampling_proxy.approval.terminal_channel import TerminalChannel
from mcp_sampling_proxy.config.approval_grammar import WebhookSettings
from mcp_sampling_proxy.config.child_env import withheld
from mcp_sampling_proxy.config.settings import APPROVAL_CHANNELS
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.system.terminal import Terminal


class ChannelNeeds(Struct, frozen=True):
    """What the running proxy can give a channel when it is made. The relay is not here: a channel gets
    it with each question (`Channel.ask(request, host)`), as the host session changes."""

    terminal: Terminal | None  # the controlling terminal, or None when the proxy has none
    console: ConsoleServer | None  # the companion console's socket server, or None when it is off
    webhook: WebhookSettings | None = None  # approval.webhook, or None when the policy has none


def _terminal(needs: ChannelNeeds) -> Channel | None:
    return TerminalChannel(needs.terminal)


def _console(needs: ChannelNeeds) -> Channel | None:
    return ConsoleChannel(needs.console) if needs.console is not None else None


def _host(needs: ChannelNeeds) -> Channel | None:
    return HostChannel()


def _webhook(needs: ChannelNeeds) -> Channel | None:
    if needs.webhook is None:
        return None
    # start-up: the webhook's module and its signing (~5 ms) load only when the policy sets one
    from mcp_sampling_proxy.approval.webhook_channel import WebhookChannel, read_secret

    secret = read_secret(needs.webhook, os.environ, withheld)
    if secret is None:
        get_logger("mcp_sampling_proxy.approval.webhook").warning(
            "the approval webhook's secret is not set: the webhook channel is unavailable",
            source=needs.webhook.secret_source,
            fix="set it where the proxy starts (`mcp-sampling-proxy doctor` checks it)",
        )
    return WebhookChannel(needs.webhook, secret)


# name -> the channel for this proxy, or None when it cannot exist in it; in the default order
FACTORIES: dict[str, Callable[[ChannelNeeds], Channel | None]] = {
    "terminal": _terminal,
    "console": _console,
    "host": _host,
    "webhook": _webhook,
}
CHANNEL_NAMES = tuple(FACTORIES)

if CHANNEL_NAMES != APPROVAL_CHANNELS:  # a channel the policy cannot name, or a name nothing makes
    raise ImportError(
        f"approval/registry.py makes the channels {CHANNEL_NAMES} but config/settings.py's APPROVAL_CHANNELS "
        f"lists {APPROVAL_CHANNELS}: the two must be the same names, in the same order"
    )


def build_channels(order: tuple[str, ...], needs: ChannelNeeds) -> list[Channel]:
    """The channels named in `order` (the policy's `approval.channels`), each made once, in that order;
    one that cannot exist in this proxy (the console, when it is off) is left out."""
    made = (FACTORIES[name](needs) for name in order)
    return [channel for channel in made if channel is not None]

"""The policy's `sandbox:` section: how the governed server is contained (transport/sandbox.py does it).

    sandbox:
      mode: auto            # auto (default: where bubblewrap works) | required (refuse without) | off
      hide: [~/.ssh]        # paths the server does not see, besides the proxy's own (always hidden)
      read: [~/projects]    # paths the server sees read-only ("~" quoted for the home directory itself)
      write: [~/projects/out]   # paths it may write under a read-only one (or re-opened from the private /tmp)
      network: true         # false: no network at all
      servers:              # per server (the operator's name: --name, as `server:` rules spell it)
        filesystem: {write: [~/projects]}
        trusted-tool: off

Paths: `~` is the home directory; a relative path is relative to the policy file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import yaml

from mcp_sampling_proxy.identity import normalise

if TYPE_CHECKING:
    from mcp_sampling_proxy.yamlnodes import Node

MODES = ("auto", "required", "off")
KEYS = ("mode", "hide", "read", "write", "network")


@dataclass(frozen=True)
class SandboxSettings:
    """What the policy says about the sandbox (for one server: `servers:` entries override the rest)."""

    mode: str = "auto"  # auto: where it works | required: refuse to start without | off
    hide: tuple[str, ...] = ()  # paths the server does not see (an empty directory or file instead)
    read: tuple[str, ...] = ()  # paths the server sees read-only
    write: tuple[str, ...] = ()  # paths the server may write (under a read-only one)
    network: bool = True
    servers: dict[str, SandboxSettings] = field(default_factory=dict)

    def for_server(self, name: str) -> SandboxSettings:
        """The settings for the server called `name` (a `servers:` entry, else these)."""
        for key, settings in self.servers.items():
            if normalise(key) == normalise(name):
                return settings
        return self


def _mode(node: Node) -> str:
    """A mode, as written: YAML reads a bare `off` (and `on`) as a boolean, so those count too."""
    value = node.value()
    if isinstance(value, bool):
        return "auto" if value else "off"
    return node.choice(MODES)


def _is_mode(node: Node) -> bool:
    return isinstance(node.value(), str | bool)


def parse_sandbox(node: Node, where: str) -> SandboxSettings:
    """The `sandbox:` section (a mapping, or `off` / `auto` / `required` alone)."""
    if _is_mode(node):
        return SandboxSettings(mode=_mode(node))
    given = node.mapping((*KEYS, "servers"))
    base = _one(given, where, SandboxSettings())
    servers: dict[str, SandboxSettings] = {}
    if "servers" in given:
        for name, entry in given["servers"].mapping().items():
            if _is_mode(entry):
                servers[name] = SandboxSettings(
                    mode=_mode(entry), hide=base.hide, read=base.read, write=base.write, network=base.network
                )
            else:
                servers[name] = _one(entry.mapping(KEYS), where, base)
    return SandboxSettings(base.mode, base.hide, base.read, base.write, base.network, servers)


def _one(given: dict[str, Node], where: str, defaults: SandboxSettings) -> SandboxSettings:
    """One server's settings: what `given` says, else `defaults` (a server's list adds to the section's)."""
    return SandboxSettings(
        mode=_mode(given["mode"]) if "mode" in given else defaults.mode,
        hide=defaults.hide + _paths(given, "hide", where),
        read=defaults.read + _paths(given, "read", where),
        write=defaults.write + _paths(given, "write", where),
        network=given["network"].bool() if "network" in given else defaults.network,
    )


def _paths(given: dict[str, Node], key: str, where: str) -> tuple[str, ...]:
    if key not in given:
        return ()
    base = os.path.dirname(os.path.abspath(where)) if where and where != "environment" else os.getcwd()
    node = given[key]
    for item in [node] if isinstance(node.node, yaml.ScalarNode) else node.sequence():
        if isinstance(item.node, yaml.ScalarNode) and item.node.value == "~" and not item.node.style:
            raise item.error(
                f'sandbox {key}: a bare ~ is YAML\'s null, not your home directory: write "~" (quoted) or ~/'
            )
    found = []
    for raw in node.strings():
        path = os.path.expanduser(raw)
        found.append(path if os.path.isabs(path) else os.path.join(base, path))
    return tuple(found)

"""The policy's `sandbox:` section: what the governed server is granted (transport/sandbox.py contains it).

    sandbox:
      mode: auto            # auto (default: where bubblewrap works) | required (refuse without) | off
      write: [~/projects/out]   # where servers may write (everything else is read-only to them)
      read: [~/.ssh]        # a path hidden by default (secrets) that servers may read after all
      hide: [~/private]     # more paths servers do not see, besides the proxy's own and your secrets
      network: true         # true: public hosts, through the proxy | false: none | host: yours, unfiltered
                            # | [api.example.com, "*.github.com:443"]: only these (others asked, or refused)
      servers:              # per server (the operator's name: --name, as `server:` rules spell it)
        filesystem: {write: [~/projects]}
        trusted-tool: off

Grants, not exceptions: the filesystem is read-only to the server but for its `write:` paths, a data
directory of its own and a package runner's cache of its own; secrets are hidden unless `read:` names them.
Paths: `~` is the home directory; a relative path is relative to the policy file.
"""

from __future__ import annotations

import ipaddress
import os
import re
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import yaml
from msgspec import Struct, field

from mcp_sampling_proxy.text.identity import normalise

if TYPE_CHECKING:
    from mcp_sampling_proxy.notation.yamlnodes import Node

MODES = ("auto", "required", "off")
KEYS = ("mode", "hide", "read", "write", "network")
NETWORK_FORMS = "true (public hosts, through the proxy), false (none), host (yours, unfiltered) or a list of hosts"


class HostGrant(Struct, frozen=True):
    """One entry of a `network:` list: a host name (`*.` for any subdomain), an IP address or a network
    (CIDR), with an optional port."""

    pattern: str  # lower case; "*.example.com", "example.com", "10.0.0.0/8", "::1"
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.pattern}]" if ":" in self.pattern and "/" not in self.pattern else self.pattern
        return host if self.port is None else f"{host}:{self.port}"

    def names(self, host: str, port: int) -> bool:
        """True when this entry grants `host` (a name or an address as the server asked) on `port`."""
        if self.port is not None and self.port != port:
            return False
        host = host.lower().rstrip(".")
        network = _network(self.pattern)
        if network is not None:
            try:
                return ipaddress.ip_address(host.strip("[]")) in network
            except ValueError:
                return False
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:]) and host != self.pattern[2:]
        return fnmatchcase(host, self.pattern)

    def grants_address(self, address: str, port: int) -> bool:
        """True when this entry names the address itself (an IP or a network, not a host name)."""
        network = _network(self.pattern)
        if network is None or (self.port is not None and self.port != port):
            return False
        return ipaddress.ip_address(address) in network


def _network(pattern: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(pattern, strict=False)
    except ValueError:
        return None


class Network(Struct, frozen=True):
    """What a sandboxed server may reach over the network."""

    mode: str = "relay"  # relay: through the proxy's filter | none | host: the user's own network, unfiltered
    hosts: tuple[HostGrant, ...] = ()  # relay: only these (asked for others); empty: any public host

    @property
    def listed(self) -> bool:
        return self.mode == "relay" and bool(self.hosts)

    def describe(self) -> str:
        if self.mode == "none":
            return "no network"
        if self.mode == "host":
            return "your network, unfiltered (loopback services and abstract sockets included)"
        if self.hosts:
            return "only " + ", ".join(map(str, self.hosts)) + " (others asked, or refused)"
        return "public hosts through the proxy (not your loopback or link-local addresses)"


class SandboxSettings(Struct, frozen=True):
    """What the policy grants a server (for one server: `servers:` entries add to the section's)."""

    mode: str = "auto"  # auto: where it works | required: refuse to start without | off
    hide: tuple[str, ...] = ()  # paths the server does not see (an empty directory or file instead)
    read: tuple[str, ...] = ()  # hidden-by-default paths (secrets) the server may read
    write: tuple[str, ...] = ()  # paths the server may write
    network: Network = field(default_factory=Network)
    servers: dict[str, SandboxSettings] = field(default_factory=dict)
    where: str = ""  # how messages name this entry: "sandbox" or "sandbox.servers.NAME"

    def place(self, name: str) -> str:
        """Where a grant for the server `name` goes: its own `sandbox.servers` entry (a section-wide grant
        would reach every server)."""
        return self.where if self.where.startswith("sandbox.servers.") else f"sandbox.servers.{name}"

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
        return SandboxSettings(mode=_mode(node), where="sandbox")
    given = node.mapping((*KEYS, "servers"))
    base = _one(given, where, SandboxSettings(where="sandbox"))
    servers: dict[str, SandboxSettings] = {}
    if "servers" in given:
        for name, entry in given["servers"].mapping().items():
            label = f"sandbox.servers.{name}"
            if _is_mode(entry):
                servers[name] = SandboxSettings(
                    _mode(entry), base.hide, base.read, base.write, base.network, where=label
                )
            else:
                servers[name] = _one(
                    entry.mapping(KEYS),
                    where,
                    SandboxSettings(base.mode, base.hide, base.read, base.write, base.network, where=label),
                )
    return SandboxSettings(base.mode, base.hide, base.read, base.write, base.network, servers, "sandbox")


def _one(given: dict[str, Node], where: str, defaults: SandboxSettings) -> SandboxSettings:
    """One server's settings: what `given` says, else `defaults` (a server's list adds to the section's)."""
    return SandboxSettings(
        mode=_mode(given["mode"]) if "mode" in given else defaults.mode,
        hide=defaults.hide + _paths(given, "hide", where),
        read=defaults.read + _paths(given, "read", where),
        write=defaults.write + _paths(given, "write", where),
        network=parse_network(given["network"]) if "network" in given else defaults.network,
        where=defaults.where,
    )


def parse_network(node: Node) -> Network:
    """`network:` true | false | host | a list of hosts."""
    value = node.value()
    if isinstance(value, bool):
        return Network("relay" if value else "none")
    if value == "host":
        return Network("host")
    if isinstance(value, str) or not node.is_sequence():
        raise node.error(f"{node.label} must be {NETWORK_FORMS}, got {value!r}")
    return Network("relay", tuple(parse_host_grant(item.str(), item) for item in node.sequence()))


_PORT = re.compile(r"^(?P<host>.+?)(?::(?P<port>\d{1,5}))?$")
_NAME = re.compile(r"^(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")


def parse_host_grant(text: str, node: Node | None = None) -> HostGrant:
    """ "example.com", "*.example.com:443", "10.0.0.0/8", "[::1]:8080", "127.0.0.1:5432" -> HostGrant."""

    def bad(why: str) -> Exception:
        message = f"network entry {text!r}: {why}"
        return node.error(message) if node is not None else ValueError(message)

    raw = text.strip().lower()
    port: int | None = None
    if raw.startswith("["):  # [v6]:port
        host, _, rest = raw[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise bad("write an IPv6 address with a port as [ADDRESS]:PORT")
            port = int(rest[1:])
    elif raw.count(":") > 1:  # a bare IPv6 address (or network)
        host = raw
    else:
        match = _PORT.match(raw)
        host, port = (match["host"], int(match["port"])) if match and match["port"] else (raw, None)
    if port is not None and not 0 < port < 65536:
        raise bad("a port is between 1 and 65535")
    if _network(host) is None and not _NAME.match(host):
        raise bad("give a host name (*.example.com for its subdomains), an IP address or a network (10.0.0.0/8)")
    return HostGrant(host.rstrip("."), port)


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
        found.append(os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path)))
    return tuple(found)

"""What the relay learns about both peers of one session, read by whatever answers the server."""

from __future__ import annotations

import functools
from typing import Any

from msgspec import Struct, field

from mcp_sampling_proxy.relay.calls import ORIGIN_TOOLS, HostRequest
from mcp_sampling_proxy.text.identity import normalise, server_phrase, shown
from mcp_sampling_proxy.text.sanitize import strip_controls


@functools.lru_cache(maxsize=2)  # the current name (and the last): names are server-sized
def _shown_if_different(reported: str, ours: str) -> str | None:
    """Worked out once per name: every sampling request's audit record and log line asks (and a
    server chooses how long its name is)."""
    if normalise(reported) == normalise(ours):
        return None
    return strip_controls(shown(reported))[:200]


class Session(Struct):
    """What the relay has learned about both peers; read by the ports' handlers for routing and policy."""

    name_override: str | None = None
    host_info: dict[str, Any] = field(default_factory=dict)
    host_capabilities: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    protocol_version: str | None = None
    inflight: dict[Any, HostRequest] = field(default_factory=dict)  # by the id the host waits on
    host_era: str | None = None  # "handshake" | "modern": what the host speaks (relay/bridge.py)
    server_era: str | None = None  # what the server leg speaks
    client: str | None = None  # who called, when served over HTTP (`serve`): the bearer token's name
    served: str | None = None  # `serve`'s own id of this session (or 2026 caller's lane), for its audit records

    @property
    def server_name(self) -> str:
        """The operator's name for the server (`--name`, or derived from its command or URL).

        Never the server's own serverInfo.name: the server is untrusted and could borrow another's."""
        return self.name_override or "upstream"

    @property
    def server_reported(self) -> str | None:
        """The name the server reports for itself (untrusted), None when it gave none."""
        name = self.server_info.get("name")
        return name if isinstance(name, str) else None

    @property
    def server_reported_if_different(self) -> str | None:
        """The reported name made printable, for logs and prompts, when it differs from ours."""
        reported = self.server_reported
        return None if reported is None else _shown_if_different(reported, self.server_name)

    @property
    def server_label(self) -> str:
        """The operator's name, plus the reported one when different, quoted (identity.server_phrase):
        what a human is shown, as `Server {label} asks ...`."""
        return server_phrase(self.server_name, self.server_reported_if_different)

    def tool_candidates(self) -> tuple[str, ...]:
        """The host tools/calls that could own a server request now: the one whose retry carries
        it (2026 era, see input_required), else every tools/call in flight, oldest first."""
        fixed = ORIGIN_TOOLS.get()
        return fixed if fixed is not None else self.tools_in_flight()

    @property
    def host_name(self) -> str:
        return str(self.host_info.get("name") or "")

    def tools_in_flight(self) -> tuple[str, ...]:
        return tuple(r.tool for r in self.inflight.values() if r.tool)

"""What the upstream is told the client can do: the host's capabilities plus what we serve.

Servers look at client capabilities before they sample, so the proxy adds `sampling` (and
`sampling.tools` when the adapter can use tools) to the host's `initialize`, and in the
2026-07-28 era to each request's `_meta`. It never advertises what it cannot serve: when the
proxy answers sampling itself, a task-augmented sampling capability of the host is removed.
"""

from __future__ import annotations

import copy
from typing import Any

CLIENT_CAPS_META = "io.modelcontextprotocol/clientCapabilities"
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"


def offered_sampling(*, route: str, tools: bool) -> dict[str, Any] | None:
    """The sampling capability the proxy itself can serve, or None when it only forwards."""
    if route == "host":
        return None
    return {"tools": {}} if tools else {}


def augment(capabilities: dict[str, Any], sampling: dict[str, Any] | None, route: str) -> dict[str, Any]:
    """The capabilities to present upstream (a new dict; the host's stay as they were)."""
    if sampling is None:
        return capabilities
    merged = copy.deepcopy(capabilities)
    host_sampling = merged.get("sampling")
    served_by_host = route == "auto" and isinstance(host_sampling, dict)
    combined = dict(host_sampling) if isinstance(host_sampling, dict) else {}
    for key, value in sampling.items():
        combined.setdefault(key, value)
    merged["sampling"] = combined
    if not served_by_host:
        _drop_task_sampling(merged)
    return merged


def _drop_task_sampling(capabilities: dict[str, Any]) -> None:
    """We answer sampling directly, so we cannot honour `params.task` for it."""
    requests = capabilities.get("tasks", {}).get("requests") if isinstance(capabilities.get("tasks"), dict) else None
    if isinstance(requests, dict):
        requests.pop("sampling", None)


def rewrite_request(message: dict[str, Any], sampling: dict[str, Any] | None, route: str) -> bool:
    """Augment `initialize` params or a 2026-era request's `_meta`; True when changed."""
    if sampling is None:
        return False
    params = message.get("params")
    if not isinstance(params, dict):
        return False
    if message.get("method") == "initialize":
        caps = params.get("capabilities")
        params["capabilities"] = augment(caps if isinstance(caps, dict) else {}, sampling, route)
        return True
    meta = params.get("_meta")
    if isinstance(meta, dict) and (PROTOCOL_VERSION_META in meta or CLIENT_CAPS_META in meta):
        caps = meta.get(CLIENT_CAPS_META)
        meta[CLIENT_CAPS_META] = augment(caps if isinstance(caps, dict) else {}, sampling, route)
        return True
    return False

"""What the upstream is told the client can do: the host's capabilities plus what we serve.

Servers look at client capabilities before they sample or elicit, so the proxy adds `sampling`
(and `sampling.tools` when the adapter can use tools) and `elicitation` (the modes it can serve)
to the host's `initialize`, and in the 2026-07-28 era to each request's `_meta`. It never
advertises what it cannot serve: when the proxy answers a kind of request itself, the host's
task-augmented capability for it is removed (the proxy answers directly, never as a task).
"""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.protocol.names import CLIENT_CAPS_META, PROTOCOL_VERSION_META
from mcp_sampling_proxy.protocol.wire_types import JsonRpcRequest

Offers = dict[str, dict[str, Any]]  # capability name -> what the proxy adds under it


def offered_sampling(*, route: str, tools: bool) -> dict[str, Any] | None:
    """The sampling capability the proxy itself can serve, or None when it only forwards."""
    if route == "host":
        return None
    return {"tools": {}} if tools else {}


def offered_elicitation(*, route: str, url_mode: bool) -> dict[str, Any] | None:
    """The elicitation modes the proxy can answer (on a console, or by policy), or None."""
    if route == "host":
        return None
    return {"form": {}, "url": {}} if url_mode else {"form": {}}


def offers(sampling: dict[str, Any] | None, elicitation: dict[str, Any] | None) -> Offers:
    found: Offers = {}
    if sampling is not None:
        found["sampling"] = sampling
    if elicitation is not None:
        found["elicitation"] = elicitation
    return found


def augment(capabilities: dict[str, Any], offered: Offers, routes: dict[str, str]) -> dict[str, Any]:
    """The capabilities to present upstream: a new dict, each level it changes a copy of its own, so the host's
    and `offered` stay as they were (a deep copy of every 2026-07-28 request's capabilities cost ~9 us)."""
    if not offered:
        return capabilities
    merged = dict(capabilities)
    for name, extra in offered.items():
        host_cap = merged.get(name)
        served_by_host = routes.get(name, "auto") in ("auto", "host") and isinstance(host_cap, dict)
        combined = dict(host_cap) if isinstance(host_cap, dict) else {}
        if name == "elicitation" and isinstance(host_cap, dict) and not host_cap:
            combined = {"form": {}}  # an empty elicitation capability means form mode (2025-06-18)
        for key, value in extra.items():
            if key not in combined:
                combined[key] = dict(value) if isinstance(value, dict) else value
        merged[name] = combined
        if not served_by_host:
            _drop_task_capability(merged, name)
    return merged


def _drop_task_capability(capabilities: dict[str, Any], name: str) -> None:
    """We answer this kind of request directly, so we cannot honour `params.task` for it (the `tasks` and
    `requests` levels are replaced by copies: the host's stay whole)."""
    tasks = capabilities.get("tasks")
    if not isinstance(tasks, dict):
        return
    requests = tasks.get("requests")
    if isinstance(requests, dict) and name in requests:
        kept = {key: value for key, value in requests.items() if key != name}
        capabilities["tasks"] = {**tasks, "requests": kept}


def rewrite_request(message: JsonRpcRequest, offered: Offers, routes: dict[str, str]) -> bool:
    """Augment `initialize` params or a 2026-era request's `_meta`; True when changed."""
    if not offered:
        return False
    params = message.get("params")
    if not isinstance(params, dict):
        return False
    if message.get("method") == "initialize":
        caps = params.get("capabilities")
        params["capabilities"] = augment(caps if isinstance(caps, dict) else {}, offered, routes)
        return True
    meta = params.get("_meta")
    if isinstance(meta, dict) and (PROTOCOL_VERSION_META in meta or CLIENT_CAPS_META in meta):
        caps = meta.get(CLIENT_CAPS_META)
        meta[CLIENT_CAPS_META] = augment(caps if isinstance(caps, dict) else {}, offered, routes)
        return True
    return False

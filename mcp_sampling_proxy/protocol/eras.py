"""The two protocol eras on the wire, and the pure translations the era bridge makes between them.

Handshake era (`initialize`, versions up to 2025-11-25): the client says who it is and what it can
do once, the server may send requests of its own (sampling, elicitation, roots, ping) during a call.
2026-07-28: no handshake (`server/discover` is optional), every request carries the protocol
version, client info and client capabilities in `params._meta`, and a server asks for input by
answering a call with `resultType: "input_required"`. Nothing here does I/O: the relay's bridge
(relay/bridge.py) decides when to translate, these functions say how.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from mcp_sampling_proxy.protocol.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, as_object
from mcp_sampling_proxy.protocol.names import (
    CLIENT_CAPS_META,
    CLIENT_INFO_META,
    PROTOCOL_VERSION_META,
    SERVER_INFO_META,
)
from mcp_sampling_proxy.protocol.wire_types import ErrorObject, JsonObject

MODERN = "2026-07-28"
MODERN_VERSIONS = (MODERN,)
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE = HANDSHAKE_VERSIONS[-1]
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
SUBSCRIPTION_ID_META = "io.modelcontextprotocol/subscriptionId"
UNSUPPORTED_PROTOCOL_VERSION = -32022
HEADER_MISMATCH = -32020  # an HTTP header contradicts the request body
# handshake-era methods the 2026-07-28 revision removed (the session, ping and the level are gone; resource
# updates come through subscriptions/listen)
REMOVED_METHODS = frozenset({"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})

# Results a 2026-07-28 client may cache, which must say for how long and for whom (SEP-2549).
CACHEABLE = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
# 2026-07-28 subscription filter keys, and the server capability each needs (subscriptions/listen).
ListChanged = Literal["toolsListChanged", "promptsListChanged", "resourcesListChanged"]
LIST_CHANGED: dict[ListChanged, tuple[str, str]] = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
RESOURCE_UPDATED = "notifications/resources/updated"
PROXY_NAME = "mcp-sampling-proxy"


class SubscriptionFilter(TypedDict, total=False):
    """What a `subscriptions/listen` asks for (the proxy's, or the part of a host's it honours)."""

    toolsListChanged: bool
    promptsListChanged: bool
    resourcesListChanged: bool
    resourceSubscriptions: list[str]


class DiscoverResult(TypedDict, total=False):
    """The `server/discover` result the proxy builds for a 2026-era host from a handshake server."""

    resultType: str
    supportedVersions: list[str]
    capabilities: JsonObject  # the server's
    ttlMs: int
    cacheScope: str
    instructions: str
    _meta: JsonObject


class InitializeResult(TypedDict, total=False):
    """The `initialize` result the proxy builds for a handshake-era host from a 2026-era server."""

    protocolVersion: str
    capabilities: JsonObject  # the server's
    serverInfo: JsonObject
    instructions: str


def modern_version(params: Any) -> str | None:
    """The 2026-era protocol version a request's `_meta` claims, or None for a handshake-era request."""
    version = as_object(as_object(params).get("_meta")).get(PROTOCOL_VERSION_META)
    return version if isinstance(version, str) and version not in HANDSHAKE_VERSIONS else None


def missing_meta(params: Any) -> list[str]:
    """The `_meta` keys every 2026-era request must carry that `params` lacks (SEP-2575: the protocol
    version and the client's capabilities; the client's info is optional)."""
    meta = as_object(params).get("_meta")
    if not isinstance(meta, dict):
        return ["_meta"]
    return [key for key in (PROTOCOL_VERSION_META, CLIENT_CAPS_META) if key not in meta]


def http_refusal(message: Mapping[str, object], header_version: str | None) -> tuple[int, ErrorObject] | None:
    """How an HTTP endpoint refuses a 2026-era request before anything serves it (SEP-2575): the HTTP
    status and the JSON-RPC error, or None. A request without its `_meta` fields, one whose `_meta`
    version contradicts its `MCP-Protocol-Version` header, and one of the methods 2026-07-28 removed."""
    missing = missing_meta(message.get("params"))
    if missing:
        text = f"Invalid params: a {MODERN} request carries {', '.join(missing)} in params._meta"
        return 400, {"code": INVALID_PARAMS, "message": text}
    claimed = as_object(as_object(message.get("params")).get("_meta")).get(PROTOCOL_VERSION_META)
    if header_version is not None and claimed != header_version:
        text = f"Header mismatch: MCP-Protocol-Version is {header_version!r}, params._meta says {str(claimed)[:40]!r}"
        return 400, {"code": HEADER_MISMATCH, "message": text}
    if message.get("method") in REMOVED_METHODS:
        return 404, {"code": METHOD_NOT_FOUND, "message": f"Method not found: {MODERN} has no {message.get('method')}"}
    return None


def request_meta(
    version: str, client_info: dict[str, Any], capabilities: dict[str, Any], log_level: str | None = None
) -> dict[str, Any]:
    """The per-request `_meta` a 2026-era request carries (client info and capabilities copied)."""
    meta: dict[str, Any] = {PROTOCOL_VERSION_META: version, CLIENT_CAPS_META: copy.deepcopy(capabilities)}
    if client_info:
        meta[CLIENT_INFO_META] = copy.deepcopy(client_info)
    if log_level is not None:
        meta[LOG_LEVEL_META] = log_level
    return meta


def stamp_meta(params: dict[str, Any], meta: dict[str, Any]) -> None:
    """Add the 2026 `_meta` keys to a handshake-era request's params (its own keys, e.g. a progress
    token, stay; a key it already has wins)."""
    own = params.get("_meta")
    params["_meta"] = {**meta, **own} if isinstance(own, dict) else dict(meta)


ENVELOPE_KEYS = frozenset({PROTOCOL_VERSION_META, CLIENT_INFO_META, CLIENT_CAPS_META, LOG_LEVEL_META})


def handshake_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """A 2026-era request's `_meta` without the envelope keys, for a handshake server (SDKs refuse a
    request that carries them on a handshake connection); `meta` itself when it has none."""
    if not ENVELOPE_KEYS.intersection(meta):
        return meta
    return {k: v for k, v in meta.items() if k not in ENVELOPE_KEYS}


def supports_modern(discover_result: Any) -> bool:
    """True when a `server/discover` result offers a 2026-era version this proxy speaks."""
    versions = as_object(discover_result).get("supportedVersions")
    return isinstance(versions, list) and any(v in MODERN_VERSIONS for v in versions)


def retry_at_modern(error: Any) -> bool:
    """True for an "unsupported protocol version" error (-32022) whose `data.supported` names the
    2026 version this proxy speaks: a server may refuse a first request that way and take a retry."""
    error = as_object(error)
    supported = as_object(error.get("data")).get("supported")
    return (
        error.get("code") == UNSUPPORTED_PROTOCOL_VERSION
        and isinstance(supported, list)
        and any(v in MODERN_VERSIONS for v in supported)
    )


_INPUT_ROUND_WORDS = ("InputRequiredResult", "input_required", "SEP-2322", "multi-round-trip")


def needs_input_rounds(error: Any) -> bool:
    """True for a dual-era server's refusal of a call on a handshake connection because the call asks
    for input by an `input_required` result, which only 2026-07-28 carries. FastMCP 4 says so in words
    ("... returned an InputRequiredResult ... (SEP-2322) only exists at MCP 2026-07-28; this connection
    negotiated ..."); there is no code for it."""
    message = as_object(error).get("message")
    return isinstance(message, str) and MODERN in message and any(word in message for word in _INPUT_ROUND_WORDS)


def era_refused(error: Any) -> bool:
    """True for a refusal of a request for its protocol era (the version, or the 2026 envelope)."""
    return as_object(error).get("code") in (UNSUPPORTED_PROTOCOL_VERSION, INVALID_REQUEST)


def initialize_params(meta: dict[str, Any], version: str = LATEST_HANDSHAKE) -> dict[str, Any]:
    """An `initialize` request's params built from a 2026-era request's `_meta`: the handshake the
    proxy opens for a handshake-only server on behalf of a 2026-era host."""
    info = as_object(meta.get(CLIENT_INFO_META))
    return {
        "protocolVersion": version,
        "capabilities": copy.deepcopy(as_object(meta.get(CLIENT_CAPS_META))),
        "clientInfo": copy.deepcopy(info) if info.get("name") else {"name": PROXY_NAME, "version": "0"},
    }


def discover_result(initialize_result: JsonObject) -> DiscoverResult:
    """A `server/discover` result built from a handshake server's `initialize` result, for a
    2026-era host: the server's capabilities and instructions, its info in `_meta`."""
    result: DiscoverResult = {
        "resultType": "complete",
        "supportedVersions": list(MODERN_VERSIONS),
        "capabilities": copy.deepcopy(as_object(initialize_result.get("capabilities"))),
        "ttlMs": 0,
        "cacheScope": "private",
    }
    if isinstance(instructions := initialize_result.get("instructions"), str):
        result["instructions"] = instructions
    info = as_object(initialize_result.get("serverInfo"))
    if info:
        result["_meta"] = {SERVER_INFO_META: copy.deepcopy(info)}
    return result


def initialize_result(discover: JsonObject, requested: Any, fallback_name: str) -> InitializeResult:
    """An `initialize` result built from a 2026-era server's `server/discover` result, for a
    handshake-era host: the version it asked for (when this proxy knows it), the server's
    capabilities, info and instructions."""
    version = requested if requested in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE
    info = as_object(as_object(discover.get("_meta")).get(SERVER_INFO_META))
    result: InitializeResult = {
        "protocolVersion": version,
        "capabilities": copy.deepcopy(as_object(discover.get("capabilities"))),
        "serverInfo": copy.deepcopy(info) if info.get("name") else {"name": fallback_name, "version": "unknown"},
    }
    if isinstance(instructions := discover.get("instructions"), str):
        result["instructions"] = instructions
    return result


def complete_result(result: JsonObject, method: str | None) -> JsonObject | None:
    """A handshake server's result as a 2026-era host requires it (`resultType`, and for cacheable
    methods `ttlMs` and `cacheScope`: nothing may be cached, as the server said nothing about it);
    None when it already is."""
    missing: dict[str, object] = {}
    if "resultType" not in result:
        missing["resultType"] = "complete"
    if method in CACHEABLE:
        if "ttlMs" not in result:
            missing["ttlMs"] = 0
        if "cacheScope" not in result:
            missing["cacheScope"] = "private"
    return {**result, **missing} if missing else None


def honoured_filter(requested: JsonObject, capabilities: JsonObject) -> SubscriptionFilter:
    """The part of a `subscriptions/listen` filter a handshake server can honour: list changes of
    what it offers (a handshake server sends them whatever its `listChanged` says, and a direct host
    gets them), and resource updates when it offers subscriptions."""
    honoured: SubscriptionFilter = {}
    for key, (capability, _method) in LIST_CHANGED.items():
        if requested.get(key) is True and isinstance(capabilities.get(capability), dict):
            honoured[key] = True
    uris = requested.get("resourceSubscriptions")
    if isinstance(uris, list) and as_object(capabilities.get("resources")).get("subscribe") is True:
        honoured["resourceSubscriptions"] = [u for u in uris if isinstance(u, str)]
    return honoured


def listen_filter(capabilities: JsonObject, resources: list[str]) -> SubscriptionFilter:
    """The `subscriptions/listen` filter that gives a handshake host what it would get directly: every
    list change the server announces, and updates of the resources it subscribed to."""
    wanted: SubscriptionFilter = {}
    for key, (capability, _m) in LIST_CHANGED.items():
        if as_object(capabilities.get(capability)).get("listChanged") is True:
            wanted[key] = True
    if resources:
        wanted["resourceSubscriptions"] = list(resources)
    return wanted


LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def log_wanted(level: Any, threshold: str | None) -> bool:
    """True when a log message at `level` is at or above the level a 2026 host asked for (None: none)."""
    if threshold not in LOG_LEVELS:
        return False
    return level not in LOG_LEVELS or LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


def wanted_by(filter_: SubscriptionFilter, method: str, params: JsonObject) -> bool:
    """True when a server notification is one a subscription's filter asked for."""
    if method == RESOURCE_UPDATED:
        uris = filter_.get("resourceSubscriptions")
        return isinstance(uris, list) and params.get("uri") in uris
    return any(filter_.get(key) is True and method == name for key, (_c, name) in LIST_CHANGED.items())


def subscription_notifications() -> frozenset[str]:
    """The server notifications a 2026-era client receives only through `subscriptions/listen`."""
    return frozenset({name for _c, name in LIST_CHANGED.values()} | {RESOURCE_UPDATED})

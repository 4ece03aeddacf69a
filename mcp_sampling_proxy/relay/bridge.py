"""The era bridge: each leg speaks its own protocol era, and the proxy translates between them.

The host leg speaks whatever the host opens with: `initialize` (handshake era) or `server/discover`
or a request carrying 2026-07-28 `_meta` (2026 era). The server leg speaks the same era when the
server accepts it (then nothing is translated, and the relay passes bytes as it always did), and
the other one when it does not (`upstream.era: auto`, the default). `upstream.era: handshake` or
`modern` pins the server leg instead, whatever the host speaks.

Handshake host, 2026 server: the proxy answers `initialize` from the server's `server/discover`,
stamps every request with the 2026 `_meta` (protocol version, the host's client info and
capabilities, the log level it set), answers `ping`, `logging/setLevel` and `resources/subscribe`
itself, and keeps a `subscriptions/listen` stream open for the list changes and resource updates
the host would have received. The server's `input_required` rounds are answered by the proxy,
which asks the host with ordinary requests where the host is the one to answer (relay/core.py).

2026 host, handshake server: the proxy opens the handshake (an `initialize` built from the host's
`_meta`), answers `server/discover` from its result, completes every result as a 2026 host
requires (`resultType`, cache fields), turns a changed `logLevel` into `logging/setLevel`, serves
`subscriptions/listen` from the server's notifications, and answers the server's `ping`; the
server's sampling, elicitation and roots requests reach the host as `input_required` rounds of the
call they belong to (relay/calls.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import eras, jsonrpc
from mcp_sampling_proxy.protocol.names import CLIENT_CAPS_META, ELICITATION_COMPLETE
from mcp_sampling_proxy.protocol.wire_types import (
    ErrorObject,
    JsonObject,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcResponse,
)
from mcp_sampling_proxy.text.sanitize import one_line

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.calls import HostRequest

log = get_logger("mcp_sampling_proxy.relay.bridge")

HANDSHAKE = "handshake"
MODERN = "modern"
SETTINGS = ("auto", HANDSHAKE, MODERN)
FIRST_ANSWER_TIMEOUT = 30.0  # s a server gets to answer the proxy's own first request of a session, which
# often waits for the server to start (seconds on a busy machine; one that answers late would be bridged)
PROBE_TIMEOUT = 10.0  # s a server that has answered already gets to answer a probe of the proxy's: the
# host's refused initialize waits that long for its refusal when the server ignores server/discover
PASS, CHANGED, DONE = 0, 1, 2  # what `host_request` did with a message

_SUBSCRIPTION_NOTIFICATIONS = eras.subscription_notifications()


class EraSession(Protocol):
    """What the bridge reads and settles of the session (relay/core.py's Session)."""

    host_info: dict[str, Any]
    host_capabilities: dict[str, Any]
    host_era: str | None
    server_era: str | None

    @property
    def server_name(self) -> str: ...


class RelayPort(Protocol):
    """What the bridge asks of the relay it translates for (relay/core.py's Relay): the bridge sits
    below the relay, which owns the messages, and reaches it only through these."""

    @property
    def session(self) -> EraSession: ...

    def answer_host(
        self, host_id: Any, result: Mapping[str, object] | None = None, error: ErrorObject | JsonObject | None = None
    ) -> None: ...

    def answer_upstream(self, request_id: Any, result: dict[str, Any]) -> None: ...

    def send_host_notification(self, method: str, params: dict[str, Any]) -> None: ...

    def notify_upstream(self, method: str, params: dict[str, Any] | None) -> None: ...

    async def request_upstream(
        self, method: str, params: dict[str, Any], timeout: float | None = None
    ) -> JsonRpcResponse: ...

    def start_upstream_request(self, method: str, params: dict[str, Any]) -> Any: ...

    def rewrite_for_upstream(self, message: JsonRpcRequest) -> None: ...

    def note_host_initialize(self, msg: Mapping[str, Any]) -> None: ...

    def note_host_meta(self, meta: dict[str, Any]) -> None: ...

    def note_server_result(self, result: Mapping[str, object]) -> None: ...

    def note_modern_server(self, result: dict[str, Any]) -> None: ...


class EraBridge:
    """The protocol era of each leg, how the server leg's is settled, and the translation between them."""

    def __init__(self, setting: str, relay: RelayPort):
        self.setting = setting
        self._relay = relay
        self.undecided = True  # the host has not settled on an era yet (after a refused discover it may fall back)
        self.translating = False
        self.fallback_pending = False  # a handshake host's initialize may still be refused by a 2026-only server
        # handshake host, 2026 server
        self._host_initialize: JsonRpcRequest | None = None  # the host's initialize request
        self._log_level: str | None = None
        self._capabilities: dict[str, Any] = {}  # the server's, from server/discover or initialize
        self._resources: list[str] = []  # resources the handshake host subscribed to
        self._listening: Any = None  # the id of the proxy's subscriptions/listen at the server
        # 2026 host, handshake server
        self._initialized: dict[str, Any] = {}  # the server's initialize result
        self._refused: dict[str, Any] | None = None  # the server's refusal of the proxy's server/discover
        self._server_level: str | None = None  # the level the proxy set at the server
        self._host_level: str | None = None  # the level the host's last request asked for
        # the host's subscriptions/listen ids -> what they honour
        self._listens: dict[Any, eras.SubscriptionFilter] = {}
        self._subscribed: set[str] = set()  # resources the proxy subscribed to at the server

    @property
    def host_era(self) -> str | None:
        return self._relay.session.host_era

    @host_era.setter
    def host_era(self, era: str | None) -> None:
        self._relay.session.host_era = era

    @property
    def server_era(self) -> str | None:
        return self._relay.session.server_era

    @server_era.setter
    def server_era(self, era: str | None) -> None:
        self._relay.session.server_era = era

    # -- settling the server leg's era ----------------------------------------------------------
    def opens(self, msg: JsonRpcRequest) -> bool:
        """True for the host request that decides the eras (the relay holds the host's messages
        until `negotiate` is done). A handshake host's `initialize` in `auto` mode is forwarded as
        it is, so the eras are decided without holding anything."""
        method = msg.get("method")
        if method == "initialize":
            self.undecided = False
            self.host_era = HANDSHAKE
            self._host_initialize = msg
            self._relay.note_host_initialize(msg)
            if self.setting == MODERN:
                return True
            self._settle(HANDSHAKE)
            self.fallback_pending = self.setting == "auto"
            return False
        if method == "server/discover" or eras.modern_version(msg.get("params")) is not None:
            self.undecided = False
            self.host_era = MODERN
            return True
        return False

    async def negotiate(self, msg: JsonRpcRequest) -> bool:
        """Settle the server leg's era for the host request that opened the session; True when the
        relay should still handle `msg` itself (False: it was answered here)."""
        method = msg["method"]
        if self.host_era == HANDSHAKE:  # upstream.era: modern
            probed = await self._probe(self._stamped_meta(msg), FIRST_ANSWER_TIMEOUT)
            if "result" in probed:
                self._answer_initialize(msg["id"], probed["result"])
            else:
                self._relay.answer_host(
                    msg["id"],
                    error={
                        "code": jsonrpc.INTERNAL_ERROR,
                        "message": "upstream.era is 'modern' but the server does not speak 2026-07-28 "
                        f"(server/discover: {_why(probed)}); set upstream.era: auto",
                    },
                )
            return False
        meta = jsonrpc.as_object(jsonrpc.as_object(msg.get("params")).get("_meta"))
        if self.setting != HANDSHAKE and self._refused is None:
            discovered = await self._probe(self._augmented(meta), FIRST_ANSWER_TIMEOUT)
            if "result" in discovered:
                self._settle(MODERN)
                if method == "server/discover":
                    self._relay.answer_host(msg["id"], **discovered)
                    return False
                return True
            self._refused = discovered
            if self.setting == MODERN:
                self.undecided = method == "server/discover"  # the host may fall back to initialize
                self.host_era = None if self.undecided else self.host_era
                self._relay.answer_host(
                    msg["id"],
                    error={
                        "code": jsonrpc.INTERNAL_ERROR,
                        "message": "upstream.era is 'modern' but the server does not speak 2026-07-28 "
                        f"(server/discover: {_why(discovered)}); set upstream.era: auto",
                    },
                )
                return False
        refused = self._refused_answer() if self.setting == "auto" else None
        if method == "server/discover" and refused is not None:
            # As directly, through every front: the host hears the server's answer and falls back to
            # initialize (an auto host), which the proxy then forwards; so does every later host on this relay
            # (serve keeps one for all of a caller's 2026 requests). A host that goes on in the 2026 era is
            # bridged; one that probes and stops there needs `upstream.era: handshake`, which answers
            # server/discover from the handshake instead.
            self.undecided = True
            self.host_era = None
            self._relay.answer_host(msg["id"], **_body(refused))
            return False
        opened = await self._open_handshake(meta)
        if "result" not in opened:
            log.warning(
                "the server speaks neither era the proxy tried",
                discover=_why(self._refused or {}),
                initialize=_why(opened),
            )
            self._settle(MODERN)  # nothing to translate to: the server answers the host as it will
            return True
        self._settle(HANDSHAKE)
        if method == "server/discover":
            self._relay.answer_host(msg["id"], result=eras.discover_result(self._initialized))
            return False
        return True

    async def initialize_refused(self, host_id: Any, request: HostRequest, error: JsonObject) -> None:
        """A handshake host's initialize was refused: the server may speak only 2026-07-28. Probe it;
        bridge when it does, else pass the refusal on. The relay holds the host's messages meanwhile."""
        discovered = await self._probe(self._stamped_meta(self._host_initialize), PROBE_TIMEOUT)
        if "result" in discovered:
            log.info(
                "the server speaks only 2026-07-28: bridging the handshake host to it",
                initialize_error=one_line(str(error.get("message")), 200),
            )
            self._answer_initialize(host_id, discovered["result"])
        else:
            self._relay.answer_host(host_id, error=error)

    def _settle(self, server_era: str) -> None:
        self.server_era = server_era
        self.translating = self.host_era is not None and self.host_era != server_era
        if self.translating:
            log.info("protocol eras differ: translating", host=self.host_era, server=server_era, protocol=eras.MODERN)

    def _refused_answer(self) -> dict[str, Any] | None:
        """The server's own answer to the proxy's discover that it refused, if it gave one."""
        answer = (self._refused or {}).get("answer")
        return answer if isinstance(answer, dict) and answer else None

    async def _probe(self, meta: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The server's answer to a server/discover of the proxy's: {"result": a 2026 one} or {"error": ...}."""
        answer = await self._relay.request_upstream("server/discover", {"_meta": meta}, timeout=timeout)
        if eras.retry_at_modern(answer.get("error")):  # "unsupported version", naming ours: once more, as SDKs do
            answer = await self._relay.request_upstream("server/discover", {"_meta": meta}, timeout=timeout)
        result = answer.get("result")
        if isinstance(result, dict) and eras.supports_modern(result):
            self._capabilities = jsonrpc.as_object(result.get("capabilities"))
            self._relay.note_modern_server(result)
            return {"result": result}
        why = answer.get("error") or {
            "code": jsonrpc.INTERNAL_ERROR,
            "message": "no 2026-07-28 in its supportedVersions" if answer else f"no answer in {timeout:g} s",
        }
        return {"error": why, "answer": answer}

    async def _open_handshake(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Open the handshake for a 2026-era host with an initialize built from its `_meta`."""
        message: JsonRpcRequest = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": eras.initialize_params(meta),
        }
        self._relay.rewrite_for_upstream(message)
        answer = await self._relay.request_upstream("initialize", message["params"], timeout=FIRST_ANSWER_TIMEOUT)
        result = answer.get("result")
        if not isinstance(result, dict):
            return {"error": answer.get("error") or {"code": jsonrpc.INTERNAL_ERROR, "message": "no answer"}}
        self._initialized = result
        self._capabilities = jsonrpc.as_object(result.get("capabilities"))
        self._relay.note_server_result(result)
        self._relay.notify_upstream("notifications/initialized", None)
        log.info("opened the handshake for a 2026-era host", protocol=result.get("protocolVersion"))
        return {"result": result}

    def _answer_initialize(self, host_id: Any, discovered: dict[str, Any]) -> None:
        self._settle(MODERN)
        initialize = self._host_initialize
        requested = jsonrpc.as_object(initialize.get("params") if initialize else None).get("protocolVersion")
        result = eras.initialize_result(discovered, requested, self._relay.session.server_name)
        self._relay.note_server_result(result)
        self._relay.answer_host(host_id, result=result)

    def _stamped_meta(self, initialize: JsonRpcRequest | None) -> JsonObject:
        """2026 `_meta` from a handshake host's initialize (capabilities as the proxy augments them)."""
        params = jsonrpc.as_object(initialize.get("params") if initialize else None)
        meta = eras.request_meta(
            eras.MODERN, jsonrpc.as_object(params.get("clientInfo")), jsonrpc.as_object(params.get("capabilities"))
        )
        return self._augmented(meta)

    def _augmented(self, meta: dict[str, Any]) -> dict[str, Any]:
        """`meta` with the capabilities the proxy adds (sampling, elicitation) in its client capabilities."""
        meta = dict(meta)
        meta.setdefault(CLIENT_CAPS_META, {})
        message: JsonRpcRequest = {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": meta}}
        self._relay.rewrite_for_upstream(message)
        return dict(message["params"]["_meta"])

    # -- host -> server --------------------------------------------------------------------------
    def host_request(self, msg: JsonRpcRequest) -> int:
        """Translate a host request for the server leg: PASS (as it is), CHANGED (re-encode it), or
        DONE (answered here)."""
        if self.host_era == HANDSHAKE:
            return self._handshake_host_request(msg)
        return self._modern_host_request(msg)

    def _handshake_host_request(self, msg: JsonRpcRequest) -> int:
        method, params = msg["method"], jsonrpc.as_object(msg.get("params"))
        if method == "ping":
            self._relay.answer_host(msg["id"], result={})
        elif method == "logging/setLevel":
            level = params.get("level")
            self._log_level = level if isinstance(level, str) else None
            self._relay.answer_host(msg["id"], result={})
        elif method in ("resources/subscribe", "resources/unsubscribe"):
            self._subscribe(msg, params, method == "resources/subscribe")
        elif method == "initialize":
            self._relay.answer_host(
                msg["id"], error={"code": jsonrpc.INVALID_REQUEST, "message": "Invalid Request: already initialized"}
            )
        else:
            if not isinstance(msg.get("params"), dict):
                msg["params"] = params
            session = self._relay.session
            eras.stamp_meta(
                msg["params"],
                eras.request_meta(eras.MODERN, session.host_info, session.host_capabilities, self._log_level),
            )
            return CHANGED
        return DONE

    def _subscribe(self, msg: JsonRpcRequest, params: dict[str, Any], add: bool) -> None:
        if jsonrpc.as_object(self._capabilities.get("resources")).get("subscribe") is not True:
            self._relay.answer_host(
                msg["id"],
                error={"code": jsonrpc.METHOD_NOT_FOUND, "message": "the server does not offer resource subscriptions"},
            )
            return
        uri = params.get("uri")
        if not isinstance(uri, str):
            self._relay.answer_host(
                msg["id"], error={"code": jsonrpc.INVALID_PARAMS, "message": "Invalid params: uri must be a string"}
            )
            return
        if add and uri not in self._resources:
            self._resources.append(uri)
        elif not add and uri in self._resources:
            self._resources.remove(uri)
        self._relay.answer_host(msg["id"], result={})
        self._listen()

    def _listen(self) -> None:
        """(Re)open the proxy's subscriptions/listen at the 2026 server with what the host wants now."""
        wanted = eras.listen_filter(self._capabilities, self._resources)
        previous, self._listening = self._listening, None
        if previous is not None:
            self._relay.notify_upstream(
                "notifications/cancelled", {"requestId": previous, "reason": "subscriptions changed"}
            )
        if not wanted:
            return
        session = self._relay.session
        params = {
            "_meta": eras.request_meta(eras.MODERN, session.host_info, session.host_capabilities),
            "notifications": wanted,
        }
        self._listening = self._relay.start_upstream_request("subscriptions/listen", params)

    def _modern_host_request(self, msg: JsonRpcRequest) -> int:
        method, params = msg["method"], jsonrpc.as_object(msg.get("params"))
        if method == "server/discover":
            refused = (self._refused or {}).get("answer")
            if refused:  # as directly: an auto host falls back to initialize, even after a pinned one was bridged
                self._relay.answer_host(msg["id"], **_body(refused))
            else:
                self._relay.answer_host(msg["id"], result=eras.discover_result(self._initialized))
            return DONE
        if method == "subscriptions/listen":
            self._open_listen(msg["id"], jsonrpc.as_object(params.get("notifications")))
            return DONE
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return PASS
        level = meta.get(eras.LOG_LEVEL_META)
        self._host_level = level if isinstance(level, str) else None  # logs only for requests that ask
        if isinstance(level, str) and level != self._server_level and "logging" in self._capabilities:
            self._server_level = level
            self._relay.start_upstream_request("logging/setLevel", {"level": level})
        self._relay.note_host_meta(meta)
        stripped = eras.handshake_meta(meta)
        if stripped is meta:
            return PASS
        if stripped:
            params["_meta"] = stripped
        else:
            del params["_meta"]
        return CHANGED

    def _open_listen(self, listen_id: Any, requested: dict[str, Any]) -> None:
        honoured = eras.honoured_filter(requested, self._capabilities)
        self._listens[listen_id] = honoured
        self._relay.send_host_notification(
            "notifications/subscriptions/acknowledged",
            {"notifications": honoured, "_meta": {eras.SUBSCRIPTION_ID_META: listen_id}},
        )
        for uri in honoured.get("resourceSubscriptions", []):
            if uri not in self._subscribed:
                self._subscribed.add(uri)
                self._relay.start_upstream_request("resources/subscribe", {"uri": uri})

    def host_notification(self, msg: JsonRpcNotification) -> bool:
        """True when a host notification is the bridge's (consumed, not forwarded)."""
        method = msg.get("method")
        if self.host_era == HANDSHAKE:
            if method == "notifications/initialized":
                self._listen()
                return True
            return method == "notifications/roots/list_changed"  # 2026 servers ask for roots in each call
        if method == "notifications/cancelled":
            listen_id = jsonrpc.as_object(msg.get("params")).get("requestId")
            if jsonrpc.usable_id(listen_id) and listen_id in self._listens:
                self._close_listen(listen_id)
                return True
        return False

    def _close_listen(self, listen_id: Any) -> None:
        del self._listens[listen_id]
        still = {uri for honoured in self._listens.values() for uri in honoured.get("resourceSubscriptions", [])}
        for uri in sorted(self._subscribed - still):
            self._subscribed.discard(uri)
            self._relay.start_upstream_request("resources/unsubscribe", {"uri": uri})

    # -- server -> host --------------------------------------------------------------------------
    def server_result(self, msg: JsonRpcResponse, request: HostRequest | None) -> JsonRpcResponse | None:
        """A server's answer completed as a 2026 host requires it (None: as it is). A handshake server's
        results lack `resultType` (and the cache fields); a 2026 server may leave out `resultType` too,
        which clients must read as "complete" but SDKs refuse."""
        if self.host_era != MODERN or "result" not in msg or not isinstance(msg["result"], dict):
            return None
        completed = eras.complete_result(msg["result"], request.method if request is not None else None)
        return None if completed is None else {**msg, "result": completed}

    def server_notification(self, msg: JsonRpcNotification) -> list[bytes] | None:
        """What reaches the host for a server notification: None for the notification as it is, else
        the lines to send instead (none: it is the bridge's, or no subscription of the host wants it)."""
        method = msg.get("method")
        if self.host_era == HANDSHAKE:
            return [] if method == "notifications/subscriptions/acknowledged" else None
        if method == ELICITATION_COMPLETE:  # URL elicitation ends by the host's retry in the 2026 era
            return []
        if method == "notifications/message":  # a 2026 host gets logs only at the level it asked for
            level = jsonrpc.as_object(msg.get("params")).get("level")
            return None if eras.log_wanted(level, self._host_level) else []
        if method not in _SUBSCRIPTION_NOTIFICATIONS:
            return None
        params = jsonrpc.as_object(msg.get("params"))
        lines = []
        for listen_id, honoured in self._listens.items():
            if eras.wanted_by(honoured, method, params):
                meta = {**jsonrpc.as_object(params.get("_meta")), eras.SUBSCRIPTION_ID_META: listen_id}
                lines.append(jsonrpc.dumps({**msg, "params": {**params, "_meta": meta}}))
        return lines

    def server_request(self, msg: JsonRpcRequest) -> bool:
        """True when a handshake server's request is answered here (a 2026 host is never sent one)."""
        if self.host_era == MODERN and msg.get("method") == "ping":
            self._relay.answer_upstream(msg["id"], result={})
            return True
        return False


def _body(answer: dict[str, Any]) -> dict[str, Any]:
    """A response's result or error, to answer the host with."""
    return {k: v for k, v in answer.items() if k in ("result", "error")}


def _why(answer: dict[str, Any]) -> str:
    error = jsonrpc.as_object(answer.get("error"))
    return one_line(str(error.get("message") or "no answer"), 200)

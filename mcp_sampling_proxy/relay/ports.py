"""The relay's ports: where it hands a message to whatever answers the server, each typed and narrow.

The relay knows nothing about LLMs or policy; it steps in at these points and nowhere else:

- `answers`: a handler per server request method the proxy answers itself (sampling, elicitation),
  called with a `ServerRequest`: the request as the relay parsed it (once) and its raw bytes, the
  session, the host request it belongs to, and `host`, a way to ask the host;
- `rewrite_host_request`: a plain function that changes a host request in place before it goes
  upstream (the capabilities the proxy serves);
- `inputs`: the 2026-07-28 `input_required` rounds the proxy answers (`InputRounds`);
- `tools`: the screen over tool lists and calls (pins, tool rules; `ToolScreen`);
- `notifications`: server notifications the proxy may hold back, each with the test that says
  whether it goes on to the host.

The relay is the `HostLine` and `Rounds` the handlers are given; the services see only these.

A message crosses a port as a `JsonRpcRequest` (or `JsonRpcNotification`): the relay has read its
envelope (a method; an id for a request). What a peer put inside (params, results, the host's
responses) crosses as a `JsonObject`, as it came: the service that reads it checks it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from msgspec import Struct, field

from mcp_sampling_proxy.protocol.wire_types import ErrorObject, JsonObject, JsonRpcNotification, JsonRpcRequest
from mcp_sampling_proxy.relay.calls import HostRequest
from mcp_sampling_proxy.relay.session import Session


class HostLine(Protocol):
    """A way to ask the host, for what answers a server request (the relay is one)."""

    @property
    def session(self) -> Session: ...

    async def forward_to_host(self, message: JsonRpcRequest, *, as_received: bool = True) -> JsonObject:
        """Put a server request to the host (as received, or as changed); the host's response."""
        ...

    async def request_host(self, method: str, params: JsonObject) -> JsonObject:
        """A request of the proxy's own to the host (an approval form); the host's response."""
        ...

    async def roots_from_host(self, message: JsonRpcRequest) -> JsonObject:
        """A roots/list the host is asked, when it has roots; the result, or RpcError."""
        ...


class ServerRequest(Struct, frozen=True):
    """A server request the proxy answers: parsed once by the relay, with the bytes it came as."""

    message: JsonRpcRequest
    raw: bytes  # as the server sent it; b"" for one taken out of an input_required round
    session: Session
    owner: HostRequest | None  # the host request it belongs to; None: the server asked unsolicited
    host: HostLine

    @property
    def method(self) -> str:
        return self.message["method"]

    @property
    def params(self) -> Any:
        """The params as sent (not checked: the handler validates them)."""
        return self.message.get("params")


Answer = Callable[[ServerRequest], Awaitable[JsonObject]]
"""Answers one server request: the result object, or raises RpcError."""


class Rounds(HostLine, Protocol):
    """What answering an `input_required` round needs of the relay, beyond asking the host."""

    def new_id(self) -> str: ...

    def server_request(self, message: JsonRpcRequest) -> ServerRequest:
        """A request taken out of a round, as the handlers take it (owned by the call being resolved)."""
        ...

    async def retry_upstream(self, message: JsonRpcRequest, params: JsonObject, resolving: Any) -> JsonObject:
        """Send the host request again with `params`, under a new private id; the server's response."""
        ...


class InputRounds(Protocol):
    """The 2026-07-28 `input_required` results the proxy answers (services/input_required.py)."""

    def owned_keys(self, result: JsonObject, session: Session, origin: JsonRpcRequest | None) -> set[str] | None:
        """Keys of the result's requests that the proxy answers itself (None: leave the result alone)."""
        ...

    def host_asked(self, result: JsonObject, origin: JsonRpcRequest | None, session: Session) -> JsonObject:
        """A result (only the host's requests) is about to reach the host: the result as the host gets it."""
        ...

    def host_answered(self, params: JsonObject, session: Session) -> None:
        """A host request carries `inputResponses`: the host's answers to such requests."""
        ...

    async def answer(self, key: str, entry: JsonObject, rounds: Rounds, origin: JsonRpcRequest | None) -> JsonObject:
        """Answer one request of a round (result, or RpcError); `origin` is the host request it belongs to."""
        ...

    async def resolve(self, message: JsonRpcRequest, result: JsonObject, rounds: Rounds, resolving: Any) -> JsonObject:
        """Answer the rounds and retry until the final response: {"result": ...} or {"error": ...}; or, when a
        later round needs the host, {"result": that round, "owned": the keys the proxy answers}."""
        ...


class ToolScreen(Protocol):
    """Tool lists and calls as the host may see and make them (services/tools.py)."""

    @property
    def active(self) -> bool:
        """True when tools/list results go through `screen_list` (pins or tool rules are on)."""
        ...

    async def screen_list(self, message: JsonRpcRequest, result: JsonObject, session: Session) -> JsonObject:
        """A tools/list result as the host gets it (held or denied tools left out)."""
        ...

    def needs_screening(self, message: JsonRpcRequest, session: Session) -> bool:
        """True when a host tools/call must wait for `screen_call` before it goes on (cheap, synchronous)."""
        ...

    async def screen_call(self, message: JsonRpcRequest, host: HostLine) -> ErrorObject | None:
        """None to send the tools/call on; else the JSON-RPC error object the host gets."""
        ...


def _unchanged(_message: JsonRpcRequest, _session: Session) -> bool:
    return False


class Ports(Struct, frozen=True):
    """Everything the relay hands on, by port (see the module's docstring); the empty Ports is a plain relay."""

    answers: Mapping[str, Answer] = field(default_factory=dict)
    rewrite_host_request: Callable[[JsonRpcRequest, Session], bool] = _unchanged
    inputs: InputRounds | None = None
    tools: ToolScreen | None = None
    notifications: Mapping[str, Callable[[JsonRpcNotification], bool]] = field(default_factory=dict)

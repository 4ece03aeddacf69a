"""Small JSON-RPC helpers: strict parsing, encoding, error objects, and the error codes the proxy uses."""

from __future__ import annotations

import json
from typing import Any

import orjson

from mcp_sampling_proxy.protocol.wire_types import ErrorObject, JsonRpcError, JsonRpcResult

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
USER_REJECTED = -1  # MCP: the user (or policy) rejected a sampling request
UPSTREAM_EXITED = -32000  # implementation-defined server error: the real server is gone


class RpcError(Exception):
    """An error to answer a request with; `message` is shown to the peer, so keep it clear."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def from_error(cls, error: Any) -> RpcError:
        """The same error, from a peer's JSON-RPC error object (to pass on unchanged)."""
        error = error if isinstance(error, dict) else {}
        return cls(error.get("code", INTERNAL_ERROR), str(error.get("message", "")), error.get("data"))

    def to_dict(self) -> ErrorObject:
        err: ErrorObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def parse(line: bytes) -> Any:
    """Parse one line as strict JSON; ValueError when it is not.

    Every line from either peer is hostile input. orjson refuses what Python's `json` lets through
    and a peer may choke on (NaN and Infinity, lone surrogates, invalid UTF-8), and it stops at
    1024 levels of nesting with an error instead of a RecursionError. It is also several times
    faster, which is what lets the relay parse every message, large results included."""
    return orjson.loads(line)


# every ASCII digit as "0", every other byte as " ": a run of 19 digits is then a plain substring search. As
# fast as the bytes can be copied, where the regex `\d{19,}` took ~10 ns a byte (50 ms for a 5 MB result,
# digits or not, on every answer a 2026 host is given)
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_RUN = b"0" * 19


def has_long_integers(line: bytes) -> bool:
    """True when a line may hold integers beyond 64 bits (19 digits in a row, in a string or not), which
    `parse` reads as floats: a line that is re-encoded (a rewritten request) must then be read again with
    `parse_exact`."""
    return _LONG_RUN in line.translate(_DIGITS_AS_ZEROS)


def parse_exact(line: bytes) -> Any:
    """Parse an already validated line keeping every integer exact (`json` reads them as ints)."""
    return json.loads(line)


def parse_keeping_integers(line: bytes) -> Any:
    """`parse` (strict: ValueError when `line` is not JSON), for a message that will be encoded again:
    integers past 64 bits stay exact, as the peer wrote them."""
    message = parse(line)
    return parse_exact(line) if has_long_integers(line) else message


def as_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one: for reading optional parts of a peer's
    message (params, _meta, result) without a check at every step."""
    return value if isinstance(value, dict) else {}


def usable_id(value: Any) -> bool:
    """JSON-RPC ids are strings or integers. Others (objects, arrays, booleans, fractions, null)
    cannot be answered by id and, unhashable, would break every id table."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes for one message (no newline), by orjson (a fifth of the stdlib's time: every
    message the relay rewrites or makes passes here).

    What orjson refuses is written by the stdlib, exactly: an integer past 64 bits (which
    `parse_keeping_integers` keeps), a non-string key, nesting past 254 levels, and a lone surrogate
    (which a peer's `\\ud800` escape or an LLM's answer can carry), which cannot be UTF-8 encoded and is
    written with ASCII escapes. (A float below 1e-4 comes out as orjson writes it, `1e-7` for the
    stdlib's `1e-07`: the same number.)"""
    try:
        return orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError is one
        pass
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode("ascii")


def response(request_id: Any, result: dict[str, Any]) -> bytes:
    answer: JsonRpcResult = {"jsonrpc": "2.0", "id": request_id, "result": result}
    return dumps(answer)


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    answer: JsonRpcError = {"jsonrpc": "2.0", "id": request_id, "error": RpcError(code, message, data).to_dict()}
    return dumps(answer)

"""Small JSON-RPC helpers: encoding, error objects, and the error codes the proxy uses."""

from __future__ import annotations

import json
from typing import Any

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

    def to_dict(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes for one message (no newline)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def response(request_id: Any, result: dict[str, Any]) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": request_id, "error": RpcError(code, message, data).to_dict()})

"""What `policy explain` is asked about: a request read from a file (JSON with // comment lines) or
made from a prompt, validated as the proxy validates what a server sends."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import ELICITATION_CREATE, SAMPLING_CREATE
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest, validate
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.services.elicitation.request import validate_elicitation


class InputError(Exception):
    """Bad input for `explain`: exit 2 with this message."""


PROMPT_MAX_TOKENS = 1000


def prompt_request(text: str, *, models: Sequence[str] = (), max_tokens: int | None = None) -> dict[str, Any]:
    """The params of a sampling request with `text` as its one user message (explain --prompt)."""
    params: dict[str, Any] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": PROMPT_MAX_TOKENS if max_tokens is None else max_tokens,
    }
    if models:
        params["modelPreferences"] = {"hints": [{"name": model} for model in models]}
    return params


SAMPLING = SAMPLING_CREATE
ELICITATION = ELICITATION_CREATE


def read_request(path: str) -> SamplingRequest | ElicitRequestParams:
    """The request in `path`, validated as the proxy would: a sampling request, or elicitation params."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: request file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read request file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(without_comments(text))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    return checked(path, data)


def without_comments(text: str) -> str:
    """JSON text with its // comment lines blanked (kept as empty lines, so positions still count).
    A JSON string cannot span lines, so a line starting with // is never inside one."""
    return "\n".join("" if line.lstrip().startswith("//") else line for line in text.split("\n"))


def checked(path: str, data: Any) -> SamplingRequest | ElicitRequestParams:
    """A request (`path` names where it came from), validated as the proxy would: a sampling request (its
    `wire` is the params as given), or elicitation params."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: must hold a JSON object: a {SAMPLING} or {ELICITATION} request, or its params")
    method: Any = SAMPLING
    if "method" in data or "jsonrpc" in data:
        method = data.get("method")
        if method not in (SAMPLING, ELICITATION):
            raise InputError(
                f"{path}: the request's method is {method!r}; explain takes {SAMPLING} and "
                f"{ELICITATION} requests (or just their params)"
            )
        data = data.get("params")
    elif isinstance(data, dict) and "messages" not in data and ("requestedSchema" in data or "mode" in data):
        method = ELICITATION
    try:
        if method == ELICITATION:
            return validate_elicitation(data)
        return validate(data)
    except RpcError as exc:
        raise InputError(
            f"{path}: {exc.message} (the proxy answers such a request with -32602 before consulting the policy)"
        ) from None

"""The headers a `--url` upstream stamps on a 2026-07-28 request: a header value encoded, and the
`Mcp-Param-*` headers a tool's schema marks, exactly as the `mcp` SDK's server side reads them (a
server rejects a request whose headers disagree). Through the proxy to a real server:
tests/e2e/test_http_upstream.py."""

from __future__ import annotations

import pytest
from mcp.shared.inbound import encode_header_value as sdk_encoded
from mcp.shared.inbound import find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map

from mcp_sampling_proxy.transport.param_headers import encode_header_value, header_map, param_headers


@pytest.mark.parametrize("value", ["plain", " edge", "ünï", "=?base64?x?=", "tab\there", "", "a" * 300, "x-y_z.1"])
def test_header_values_are_encoded_as_the_sdk_encodes_them(value: str) -> None:
    assert encode_header_value(value) == sdk_encoded(value)


SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"},
            "nested": {"type": "object", "properties": {"deep": {"type": "string", "x-mcp-header": "Deep"}}},
        },
    },
    {"type": "object", "properties": {"f": {"type": "number", "x-mcp-header": "F"}}},  # numbers may not be marked
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "x-mcp-header": "Same"},
            "b": {"type": "string", "x-mcp-header": "same"},
        },
    },  # duplicate, ignoring case
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "bad token"}}},
    {"type": "object", "anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]},  # off the chain
    {"type": "object", "properties": {"a": {"type": "string"}}},
]
ARGUMENTS = {"region": "eu-west", "n": 7, "flag": False, "nested": {"deep": "ünï"}, "f": 1.5, "a": "x", "b": "y"}


@pytest.mark.parametrize("schema", SCHEMAS)
def test_param_headers_are_the_sdks(schema: dict[str, object]) -> None:
    expected = (
        {} if find_invalid_x_mcp_header(schema) is not None else mcp_param_headers(x_mcp_header_map(schema), ARGUMENTS)
    )
    assert param_headers(header_map(schema), ARGUMENTS) == expected

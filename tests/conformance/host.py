"""A host on the `mcp` 2.x SDK's Client, for the conformance suite's client scenarios in the 2026-07-28 era.

The suite starts a scenario's server and runs this script with the server's URL as the last argument.
`--via direct` connects to the URL with the SDK's Streamable HTTP transport; `--via proxy` starts
mcp-sampling-proxy --url URL over stdio (the command in MCP_CONFORMANCE_PROXY, a JSON array), so the
same host runs each scenario both ways. `--mode` is the SDK's connect mode (auto: probe
server/discover, fall back to initialize; or a pinned 2026-07-28). The host declares elicitation and
answers every form as a person pressing Accept would (each field's default, every box ticked); it lists
the tools and calls each with arguments made from its input schema.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

warnings.filterwarnings("ignore")


def value_for(schema: dict[str, Any]) -> Any:
    kind: Any = schema.get("type")  # JSON Schema allows a list of types too
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    return {"number": 1, "integer": 1, "boolean": True, "string": "x", "array": [], "object": {}}.get(kind, "x")


def arguments_for(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: value_for(properties.get(name) or {}) for name in schema.get("required") or []}


async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
    schema = getattr(params, "requested_schema", None) or {}
    content = {
        name: (True if field.get("type") == "boolean" else value_for(field))
        for name, field in (schema.get("properties") or {}).items()
    }
    return types.ElicitResult(action="accept", content=content)


async def main(url: str, via: str, mode: str) -> int:
    if via == "direct":
        transport: Any = streamable_http_client(url)
    else:
        command = [*json.loads(os.environ["MCP_CONFORMANCE_PROXY"]), "--url", url]
        transport = stdio_client(
            StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ)), errlog=sys.stderr
        )
    async with Client(
        transport,
        mode=mode,
        elicitation_callback=on_elicit,
        client_info=types.Implementation(name="conformance-host-py", version="1.0.0"),
    ) as client:
        tools = (await client.list_tools()).tools
        print(f"tools: {', '.join(tool.name for tool in tools)}", flush=True)
        for tool in tools:
            result = await client.call_tool(tool.name, arguments_for(tool.input_schema or {}))
            print(f"{tool.name}: {result.model_dump_json(by_alias=True, exclude_none=True)[:500]}", flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--via", choices=("direct", "proxy"), required=True)
    parser.add_argument("--mode", default="auto")
    parser.add_argument("url")
    args = parser.parse_args()
    try:
        sys.exit(anyio.run(main, args.url, args.via, args.mode))
    except Exception as exc:  # the suite reads the exit status; say why on stderr
        print(f"host failed: {exc!r}", file=sys.stderr)
        sys.exit(1)

"""Example MCP server with one tool, `echo`, that answers with the text it was given.

It needs no LLM and no key: it is the server the serve guide (docs/guides/serve.md) puts behind
`mcp-sampling-proxy serve`, so a first HTTP session shows the endpoint, the token and the audit
without anything else to set up. Run directly over stdio::

    .venv/bin/python examples/servers/echo.py
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("echo", instructions="Echoes the text it is given.")


@mcp.tool()
def echo(text: str) -> str:
    """Answer with ``text`` as given."""
    return text


if __name__ == "__main__":
    mcp.run()

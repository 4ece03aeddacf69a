"""What MCP and JSON-RPC define: message shapes, method and _meta names, capabilities."""

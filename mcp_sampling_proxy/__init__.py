"""mcp-sampling-proxy: a transparent stdio MCP proxy that fulfils sampling for hosts that can't."""

__version__ = "0.1.0"

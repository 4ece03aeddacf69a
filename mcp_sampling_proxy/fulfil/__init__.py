"""LLM adapters: turn an MCP sampling request into a provider call and back. No MCP transport here."""

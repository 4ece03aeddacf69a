"""Reading and writing MCP host config files (wrap, unwrap, doctor)."""

"""LLM adapters: choose a provider and model, turn an MCP sampling request into its call and back."""

"""Routes every message between host and server; knows nothing about LLMs."""

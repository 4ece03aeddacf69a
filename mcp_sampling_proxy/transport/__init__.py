"""Bytes in and out: line framing, the upstream as a child process or a Streamable HTTP URL."""

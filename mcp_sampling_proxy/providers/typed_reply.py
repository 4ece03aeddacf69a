"""The `console` provider type: the operator types the LLM's reply at the terminal (a typed reply).

The offline default when no LLM is configured and a terminal exists, like the MCP Inspector's
manual sampling: useful to exercise a sampling server with no API key at all.
"""

from __future__ import annotations

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.protocol.sampling_request import REQUEST_ORIGIN, describe
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams
from mcp_sampling_proxy.providers.base import Completion, LLMError
from mcp_sampling_proxy.system.terminal import Terminal
from mcp_sampling_proxy.text.sanitize import quote


class TypedReplyAdapter:
    def __init__(self, config: ProviderConfig, terminal: Terminal | None):
        self.config = config
        self._terminal = terminal

    @property
    def supports_tools(self) -> bool:
        return False

    async def complete(self, params: CreateMessageParams, model: str) -> Completion:
        terminal = self._terminal
        if terminal is None:
            raise LLMError(
                f"provider '{self.config.name}' (console) needs a terminal, and the proxy has none",
                provider=self.config.name,
            )
        async with terminal.lock:
            server, tool = REQUEST_ORIGIN.get()
            summary = describe(params, server=server, tool=tool)
            if terminal.shown_just_now(summary):  # approved a moment ago, above: not shown twice
                terminal.write(
                    "\nType the reply to the request above; finish with a line holding only '.' (or Ctrl-D):\n"
                )
            else:
                terminal.write("\n" + quote(summary))
                terminal.write("\nType the reply; finish with a line holding only '.' (or Ctrl-D):\n")
            lines: list[str] = []
            while True:
                line = await terminal.readline()
                if line is None or line == ".":
                    break
                lines.append(line)
        return Completion(content=[{"type": "text", "text": "\n".join(lines)}], model=model, stop_reason="endTurn")

    async def aclose(self) -> None:
        return None

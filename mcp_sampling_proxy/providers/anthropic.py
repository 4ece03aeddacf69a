"""Anthropic Messages adapter.

MCP sampling was modelled on the Messages API, so the mapping is close to one to one; the
differences handled here are snake_case names, the image `source` wrapper, no audio input,
and tool_result blocks having to lead their user message.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, Required, TypedDict

from mcp_sampling_proxy.protocol.content import as_blocks
from mcp_sampling_proxy.protocol.wire_types import (
    CreateMessageParams,
    JsonObject,
    SamplingMessage,
    TextContent,
    Tool,
    ToolUseContent,
)
from mcp_sampling_proxy.providers.base import Completion, LLMError, tool_use_block
from mcp_sampling_proxy.providers.errors import unsupported, unsupported_role
from mcp_sampling_proxy.providers.http_adapter import HttpAdapter

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
STOP_REASONS = {
    "end_turn": "endTurn",
    "max_tokens": "maxTokens",
    "stop_sequence": "stopSequence",
    "tool_use": "toolUse",
}
TOOL_CHOICE = {"auto": "auto", "required": "any", "none": "none"}

# -- the Messages API request, as the adapter builds it -----------------------------------------------


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ImageSource(TypedDict):
    type: Literal["base64"]
    media_type: str | None
    data: str


class ImageBlock(TypedDict):
    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(TypedDict):
    type: Literal["tool_use"]
    id: str | None  # the MCP block's (the request was checked: present)
    name: str | None
    input: JsonObject


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str | None
    content: list[TextBlock | ImageBlock]
    is_error: bool


Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock


class Message(TypedDict):
    role: str
    content: list[Block]


class ToolSpec(TypedDict, total=False):
    name: Required[str | None]
    description: str
    input_schema: Required[JsonObject]


class ToolChoiceSpec(TypedDict):
    type: str  # auto | any | none


class MessagesRequest(TypedDict, total=False):
    model: Required[str]
    max_tokens: Required[int | None]
    system: str
    messages: Required[list[Message]]
    temperature: float
    stop_sequences: list[str]
    tools: list[ToolSpec]
    tool_choice: ToolChoiceSpec


class AnthropicAdapter(HttpAdapter):
    """Fulfils sampling requests through `POST {base_url}/v1/messages`."""

    default_base_url = DEFAULT_BASE_URL
    tool_choices: ClassVar[dict[str, ToolChoiceSpec]] = {mode: {"type": kind} for mode, kind in TOOL_CHOICE.items()}

    def normalise_base_url(self, base_url: str) -> str:
        return base_url.removesuffix("/v1")  # tolerate an OpenAI-style base_url

    def fixed_headers(self) -> dict[str, str]:
        return {"anthropic-version": API_VERSION}

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/v1/messages"

    def models_url(self) -> str:
        return f"{self.base_url}/v1/models"

    # -- MCP -> Anthropic ----------------------------------------------------------------------

    def build_request(self, params: CreateMessageParams, model: str) -> MessagesRequest:
        """The Messages API body for a `sampling/createMessage` params dict."""
        messages = [self._message(m, i) for i, m in enumerate(params.get("messages") or [])]
        max_tokens, system = params.get("maxTokens"), params.get("systemPrompt")
        payload: MessagesRequest = (
            {"model": model, "max_tokens": max_tokens, "system": system, "messages": messages}
            if system
            else {"model": model, "max_tokens": max_tokens, "messages": messages}
        )
        options = self.options(params)
        if options.temperature is not None:
            payload["temperature"] = options.temperature
        if options.stop:
            payload["stop_sequences"] = options.stop
        if options.tools:
            payload["tools"] = [_tool(tool) for tool in options.tools]
            if options.tool_choice:
                payload["tool_choice"] = self.tool_choices[options.tool_choice]
        return payload

    def _message(self, message: SamplingMessage, index: int) -> Message:
        role = message.get("role")
        where = f"messages[{index}]"
        if role not in ("user", "assistant"):
            raise unsupported_role(self.config, role, where)
        blocks = as_blocks(message.get("content"))
        results: list[Block] = []
        others: list[Block] = []
        for block in blocks:
            if not isinstance(block, dict):
                raise unsupported(self.config, type(block).__name__, where)
            kind = block.get("type")
            if kind == "tool_result" and role == "user":
                results.append(self._tool_result(block, where))
            elif kind == "tool_use" and role == "assistant":
                others.append(
                    {
                        "type": "tool_use",
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "input": block.get("input") or {},
                    }
                )
            elif kind in ("tool_use", "tool_result"):
                raise unsupported(self.config, kind, where, f"not allowed in a {role} message")
            elif kind == "image" and role == "assistant":
                raise unsupported(self.config, kind, where, "assistant messages take text and tool calls only")
            else:
                others.append(self._block(block, where))
        # The API rejects a user message whose tool_result blocks do not come first.
        return {"role": role, "content": results + others}

    def _block(self, block: dict[str, Any], where: str) -> TextBlock | ImageBlock:
        """A text or image block (the only kinds Anthropic takes in messages and tool results)."""
        kind = block.get("type")
        if kind == "text":
            return {"type": "text", "text": block.get("text", "")}
        if kind == "image":
            return {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": block.get("mimeType"),
                    "data": block.get("data", ""),
                },
            }
        if kind == "resource":
            resource = block.get("resource") or {}
            if isinstance(resource.get("text"), str):
                return {"type": "text", "text": resource["text"]}
        raise unsupported(self.config, str(kind), where)

    def _tool_result(self, block: dict[str, Any], where: str) -> ToolResultBlock:
        inner = [self._block(b, f"a tool_result in {where}") for b in block.get("content") or []]
        if not inner and block.get("structuredContent") is not None:
            inner.append({"type": "text", "text": json.dumps(block["structuredContent"])})
        return {
            "type": "tool_result",
            "tool_use_id": block.get("toolUseId"),
            "content": inner,
            "is_error": bool(block.get("isError")),
        }

    # -- Anthropic -> MCP ----------------------------------------------------------------------

    def parse_response(self, data: JsonObject, model: str) -> Completion:
        """A Completion from a Messages API answer; thinking and server-tool blocks are dropped."""
        blocks = data.get("content")
        if not isinstance(blocks, list):
            raise LLMError(f"provider '{self.config.name}' answered without content", provider=self.config.name)
        content: list[TextContent | ToolUseContent] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                content.append({"type": "text", "text": block.get("text", "")})
            elif block.get("type") == "tool_use":
                arguments = block.get("input") or {}
                if not isinstance(arguments, dict):
                    raise LLMError(
                        f"provider '{self.config.name}' returned a call to tool '{block.get('name')}' whose input "
                        "is not a JSON object",
                        provider=self.config.name,
                    )
                content.append(tool_use_block(self.config.name, block.get("id"), block.get("name"), arguments))
        if not content:
            content.append({"type": "text", "text": ""})
        stop = data.get("stop_reason")
        usage = data.get("usage") or {}
        # Anthropic's input_tokens leaves out what was read from or written to the prompt cache: every
        # input token counts, and cache reads are priced apart (writes are charged as input here)
        read, written = _count(usage.get("cache_read_input_tokens")), _count(usage.get("cache_creation_input_tokens"))
        input_tokens = usage.get("input_tokens")
        if isinstance(input_tokens, int) and (read or written):
            input_tokens += (read or 0) + (written or 0)
        return Completion(
            content=content,
            model=data.get("model") or model,
            stop_reason=STOP_REASONS.get(stop, str(stop)) if stop else "endTurn",
            input_tokens=input_tokens,
            output_tokens=usage.get("output_tokens"),
            cached_input_tokens=read,
        )


def _tool(tool: Tool) -> ToolSpec:
    schema = tool.get("inputSchema") or {"type": "object", "properties": {}}
    if description := tool.get("description"):
        return {"name": tool.get("name"), "description": description, "input_schema": schema}
    return {"name": tool.get("name"), "input_schema": schema}


def _count(value: Any) -> int | None:
    """A token count the provider reported, or None when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

"""OpenAI Chat Completions adapter.

Chat Completions is the lingua franca of hosted and local LLM servers (OpenAI, OpenRouter,
Ollama, LM Studio, vLLM, llama.cpp), so this adapter only uses its common core: no
provider-specific fields, and `metadata` from the request is never forwarded. The endpoints
differ only outside the body: OpenRouter's attribution headers come from the provider's
`headers:`, and Azure OpenAI's deployment URL, `api-version` and `api-key` header from `azure:`.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Literal, Required, TypedDict
from urllib.parse import quote

import structlog

from mcp_sampling_proxy.config.providers import ProviderConfig
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

DEFAULT_BASE_URL = "https://api.openai.com/v1"
AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}
FINISH_REASONS = {
    "stop": "endTurn",
    "length": "maxTokens",
    "tool_calls": "toolUse",
    "function_call": "toolUse",
}
# OpenAI's reasoning models (o1, o3, o4-mini, GPT-5 ...) take max_completion_tokens and only the default
# temperature; a model entry's `reasoning:` overrides this guess by name (after any `vendor/` prefix).
REASONING_NAMES = re.compile(r"^(o[1-9]|gpt-5)", re.IGNORECASE)
log = structlog.get_logger("mcp_sampling_proxy.providers")


# -- the Chat Completions request, as the adapter builds it ----------------------------------------


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ImageUrl(TypedDict):
    url: str  # a data: URL


class ImagePart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(TypedDict):
    data: str  # base64
    format: str  # wav | mp3


class AudioPart(TypedDict):
    type: Literal["input_audio"]
    input_audio: InputAudio


ContentPart = TextPart | ImagePart | AudioPart


class FunctionCall(TypedDict):
    name: str | None
    arguments: str  # JSON text


class ToolCall(TypedDict):
    id: str | None  # the MCP tool_use block's (the request was checked: present)
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    role: Required[str]  # system | user | assistant | tool
    content: Required[str | list[ContentPart] | None]
    tool_calls: list[ToolCall]
    tool_call_id: str | None  # tool messages: the call it answers


class Function(TypedDict, total=False):
    name: Required[str | None]  # (the request was checked: present)
    description: str
    parameters: JsonObject  # the tool's input schema


class FunctionTool(TypedDict):
    type: Literal["function"]
    function: Function


class ChatRequest(TypedDict, total=False):
    model: Required[str]
    messages: Required[list[ChatMessage]]
    max_tokens: int
    max_completion_tokens: int  # reasoning models take this instead
    temperature: float
    stop: list[str]
    tools: list[FunctionTool]
    tool_choice: str


def is_reasoning_model(config: ProviderConfig, model: str) -> bool:
    """The model entry's `reasoning:` when set, else a guess from the model's name."""
    spec = next((m for m in config.models if m.name == model), None)
    if spec is not None and spec.reasoning is not None:
        return spec.reasoning
    return bool(REASONING_NAMES.match(model.rsplit("/", 1)[-1]))


class OpenAIAdapter(HttpAdapter):
    """Fulfils sampling requests through `POST {base_url}/chat/completions`."""

    default_base_url = DEFAULT_BASE_URL
    # the same three words as MCP
    tool_choices: ClassVar[dict[str, str]] = {"auto": "auto", "required": "required", "none": "none"}

    def auth_headers(self, key: str) -> dict[str, str]:
        if self.config.azure is not None:
            return {"api-key": key}  # Azure OpenAI's key header (Entra ID tokens would be Bearer)
        return {"authorization": f"Bearer {key}"}

    def normalise_base_url(self, base_url: str) -> str:
        if self.config.azure is not None:  # the resource endpoint; `/openai/...` is added per call
            return base_url.removesuffix("/openai")
        return base_url

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def models_url(self) -> str:
        if self.config.azure is not None:  # the resource's models list wants its api-version too
            return f"{self.base_url}/openai/models?api-version={quote(self.config.azure.api_version, safe='')}"
        return f"{self.base_url}/models"

    def endpoint_for(self, model: str) -> str:
        """Azure OpenAI routes by deployment in the path and wants `api-version` in the query."""
        azure = self.config.azure
        if azure is None:
            return self.endpoint
        deployment = quote(azure.deployment or model, safe="")
        return (
            f"{self.base_url}/openai/deployments/{deployment}/chat/completions"
            f"?api-version={quote(azure.api_version, safe='')}"
        )

    # -- MCP -> OpenAI -------------------------------------------------------------------------

    def build_request(self, params: CreateMessageParams, model: str) -> ChatRequest:
        """The Chat Completions body for a `sampling/createMessage` params dict."""
        messages: list[ChatMessage] = []
        if system := params.get("systemPrompt"):
            messages.append({"role": "system", "content": system})
        for index, message in enumerate(params.get("messages") or []):
            messages.extend(self._message(message, index))
        payload: ChatRequest = {"model": model, "messages": messages}
        reasoning = is_reasoning_model(self.config, model)
        if (max_tokens := params.get("maxTokens")) is not None:
            if reasoning:
                payload["max_completion_tokens"] = max_tokens
            else:
                payload["max_tokens"] = max_tokens
        options = self.options(params)
        if options.temperature is not None and reasoning:
            # the API refuses any temperature but its default for these models: the server asked for
            # something the model cannot do, which is worth a note but not a failed request
            log.info(
                "temperature dropped: a reasoning model takes only its default",
                provider=self.config.name,
                model=model,
                temperature=options.temperature,
            )
        elif options.temperature is not None:
            payload["temperature"] = options.temperature
        if options.stop:
            payload["stop"] = options.stop
        if options.tools:
            payload["tools"] = [_tool(tool) for tool in options.tools]
            if options.tool_choice:
                payload["tool_choice"] = self.tool_choices[options.tool_choice]
        return payload

    def _message(self, message: SamplingMessage, index: int) -> list[ChatMessage]:
        """One MCP message; tool results become separate `tool` messages placed first, since
        OpenAI wants them right after the assistant message that made the calls."""
        role = message.get("role")
        where = f"messages[{index}]"
        if role not in ("user", "assistant"):
            raise unsupported_role(self.config, role, where)
        tool_messages: list[ChatMessage] = []
        parts: list[ContentPart] = []
        tool_calls: list[ToolCall] = []
        for block in as_blocks(message.get("content")):
            if not isinstance(block, dict):
                raise unsupported(self.config, type(block).__name__, where)
            kind = block.get("type")
            if kind == "tool_use" and role == "assistant":
                tool_calls.append(_tool_call(block))
            elif kind == "tool_result" and role == "user":
                tool_messages.append(self._tool_result(block, where))
            elif kind in ("image", "audio") and role == "assistant":
                raise unsupported(self.config, kind, where, "assistant messages take text and tool calls only")
            elif kind in ("tool_use", "tool_result"):
                raise unsupported(self.config, kind, where, f"not allowed in a {role} message")
            else:
                parts.append(self._part(block, where))
        out = list(tool_messages)
        if parts or tool_calls or not tool_messages:
            entry: ChatMessage = {"role": role, "content": _content(parts, bool(tool_calls))}
            if tool_calls:
                entry["tool_calls"] = tool_calls
            out.append(entry)
        return out

    def _part(self, block: dict[str, Any], where: str) -> ContentPart:
        kind = block.get("type")
        if kind == "text":
            return {"type": "text", "text": block.get("text", "")}
        if kind == "image":
            url = f"data:{block.get('mimeType')};base64,{block.get('data', '')}"
            return {"type": "image_url", "image_url": {"url": url}}
        if kind == "audio":
            mime = block.get("mimeType")
            fmt = AUDIO_FORMATS.get(str(mime).lower())
            if fmt is None:
                raise unsupported(self.config, "audio", where, f"{mime} is not supported, use audio/wav or audio/mpeg")
            return {"type": "input_audio", "input_audio": {"data": block.get("data", ""), "format": fmt}}
        text = _resource_text(block)
        if text is not None:
            return {"type": "text", "text": text}
        raise unsupported(self.config, str(kind), where)

    def _tool_result(self, block: dict[str, Any], where: str) -> ChatMessage:
        texts = []
        for inner in block.get("content") or []:
            text = inner.get("text") if inner.get("type") == "text" else _resource_text(inner)
            if text is None:
                raise unsupported(
                    self.config,
                    str(inner.get("type")),
                    f"a tool_result in {where}",
                    "tool results take text only",
                )
            texts.append(text)
        if not texts and block.get("structuredContent") is not None:
            texts.append(json.dumps(block["structuredContent"]))
        content = "\n".join(texts)
        if block.get("isError"):
            content = f"[tool error] {content}"  # the wire format has no error flag
        return {"role": "tool", "tool_call_id": block.get("toolUseId"), "content": content}

    # -- OpenAI -> MCP -------------------------------------------------------------------------

    def parse_response(self, data: JsonObject, model: str) -> Completion:
        """A Completion from a Chat Completions answer."""
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LLMError(f"provider '{self.config.name}' answered without choices", provider=self.config.name)
        message = choices[0].get("message") or {}
        content: list[TextContent | ToolUseContent] = []
        text = _response_text(message.get("content"))
        if text:
            content.append({"type": "text", "text": text})
        calls = message.get("tool_calls") or []
        content += [self._tool_use(call) for call in calls]
        if not content:
            content.append({"type": "text", "text": ""})
        finish = choices[0].get("finish_reason")
        if calls and finish in (None, "stop"):
            stop_reason = "toolUse"  # Ollama and some others report "stop" alongside tool calls
        elif finish is None:
            stop_reason = "endTurn"
        else:
            stop_reason = FINISH_REASONS.get(finish, str(finish))
        usage = data.get("usage") or {}
        return Completion(
            content=content,
            model=data.get("model") or model,
            stop_reason=stop_reason,
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            cached_input_tokens=_count((usage.get("prompt_tokens_details") or {}).get("cached_tokens")),
        )

    def _tool_use(self, call: JsonObject) -> ToolUseContent:
        function = call.get("function") or {}
        name = function.get("name")
        raw = function.get("arguments")
        try:
            arguments = raw if isinstance(raw, dict) else json.loads(raw or "{}")
        except (TypeError, ValueError) as exc:
            raise LLMError(
                f"provider '{self.config.name}' returned a call to tool '{name}' whose arguments "
                f"are not valid JSON ({exc})",
                provider=self.config.name,
            ) from exc
        if not isinstance(arguments, dict):
            raise LLMError(
                f"provider '{self.config.name}' returned a call to tool '{name}' whose arguments are not a JSON object",
                provider=self.config.name,
            )
        return tool_use_block(self.config.name, call.get("id"), name, arguments)


def _resource_text(block: dict[str, Any]) -> str | None:
    """Embedded text resources read as plain text; anything else has no text form."""
    if block.get("type") == "resource":
        resource = block.get("resource") or {}
        text = resource.get("text")
        if isinstance(text, str):
            return text
    return None


def _content(parts: list[ContentPart], has_calls: bool) -> str | list[ContentPart] | None:
    """Text-only content as a plain string (what every server understands), else the list form."""
    texts = [part["text"] for part in parts if part["type"] == "text"]
    if len(texts) == len(parts):
        if not parts and has_calls:
            return None
        return "\n".join(texts)
    return parts


def _tool(tool: Tool) -> FunctionTool:
    function: Function = {"name": tool.get("name")}
    if description := tool.get("description"):
        function["description"] = description
    function["parameters"] = tool.get("inputSchema") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _tool_call(block: dict[str, Any]) -> ToolCall:
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input") or {})},
    }


def _response_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _count(value: Any) -> int | None:
    """A token count the provider reported, or None when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

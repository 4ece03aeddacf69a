"""The wire shapes the proxy reads, as `TypedDict`s: JSON-RPC messages and the MCP params and
results of sampling, elicitation and tool calls.

WHY: these are what `wire_checks` accepts, named, so that code reading a checked request says which
shape it holds (`CreateMessageParams`, not `dict[str, Any]`) and mypy sees a misspelt field. They are
types only: at run time each is a plain dict, exactly as it came off the wire (keys the spec does not
define stay in it, as the checks allow them). Field names are the spec's (2025-11-25), camelCase as on
the wire; an optional field is `| None` where the checks let it be null (as the SDK's models do).
Untrusted JSON becomes one of these only right after its wire check passed (`sampling_request.validate`).

Where a field really is arbitrary JSON (`_meta`, a tool's input or arguments, a schema) it is a
`JsonObject`: any JSON object.
"""

# (no `from __future__ import annotations`: it would hide `Required` from run-time introspection)

from typing import Any, Literal, Required, TypeAlias, TypedDict, final

# Any JSON object: what a field holds whose contents the spec leaves open (`_meta`, a tool's
# arguments, a JSON schema, a provider's metadata).
JsonObject: TypeAlias = dict[str, Any]

# -- JSON-RPC 2.0 ---------------------------------------------------------------------------------

RequestId: TypeAlias = str | int


class ErrorObject(TypedDict, total=False):
    """The `error` of an error response."""

    code: Required[int]
    message: Required[str]
    data: Any


class JsonRpcRequest(TypedDict, total=False):
    jsonrpc: Required[Literal["2.0"]]
    id: Required[RequestId]
    method: Required[str]
    params: JsonObject


class JsonRpcNotification(TypedDict, total=False):
    jsonrpc: Required[Literal["2.0"]]
    method: Required[str]
    params: JsonObject


class JsonRpcResponse(TypedDict, total=False):
    """A response as a peer sent it, once its envelope was read (`relay.core.envelope_problem`): an id
    and a result or an error. What they hold is the peer's, unchecked: read it through a check
    (`jsonrpc.as_object`, `isinstance`). Also what the relay hands a waiter when no answer came ({})."""

    jsonrpc: Literal["2.0"]
    id: RequestId | None
    result: object
    error: object


class JsonRpcResult(TypedDict):
    """A result response."""

    jsonrpc: Literal["2.0"]
    id: RequestId
    result: JsonObject


class JsonRpcError(TypedDict):
    """An error response (`id` is null when the request's id could not be read)."""

    jsonrpc: Literal["2.0"]
    id: RequestId | None
    error: ErrorObject


# -- content blocks ---------------------------------------------------------------------------------

Role: TypeAlias = Literal["user", "assistant"]


class Annotations(TypedDict, total=False):
    audience: list[Role] | None
    priority: float | None
    lastModified: str | None


class TextContent(TypedDict, total=False):
    type: Required[Literal["text"]]
    text: Required[str]
    annotations: Annotations | None
    _meta: JsonObject | None


class ImageContent(TypedDict, total=False):
    type: Required[Literal["image"]]
    data: Required[str]  # base64
    mimeType: Required[str]
    annotations: Annotations | None
    _meta: JsonObject | None


class AudioContent(TypedDict, total=False):
    type: Required[Literal["audio"]]
    data: Required[str]  # base64
    mimeType: Required[str]
    annotations: Annotations | None
    _meta: JsonObject | None


class ResourceLink(TypedDict, total=False):
    type: Required[Literal["resource_link"]]
    name: Required[str]
    uri: Required[str]
    title: str | None
    description: str | None
    mimeType: str | None
    size: int | None
    icons: list[JsonObject] | None
    annotations: Annotations | None
    _meta: JsonObject | None


class EmbeddedResource(TypedDict, total=False):
    type: Required[Literal["resource"]]
    resource: Required[JsonObject]  # text or blob resource contents
    annotations: Annotations | None
    _meta: JsonObject | None


# What a tool result holds (the spec's ContentBlock).
ContentBlock: TypeAlias = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource


class ToolUseContent(TypedDict, total=False):
    type: Required[Literal["tool_use"]]
    id: Required[str]
    name: Required[str]
    input: Required[JsonObject]  # the tool's arguments: arbitrary JSON
    _meta: JsonObject | None


class ToolResultContent(TypedDict, total=False):
    type: Required[Literal["tool_result"]]
    toolUseId: Required[str]
    content: list[ContentBlock]  # defaults to [] when absent
    structuredContent: Any
    isError: bool | None
    _meta: JsonObject | None


# What a sampling message or result holds (the spec's SamplingMessageContentBlock).
SamplingContent: TypeAlias = TextContent | ImageContent | AudioContent | ToolUseContent | ToolResultContent

# -- sampling/createMessage -------------------------------------------------------------------------


class SamplingMessage(TypedDict, total=False):
    role: Required[Role]
    content: Required[SamplingContent | list[SamplingContent]]  # one block or a list
    _meta: JsonObject | None


class ModelHint(TypedDict, total=False):
    name: str | None


class ModelPreferences(TypedDict, total=False):
    hints: list[ModelHint] | None
    costPriority: float | None
    speedPriority: float | None
    intelligencePriority: float | None


class Tool(TypedDict, total=False):
    name: Required[str]
    inputSchema: Required[JsonObject]  # a JSON schema
    title: str | None
    description: str | None
    outputSchema: JsonObject | None
    icons: list[JsonObject] | None
    execution: JsonObject | None
    annotations: JsonObject | None
    _meta: JsonObject | None


class ToolChoice(TypedDict, total=False):
    mode: Literal["auto", "required", "none"] | None


class TaskMetadata(TypedDict, total=False):
    ttl: int | None


@final  # (final: a union with CallToolParams narrows by a key, `"messages" in params`)
class CreateMessageParams(TypedDict, total=False):
    messages: Required[list[SamplingMessage]]
    maxTokens: Required[int]
    modelPreferences: ModelPreferences | None
    systemPrompt: str | None
    includeContext: Literal["none", "thisServer", "allServers"] | None
    temperature: float | None
    stopSequences: list[str] | None
    metadata: JsonObject | None  # provider-specific: arbitrary JSON
    tools: list[Tool] | None
    toolChoice: ToolChoice | None
    task: TaskMetadata | None
    _meta: JsonObject | None


class CreateMessageResult(TypedDict, total=False):
    role: Required[Role]
    content: Required[SamplingContent | list[SamplingContent]]
    model: Required[str]
    stopReason: str  # endTurn | stopSequence | maxTokens | toolUse, or the provider's own
    _meta: JsonObject


# -- elicitation/create -----------------------------------------------------------------------------


class ElicitFormParams(TypedDict, total=False):
    mode: Literal["form"]  # the default when absent
    message: Required[str]
    requestedSchema: Required[JsonObject]  # a flat object schema
    task: TaskMetadata | None
    _meta: JsonObject | None


class ElicitUrlParams(TypedDict, total=False):
    mode: Literal["url"]  # may be absent: a request with a url and no requestedSchema is one
    message: Required[str]
    url: Required[str]
    elicitationId: str | None
    task: TaskMetadata | None
    _meta: JsonObject | None


ElicitRequestParams: TypeAlias = ElicitFormParams | ElicitUrlParams

ElicitValue: TypeAlias = str | int | float | bool | list[str] | None


class ElicitResult(TypedDict, total=False):
    action: Required[Literal["accept", "decline", "cancel"]]
    content: dict[str, ElicitValue]  # the form's answers (accept only)
    _meta: JsonObject


# -- tools/call -------------------------------------------------------------------------------------


@final
class CallToolParams(TypedDict, total=False):
    name: Required[str]
    arguments: JsonObject | None  # the tool's arguments: arbitrary JSON
    task: TaskMetadata
    _meta: JsonObject

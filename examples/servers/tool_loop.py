"""Example MCP server that runs a *sampling-with-tools* agent loop (MCP 2025-11-25, SEP-1577).

The server owns the tools (``get_weather``, ``calculate``) and the loop; the client only provides the
LLM. Each round sends ``sampling/createMessage`` with ``tools``; when the model stops with ``toolUse``
the server executes every ``tool_use`` block locally and replies with a user message holding only the
matching ``tool_result`` blocks. The last allowed round forces ``toolChoice: {"mode": "none"}`` so the
model has to answer in text. Requires a client declaring ``sampling.tools``. Run over stdio::

    python examples/servers/tool_loop.py
"""

from __future__ import annotations

import ast
import json
import operator
import warnings
from collections.abc import Callable
from typing import cast

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# Sampling is deprecated in the 2026-07-28 spec but is exactly what this example demonstrates.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

mcp = MCPServer("tool-loop", instructions="Answers questions with an LLM (via MCP sampling) that can call local tools.")

SYSTEM_PROMPT = (
    "You are a research assistant. Use the provided tools whenever they help: get_weather for current "
    "weather, calculate for arithmetic. When you have what you need, answer concisely in plain text."
)

SAMPLING_TOOLS = [
    types.Tool(
        name="get_weather",
        description="Get the current weather for a city.",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. 'Paris'"}},
            "required": ["city"],
        },
    ),
    types.Tool(
        name="calculate",
        description="Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
        input_schema={
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. '(3 + 4) * 2'"}},
            "required": ["expression"],
        },
    ),
]

# --- local tools ---------------------------------------------------------------------------------

_CANNED_WEATHER = {
    "paris": "14°C, light rain, wind 12 km/h SW",
    "london": "11°C, overcast, wind 20 km/h W",
    "tokyo": "22°C, clear sky, wind 5 km/h E",
    "new york": "18°C, partly cloudy, wind 15 km/h NW",
}


def get_weather(city: str) -> str:
    """Canned weather report: the example must be deterministic and work offline."""
    report = _CANNED_WEATHER.get(city.strip().lower(), "16°C, partly cloudy, wind 10 km/h N")
    return f"Weather in {city}: {report} (example data)"


_BIN_OPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPONENT = 1000  # keeps `9 ** 9 ** 9` from pinning the CPU


def calculate(expression: str) -> str:
    """Evaluate simple arithmetic by walking the AST (never ``eval``: the input comes from an LLM)."""

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return cast(int | float, node.value)  # the type check above, which keeps bools out
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN_OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
                raise ValueError("exponent too large")
            return _BIN_OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
            return _UNARY_OPS[type(node.op)](walk(node.operand))
        raise ValueError(f"unsupported syntax: {type(node).__name__}")

    if len(expression) > 200:
        raise ValueError("expression too long")
    value = walk(ast.parse(expression, mode="eval"))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


LOCAL_TOOLS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "calculate": calculate}


def run_tool(call: types.ToolUseContent) -> types.ToolResultContent:
    """Execute one ``tool_use`` block; failures become ``isError`` results the model can react to."""
    fn = LOCAL_TOOLS.get(call.name)
    try:
        if fn is None:
            raise ValueError(f"unknown tool {call.name!r}")
        output, is_error = fn(**call.input), False
    except (TypeError, ValueError, ArithmeticError, SyntaxError) as exc:
        output, is_error = f"Error: {exc}", True
    return types.ToolResultContent(
        tool_use_id=call.id, content=[types.TextContent(text=output)], is_error=is_error or None
    )


def _describe_call(call: types.ToolUseContent) -> str:
    """``name(arg=value, ...)`` for the summary line."""
    args = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in call.input.items())
    return f"{call.name}({args})"


# --- the MCP tool --------------------------------------------------------------------------------


def sampling_failed(exc: MCPError, ctx: Context) -> ToolError:
    """Turn a sampling error into a readable tool error. A client that declared sampling with tools (a
    host that samples, or mcp-sampling-proxy) answered the request itself, and its message says why (a
    policy's refusal, the LLM's error); only a client without it needs the proxy in front."""
    failed = f"Sampling request failed ({exc.code}: {exc.message})."
    with_tools = types.SamplingCapability(tools=types.SamplingToolsCapability())
    if ctx.session.check_client_capability(types.ClientCapabilities(sampling=with_tools)):
        return ToolError(failed)
    if ctx.session.check_client_capability(types.ClientCapabilities(sampling=types.SamplingCapability())):
        return ToolError(
            f"{failed} This server needs sampling with tools, which this client does not offer: a host whose "
            "sampling takes tools, or mcp-sampling-proxy with an LLM provider that takes tools."
        )
    return ToolError(
        f"{failed} This server needs an MCP client that supports sampling with tools - run it behind "
        "mcp-sampling-proxy if your host does not."
    )


@mcp.tool()
async def research(question: str, ctx: Context, max_iterations: int = 5) -> str:
    """Answer ``question`` with the client's LLM, letting it call get_weather/calculate for up to
    ``max_iterations`` sampling rounds."""
    max_iterations = max(1, max_iterations)
    messages: list[types.SamplingMessage] = [
        types.SamplingMessage(role="user", content=types.TextContent(text=question))
    ]
    calls: list[str] = []
    answer = ""
    iterations = 0
    for iterations in range(1, max_iterations + 1):
        final_round = iterations == max_iterations
        try:
            result = await ctx.session.create_message(
                messages,
                max_tokens=1000,
                system_prompt=SYSTEM_PROMPT,
                tools=SAMPLING_TOOLS,
                # Absent means "auto"; the last round must produce an answer, not another tool call.
                tool_choice=types.ToolChoice(mode="none") if final_round else None,
                related_request_id=ctx.request_id,
            )
        except MCPError as exc:
            raise sampling_failed(exc, ctx) from exc
        blocks = result.content_as_list
        answer = "\n".join(block.text for block in blocks if isinstance(block, types.TextContent)).strip()
        tool_uses = [block for block in blocks if isinstance(block, types.ToolUseContent)]
        if result.stop_reason != "toolUse" or not tool_uses:
            break
        if final_round:
            answer = answer or "(stopped: the model still wanted tools after the last allowed iteration)"
            break
        await ctx.report_progress(iterations, max_iterations, f"running {len(tool_uses)} tool call(s)")
        # Replay the assistant turn as returned (tool_use blocks and any text), then answer every call.
        messages.append(types.SamplingMessage(role="assistant", content=blocks))
        messages.append(types.SamplingMessage(role="user", content=[run_tool(call) for call in tool_uses]))
        calls.extend(_describe_call(call) for call in tool_uses)
    return f"{answer}\n\n(iterations: {iterations}, tool calls: [{', '.join(calls)}])"


if __name__ == "__main__":
    mcp.run()

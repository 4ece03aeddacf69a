"""Two real-world elicitation forms, as their servers send them: one that asks for nothing secret, one that
asks for a password. The secret-form guard is tested on them in process and through the real proxy."""

from __future__ import annotations

import json
from typing import Any

from helpers.support import ROOT

# @modelcontextprotocol/server-everything 2026.8.31, tool "trigger-elicitation-request"
# (dist/tools/trigger-elicitation-request.js): the params exactly as it sends them.
_EVERYTHING = json.loads((ROOT / "tests" / "fixtures" / "forms" / "server_everything_elicitation.json").read_text())
EVERYTHING_MESSAGE: str = _EVERYTHING["message"]
EVERYTHING_SCHEMA: dict[str, Any] = _EVERYTHING["requestedSchema"]
# FastMCP `await ctx.elicit("Enter your database password", str)`: a scalar is wrapped in one
# required field named `value` (titles pruned); the secret is only named in the message.
FASTMCP_MESSAGE = "Enter your database password"
FASTMCP_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}

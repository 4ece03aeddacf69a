"""The forms and the auto-answer entry the auto-answer tests share (the policy commands' and the
relay's), so both judge the very same form."""

from __future__ import annotations

CONFIRM = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Proceed?"}},
    "required": ["confirm"],
}
SECRET = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}, "password": {"type": "string", "title": "Your password"}},
    "required": ["confirm"],
}
CONFIRM_ENTRY = (
    "    - name: confirm-deploys\n"
    "      server: kitchen*\n"
    "      tool: elicit_*\n"
    "      message: '^Deploy to '\n"
    "      action: accept\n"
    "      content: {confirm: true}\n"
)

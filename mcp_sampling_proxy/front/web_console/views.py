"""What the web console's page is shown: questions, audit lines, token use and budgets as plain data.

Everything a server chose (prompts, names, form titles) passes `strip_controls` here and is put
into the page with `textContent` only, never as HTML. Images reach the page only as data URLs of
raster types whose bytes start like that type (no SVG: it can carry script), so a server cannot
get markup or a remote fetch into the page.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from msgspec import Struct, field

from mcp_sampling_proxy.approval.console.messages import ConsoleMessage
from mcp_sampling_proxy.approval.edits import kept_blocks, prompt_not_editable, result_text, text_of
from mcp_sampling_proxy.approval.forms import FormError, parse_form
from mcp_sampling_proxy.approval.url_safety import analyze_url
from mcp_sampling_proxy.notation.vocabulary import TOOL_CALL_APPROVAL
from mcp_sampling_proxy.quotas.integrity import KEY_FILE, MAC_FIELD, entry_is_sealed, load_key
from mcp_sampling_proxy.quotas.limiters import SECTIONS, limit_key, usd_micros
from mcp_sampling_proxy.quotas.refusals import TOKENS, USD, BudgetUse, format_period
from mcp_sampling_proxy.text.sanitize import one_line, strip_controls

# raster types a browser decodes without running anything, and how their bytes start
IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
MAX_IMAGE_BYTES = 8 * 1024 * 1024
_TEXT = 200_000  # characters of one text block shown
MAX_ARGUMENTS = 4000  # characters of a tool call's arguments shown at its approval
MAX_NOTES = 12  # governance notes on one pending request


class PolicyFacts(Struct):
    """What the policy says about limits, when a policy file was found (else empty)."""

    budgets: dict[str, tuple[int, float]] = field(default_factory=dict)  # rule -> (tokens, per seconds)
    usd_budgets: dict[str, tuple[int, float]] = field(default_factory=dict)  # rule -> (micro-dollars, per seconds)
    rate_limits: dict[str, str] = field(default_factory=dict)  # rule -> "30 requests per 1m, 4 at once"
    max_tokens: int | None = None  # the top-level cap
    source: str | None = None


def policy_facts(settings: Any) -> PolicyFacts:
    facts = PolicyFacts(max_tokens=settings.limits.max_tokens, source=settings.source)
    for rule in settings.rules:
        if rule.budget is not None and rule.budget.tokens is not None:
            facts.budgets[rule.name] = (rule.budget.tokens, rule.budget.per)
        if rule.budget is not None and rule.budget.usd is not None:
            facts.usd_budgets[rule.name] = (usd_micros(rule.budget.usd), rule.budget.per)
        if rule.rate_limit is not None:
            parts = []
            if rule.rate_limit.requests is not None and rule.rate_limit.per is not None:
                parts.append(f"{rule.rate_limit.requests} requests per {format_period(rule.rate_limit.per)}")
            if rule.rate_limit.concurrent is not None:
                parts.append(f"{rule.rate_limit.concurrent} at once")
            facts.rate_limits[rule.name] = ", ".join(parts) + " (counted per proxy)"
    return facts


def _s(value: Any, limit: int = 512) -> str:
    return one_line(str(value if value is not None else ""), limit)


def _t(value: Any) -> str:
    text = strip_controls(str(value if value is not None else ""))
    return text if len(text) <= _TEXT else text[:_TEXT] + f"\n… ({len(text) - _TEXT:,} more characters)"


def image_view(block: dict[str, Any]) -> dict[str, Any]:
    """An image block the page may show as a data URL, or why it is not shown."""
    mime = block.get("mimeType")
    data = block.get("data")
    if not isinstance(mime, str) or mime.lower() not in IMAGE_MAGIC:
        return {"type": "image", "refused": f"image of type '{_s(mime, 60)}' not shown (only PNG, JPEG, GIF, WebP)"}
    if not isinstance(data, str) or len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        return {"type": "image", "refused": "image too large or without data"}
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return {"type": "image", "refused": "image data is not valid base64"}
    if not raw.startswith(IMAGE_MAGIC[mime.lower()]) or (mime.lower() == "image/webp" and raw[8:12] != b"WEBP"):
        return {"type": "image", "refused": f"image data is not {mime.lower()}"}
    return {"type": "image", "mimeType": mime.lower(), "data": data, "bytes": len(raw)}


def block_view(block: Any) -> dict[str, Any]:
    if not isinstance(block, dict):
        return {"type": "other", "text": _t(json.dumps(block)[:2000])}
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _t(block.get("text"))}
    if kind == "image":
        return image_view(block)
    if kind == "audio":
        return {
            "type": "other",
            "text": f"[audio {_s(block.get('mimeType'), 60)}, {len(str(block.get('data') or '')) * 3 // 4:,} bytes]",
        }
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "text": f"calls tool '{_s(block.get('name'), 120)}' with "
            + _t(json.dumps(block.get("input"), ensure_ascii=False)[:4000]),
        }
    if kind == "tool_result":
        inner = block.get("content")
        return {"type": "tool_result", "text": "tool result: " + _t(text_of(inner) or json.dumps(inner)[:4000])}
    return {"type": "other", "text": f"[{_s(kind, 60)} block]"}


def request_view(params: dict[str, Any]) -> dict[str, Any]:
    """A sampling request in full, for the page: messages with their blocks, system prompt, model
    preferences, limits asked for, tools."""
    messages = []
    for message in params.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else [content]
        messages.append({"role": _s(message.get("role"), 20), "blocks": [block_view(b) for b in blocks]})
    prefs: dict[str, Any] = params["modelPreferences"] if isinstance(params.get("modelPreferences"), dict) else {}
    hints = [_s(h.get("name"), 120) for h in prefs.get("hints") or [] if isinstance(h, dict)]
    priorities = {
        k: prefs[k]
        for k in ("costPriority", "speedPriority", "intelligencePriority")
        if isinstance(prefs.get(k), int | float) and not isinstance(prefs.get(k), bool)
    }
    tools = [
        {"name": _s(t.get("name"), 120), "description": _t(t.get("description") or "")[:2000]}
        for t in params.get("tools") or []
        if isinstance(t, dict)
    ]
    why = prompt_not_editable(params)
    user = next(
        (m for m in reversed(params.get("messages") or []) if isinstance(m, dict) and m.get("role") == "user"), None
    )
    return {
        "messages": messages,
        "system": _t(params["systemPrompt"]) if params.get("systemPrompt") else None,
        "hints": hints,
        "priorities": priorities,
        "max_tokens": params.get("maxTokens"),
        "temperature": params.get("temperature"),
        "stop": [_s(s, 120) for s in params.get("stopSequences") or []],
        "include_context": _s(params.get("includeContext"), 30) if params.get("includeContext") else None,
        "tools": tools,
        "tool_choice": _s(json.dumps(params.get("toolChoice")), 200) if params.get("toolChoice") else None,
        "editable": why is None,
        "not_editable": why,
        "kept": kept_blocks(params) if why is None else [],
        "prompt_text": _t(text_of(user.get("content")) or "") if user and why is None else "",
    }


def form_view(schema: Any) -> dict[str, Any]:
    """The fields of an elicitation form, or why it cannot be shown."""
    try:
        form = parse_form(schema or {})
    except FormError as exc:
        return {"error": _s(exc, 300)}
    fields = []
    for f in form:
        fields.append(
            {
                "name": f.name,
                "kind": f.kind,
                "label": f.label,
                "description": _t(f.description or ""),
                "required": f.required,
                "default": f.default,
                "expected": f.expected(),
                "options": [{"value": o.value, "label": _s(o.label, 200)} for o in f.options or []],
                "minimum": f.minimum,
                "maximum": f.maximum,
                "format": f.format,
            }
        )
    return {"fields": fields}


def url_view(url: str) -> dict[str, Any]:
    report = analyze_url(url)
    return {
        "before": report.before,
        "host": report.host,
        "after": report.after,
        "full": _s(report.url, 4000),
        "warnings": [_s(w, 300) for w in report.warnings],
        "ok": report.ok,
    }


def question_view(key: str, proxy: str, message: ConsoleMessage, limits: RequestLimits) -> dict[str, Any]:
    """One pending question of a proxy as the page shows it."""
    view: dict[str, Any] = {
        "key": key,
        "proxy": proxy,
        "type": message["type"],
        "server": _s(message.get("server"), 120),
        "host": _s(message.get("host"), 120),
        "tool": _s(message.get("tool"), 120),
        "rule": _s(message.get("rule"), 120),
    }
    tool = str(message.get("tool") or "")
    if message["type"] == "pending" and tool.startswith(TOOL_CALL_APPROVAL):  # a tools: rule's prompt
        view["tool"] = _s(tool.removeprefix(TOOL_CALL_APPROVAL), 120)
        view["tool_call"] = tool_call_view(message.get("params"))
        view["quorum"] = quorum_view(message.get("quorum"))
    elif message["type"] == "pending":
        view["request"] = request_view(message.get("params") or {})
        notes = message.get("notes")
        view["notes"] = [_s(n, 300) for n in notes[:MAX_NOTES] if isinstance(n, str)] if isinstance(notes, list) else []
        view["limits"] = limits
        view["quorum"] = quorum_view(message.get("quorum"))
    elif message["type"] == "review":
        view["prompt"] = _t(message.get("summary") or "")
        view["prompt_edited_by"] = _s(message.get("prompt_edited_by"), 40) if message.get("prompt_edited_by") else None
        view["answer"] = _t(result_text(message.get("result") or {}))
    else:
        view["mode"] = message["mode"]
        view["message"] = _t(message.get("message") or "")
        if message["mode"] == "url":
            view["url"] = url_view(message.get("url") or "")
        else:
            view["form"] = form_view(message.get("schema"))
    return view


def tool_call_view(params: Any) -> dict[str, Any]:
    """A host's tools/call held for approval (a `tools:` rule's prompt): the tool and its arguments as
    indented JSON, cleaned of controls and cut, shown as text."""
    params = params if isinstance(params, dict) else {}
    arguments = params.get("arguments")
    shown = "{}" if arguments is None else json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)
    if len(shown) > MAX_ARGUMENTS:
        shown = shown[:MAX_ARGUMENTS] + f"\n… ({len(shown):,} characters in all)"
    return {"name": _s(params.get("name"), 120), "arguments": strip_controls(shown)}


def quorum_view(quorum: Any) -> dict[str, Any] | None:
    """Under `approval.quorum`: how many different approvers the request needs, and who approved so far."""
    if not isinstance(quorum, dict) or not isinstance(quorum.get("needed"), int):
        return None
    named = quorum.get("approved_by")
    return {
        "needed": quorum["needed"],
        "approved_by": [_s(name, 80) for name in named if isinstance(name, str)][:20]
        if isinstance(named, list)
        else [],
    }


# -- budgets -------------------------------------------------------------------------------------


def read_budgets(path: Path, now: float | None = None, *, unit: str = TOKENS) -> dict[str, BudgetUse]:
    """The budgets file's current windows: KEY -> used, reserved, resets_at (read only; never locked
    or rewritten here: the proxies own the file); `unit`: the token budgets, or the usd ones."""
    now = time.time() if now is None else now
    try:
        data = unsealed(json.loads(path.read_text(encoding="utf-8")), path.parent, "budgets")
    except (OSError, ValueError):
        return {}
    found: dict[str, BudgetUse] = {}
    budgets = data.get(SECTIONS[unit]) if isinstance(data, dict) else None
    for key, entry in (budgets or {}).items():
        if not isinstance(entry, dict):
            continue
        per, window, used = entry.get("per"), entry.get("window"), entry.get("used")
        if not (_number(per) and _number(window) and _number(used)):
            continue
        assert isinstance(per, int | float) and isinstance(window, int | float) and isinstance(used, int | float)
        reservations = entry.get("reservations")
        reservations = reservations if isinstance(reservations, dict) else {}
        reserved = sum(
            int(r["tokens"])
            for r in reservations.values()
            if isinstance(r, dict) and _number(r.get("tokens")) and _number(r.get("expires")) and r["expires"] > now
        )
        expired = window + per <= now
        found[str(key)] = {
            "used": 0 if expired else int(used),
            "reserved": reserved,
            "per": per,
            "resets_at": None if expired else window + per,
        }
    return found


def unsealed(data: Any, directory: Path, kind: str) -> Any:
    """A sealed state file's data when its seal verifies (quotas/integrity.py), else {}: what a proxy would
    refuse is not shown as if it were the budgets. Reads the key, never makes one."""
    if not (isinstance(data, dict) and set(data) == {"sealed", MAC_FIELD}):
        return {}
    if not (directory / KEY_FILE).exists():
        return {}
    key = load_key(directory)
    return data["sealed"] if entry_is_sealed(key, kind, data) else {}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class BudgetRow(TypedDict):
    """One row of the page's Budgets table."""

    server: str
    rule: str
    used: int
    reserved: int
    limit: int | None  # the policy's, when this console knows the policy
    per: str
    left: int | None
    resets_at: float | None
    unit: str  # tokens | usd (amounts in micro-dollars)


class LimitShown(TypedDict):
    """A budget as a pending request's limits show it."""

    limit: int
    per: str
    used: int
    reserved: int
    left: int
    resets_at: float | None


class RequestLimits(TypedDict, total=False):
    """The limits that apply to a pending request, as far as the console knows them."""

    policy: str | None  # the policy file they come from
    budget: LimitShown
    usd_budget: LimitShown  # micro-dollars
    rate_limit: str
    max_tokens_cap: int


def budget_rows(budgets: Mapping[str, BudgetUse], facts: PolicyFacts, unit: str = TOKENS) -> list[BudgetRow]:
    """One row per rule@server budget in the file, with the policy's limit when known; `unit`: tokens,
    or usd (amounts in micro-dollars)."""
    limits = facts.usd_budgets if unit == USD else facts.budgets
    rows: list[BudgetRow] = []
    for key, entry in sorted(budgets.items()):
        rule, _, server = key.partition("@")
        # rule names may hold '@': the policy's longest name that the key starts with
        named = max((n for n in limits if key.startswith(n + "@")), key=len, default=None)
        if named is not None:
            rule, server = named, key[len(named) + 1 :]
        limit = limits.get(rule, (None, 0.0))[0]
        rows.append(
            {
                "server": _s(server, 120),
                "rule": _s(rule, 120),
                "used": entry["used"],
                "reserved": entry["reserved"],
                "limit": limit,
                "per": format_period(entry["per"]),
                "left": None if limit is None else max(0, limit - entry["used"] - entry["reserved"]),
                "resets_at": entry["resets_at"],
                "unit": unit,
            }
        )
    return rows


def no_budgets_text(facts: PolicyFacts) -> str:
    """The Budgets table's one line when it has no row: why it is empty, so that an empty table is not
    taken for a page that failed to load."""
    if facts.source is None:
        return "none: no policy to read budgets from (console --web --policy FILE)"
    rules = sorted({*facts.budgets, *facts.usd_budgets})
    if not rules:
        return "none: no rule of this policy has a budget"
    return f"none used yet: {len(rules)} rule{'s' if len(rules) > 1 else ''} with a budget ({', '.join(rules)})"


def request_limits(
    message: ConsoleMessage,
    facts: PolicyFacts,
    budgets: Mapping[str, BudgetUse],
    spend: Mapping[str, BudgetUse] | None = None,
) -> RequestLimits:
    """The limits that apply to a pending request, as far as this console can know them (`spend`: the
    usd budgets' windows, in micro-dollars)."""
    rule, server = str(message.get("rule") or ""), str(message.get("server") or "")
    limits: RequestLimits = {"policy": facts.source}
    unused: BudgetUse = {"used": 0, "reserved": 0, "per": 0.0, "resets_at": None}
    if rule in facts.budgets:
        tokens, per = facts.budgets[rule]
        entry = budgets.get(limit_key(rule, server), unused)
        limits["budget"] = {
            "limit": tokens,
            "per": format_period(per),
            "used": entry["used"],
            "reserved": entry["reserved"],
            "left": max(0, tokens - entry["used"] - entry["reserved"]),
            "resets_at": entry["resets_at"],
        }
    if rule in facts.usd_budgets:
        micros, per = facts.usd_budgets[rule]
        entry = (spend or {}).get(limit_key(rule, server), unused)
        limits["usd_budget"] = {
            "limit": micros,
            "per": format_period(per),
            "used": entry["used"],
            "reserved": entry["reserved"],
            "left": max(0, micros - entry["used"] - entry["reserved"]),
            "resets_at": entry["resets_at"],
        }
    if rule in facts.rate_limits:
        limits["rate_limit"] = facts.rate_limits[rule]
    if facts.max_tokens is not None:
        limits["max_tokens_cap"] = facts.max_tokens
    return limits

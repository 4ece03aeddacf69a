"""The requests and policies on which `policy explain` and the proxy must agree (shared by the played
test in tests/unit/services and the end-to-end one), and what explain says of one request."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from fakes.llm_server import FakeLLMServer

from helpers.support import ROOT
from mcp_sampling_proxy.config.settings import load_settings, settings_from_environment
from mcp_sampling_proxy.explain.sampling import explain
from mcp_sampling_proxy.services.assess import Origin

CLAMP_POLICY = """\
llm:
  providers:
    openai: {type: openai, models: [gpt-4o-mini, gpt-4o]}
limits: {max_tokens: 1000, max_tokens_action: clamp}
rules:
  - name: no-huge
    when: {max_tokens_over: 5000}
    action: deny
  - name: rest
    action: allow
"""
POLICIES = {p.stem: p.read_text() for p in sorted((ROOT / "policies").glob("*.yaml"))} | {"clamp": CLAMP_POLICY}
SERVERS = ("summarizer", "image-describer", "mail")
HINTS = (None, "gpt-4o", "gpt-4o-mini", "claude", "fast", "qwen", "sonnet")
MAX_TOKENS = (100, 1500, 2500, 6000, 800)
PRIORITIES = (None, {"intelligencePriority": 1.0}, {"costPriority": 1.0, "speedPriority": 0.5})
IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


def requests() -> list[tuple[str, dict[str, Any]]]:
    """50 (server, params) pairs, spread over every value above."""
    table = []
    for i in range(50):
        text = "summarise these notes" if i % 7 else "the password is hunter2, summarise"
        content: Any = (
            [{"type": "text", "text": f"{text} #{i}"}, IMAGE]
            if i % 5 == 2
            else {"type": "text", "text": f"{text} #{i}"}
        )
        params: dict[str, Any] = {
            "messages": [{"role": "user", "content": content}],
            "maxTokens": MAX_TOKENS[i % len(MAX_TOKENS)],
        }
        preferences: dict[str, Any] = {}
        if HINTS[i % len(HINTS)]:
            preferences["hints"] = [{"name": HINTS[i % len(HINTS)]}]
        if priorities := PRIORITIES[i % len(PRIORITIES)]:
            preferences.update(priorities)
        if preferences:
            params["modelPreferences"] = preferences
        table.append((SERVERS[(i // 2) % len(SERVERS)], params))
    return table


def policy_for_test(text: str, tmp_path: Path, llms: dict[str, FakeLLMServer]) -> Path:
    """The policy with its providers pointed at the loopback LLMs and an audit log."""
    data = yaml.safe_load(text) or {}
    for provider in (data.get("llm") or {}).get("providers", {}).values():
        provider["base_url"] = llms[provider["type"]].base_url
    data["audit"] = {"path": str(tmp_path / "audit.jsonl"), "content": "none"}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def explained(policy: Path, env: dict[str, str], server: str, params: dict[str, Any]) -> dict[str, Any]:
    """What `policy explain` prints for the request, read back from its lines."""
    settings = load_settings(str(policy), environ={})
    if not settings.providers:
        settings.providers = settings_from_environment(env).providers
    lines = explain(settings, params, Origin(server, "mcp", ("sample_raw",)))
    out: dict[str, Any] = {"max_tokens": None, "model": None}
    for line in lines:
        if m := re.match(r"rule '(.+)' \(line \d+\): MATCHES -> (\w+)", line):
            out["rule"], out["action"] = m.groups()
        elif line == "no rule matched -> prompt (default)":
            out["rule"], out["action"] = "default", "prompt"
        elif m := re.match(r"  provider/model: ([\w.-]+)/([\w.-]+): ", line):
            out["model"] = m.groups()
        elif m := re.match(r"  the request goes on with maxTokens [\d,]+ lowered to ([\d,]+)", line):
            out["max_tokens"] = int(m.group(1).replace(",", ""))
    if out["action"] != "allow":
        out["model"] = None
    elif out["max_tokens"] is None:
        out["max_tokens"] = params["maxTokens"]
    return out

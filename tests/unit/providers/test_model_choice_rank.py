"""Model choice ranks matches per hint: exact > alias > prefix > substring, priorities break ties.

Issue #11 defect 7: an exact hint (`gpt-4o`) used to lose to a substring hit (`gpt-4o-mini`), the
request's priorities were ignored among several hint matches, and `policy explain` said only
"chosen from the request's model preferences".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.support import write_policy

from mcp_sampling_proxy.commands.cli import main
from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.protocol.sampling_request import ModelPreferences
from mcp_sampling_proxy.providers.model_choice import choose_model

OPENAI = ProviderConfig(
    name="openai",
    type="openai",
    models=(
        ModelSpec("gpt-4o-mini", cost=0.9, speed=0.9, intelligence=0.4),
        ModelSpec("gpt-4o", cost=0.3, speed=0.5, intelligence=0.8),
        ModelSpec("o3-mini"),
    ),
)
ANTHROPIC = ProviderConfig(
    name="anthropic",
    type="anthropic",
    models=(
        ModelSpec("claude-sonnet-4-5", cost=0.3, intelligence=0.9),
        ModelSpec("claude-haiku-4-5", cost=0.9, speed=0.9, intelligence=0.5),
    ),
)
ROUTER = ProviderConfig(name="router", type="openai", models=(ModelSpec("meta/llama-3.3-70b"),))
ALL = [OPENAI, ANTHROPIC, ROUTER]
ALIASES = {"claude-3-opus": "gpt-4o", "gpt": "claude-haiku-4-5"}


def prefs(*names: str, **priorities: float) -> ModelPreferences | None:
    """A request's preferences as the proxy reads them off the wire (names: costPriority, ...)."""
    wire: Any = {"hints": [{"name": n} for n in names], **priorities}  # as it comes off the wire
    return ModelPreferences.from_wire(wire)


CASES = [
    # (hints, priorities, expected model, words the reason must contain)
    (("gpt-4o",), {}, "gpt-4o", ["hint 'gpt-4o' matched exactly 'openai/gpt-4o'"]),
    (("GPT-4O",), {}, "gpt-4o", ["matched exactly 'openai/gpt-4o'"]),
    # a prefix beats a substring: 'claude' is a prefix of both Anthropic models ...
    (("claude",), {}, "claude-sonnet-4-5", ["matched by prefix", "2 models", "configured order"]),
    # ... and priorities pick among them
    (("claude",), {"costPriority": 1.0}, "claude-haiku-4-5", ["matched by prefix", "best score 0.90"]),
    (("claude",), {"intelligencePriority": 1.0}, "claude-sonnet-4-5", ["best score 0.90"]),
    (("4o",), {"speedPriority": 1.0}, "gpt-4o-mini", ["as a substring", "best score 0.90"]),
    (("4o",), {"intelligencePriority": 1.0}, "gpt-4o", ["as a substring", "best score 0.80"]),
    # the part after the last '/' counts as the model's own name (OpenRouter style)
    (("llama-3.3-70b",), {}, "meta/llama-3.3-70b", ["matched exactly 'router/meta/llama-3.3-70b'"]),
    # an alias maps a hint to another provider's model (the spec's "equivalent models")
    (("claude-3-opus",), {}, "gpt-4o", ["hint 'claude-3-opus' is an alias for 'openai/gpt-4o'"]),
    # an alias beats prefix hits of the same hint: 'gpt' prefixes gpt-4o-mini and gpt-4o
    (("gpt",), {}, "claude-haiku-4-5", ["hint 'gpt' is an alias for 'anthropic/claude-haiku-4-5'"]),
    # hints stay in the server's order: any match for the first beats an exact match for the second
    (("sonnet", "gpt-4o"), {}, "claude-sonnet-4-5", ["as a substring"]),
    (("gemini", "o3"), {}, "o3-mini", ["hint 'gemini' matched no model; hint 'o3' matched by prefix"]),
    (("gemini",), {}, "gpt-4o-mini", ["hint 'gemini' matched no model; default model of provider 'openai'"]),
    # no hint: every model competes on the priorities (haiku 0.9 + 0.05 beats mini 0.9 + 0.04)
    ((), {"costPriority": 1.0, "intelligencePriority": 0.1}, "claude-haiku-4-5", ["best score 0.95"]),
]


@pytest.mark.parametrize(("names", "priorities", "model", "reason_parts"), CASES)
def test_ranking(names: tuple[str, ...], priorities: dict[str, float], model: str, reason_parts: list[str]) -> None:
    choice = choose_model(ALL, prefs(*names, **priorities), aliases=ALIASES)
    assert choice.model == model, choice.reason
    for part in reason_parts:
        assert part in choice.reason


POLICY = """
llm:
  providers:
    openai:
      type: openai
      base_url: {base_url}
      api_key_env: TEST_LLM_KEY
      models: [gpt-4o-mini, {{name: gpt-4o, intelligence: 0.9}}, {{name: gpt-4o-2024-08-06, intelligence: 0.5}}]
rules:
  - name: all
    action: allow
"""


def test_explain_names_the_model_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write_policy(tmp_path, POLICY.format(base_url="http://127.0.0.1:9/v1"))
    request = tmp_path / "req.json"
    request.write_text(
        json.dumps(
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10,
                "modelPreferences": {"hints": [{"name": "gpt-4o"}]},
            }
        )
    )
    assert main(["policy", "explain", policy, "--request", str(request)]) == 0
    out = capsys.readouterr().out
    assert "provider/model: openai/gpt-4o: hint 'gpt-4o' matched exactly 'openai/gpt-4o'" in out


@pytest.mark.anyio
async def test_through_the_proxy_the_llm_is_asked_for_the_exact_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm: FakeLLMServer
) -> None:
    """The proxy's real relay and services (played in memory, tests/helpers/playbook.py) ask the LLM."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def hinted(prompt: str, hint: str) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": 100,
            "modelPreferences": {"hints": [{"name": hint}]},
        }

    async with Playbook(tmp_path, POLICY.format(base_url=llm.base_url)) as play:
        await play.handshake()
        exact = (await play.sample(hinted("a", "gpt-4o")))["result"]
        prefix = (await play.sample(hinted("b", "gpt-4o-2")))["result"]
    assert [r.body["model"] for r in llm.requests] == ["gpt-4o", "gpt-4o-2024-08-06"]
    assert exact["model"] == "gpt-4o" and prefix["model"] == "gpt-4o-2024-08-06"

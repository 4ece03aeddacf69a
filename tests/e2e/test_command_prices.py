"""A command provider under a usd budget, through the real proxy and a stand-in of the `claude` CLI: its
spending is not priced from the shipped table (the CLI may draw on a plan or a credit pool), so it is
refused until the policy prices its model, and then its cost is counted from the usage the CLI reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.cli_standins import install, path_with, runs
from helpers.support import proxy_command, proxy_env, sdk_host, tool_json, write_policy

pytestmark = pytest.mark.anyio
CLAUDE = "llm:\n  providers:\n    claude:\n      type: command\n      preset: claude\n      models: [sonnet]\n"
PAID = "rules:\n  - name: paid\n    action: allow\n    budget: {usd: 1, per: 1d}\naudit:\n  path: audit.jsonl\n"


async def sample(tmp_path: Path, policy_text: str) -> Any:
    bin_dir = install(tmp_path / "bin")
    environment = proxy_env(
        PATH=path_with(bin_dir),
        STANDIN_LOG=str(tmp_path / "runs.jsonl"),
        STANDIN_ANSWER="Paris.",
        MCP_SAMPLING_PROXY_STATE_DIR=str(tmp_path / "state"),
    )
    policy = write_policy(tmp_path, policy_text)
    async with sdk_host(proxy_command(policy), environment, tmp_path / "stderr.log") as client:
        return tool_json(await client.call_tool("sample", {"prompt": "Capital of France?"}))


def records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


async def test_a_command_provider_is_unpriced_under_a_usd_budget(tmp_path: Path) -> None:
    result = await sample(tmp_path, CLAUDE + PAID)
    message = result["error"]["message"]
    assert "usd budget of rule 'paid' cannot count this request: provider 'claude' runs a command" in message
    assert "prices: {sonnet: {input:" in message
    assert not (tmp_path / "runs.jsonl").exists()  # the CLI never ran


async def test_a_command_provider_priced_by_the_policy_is_served_and_its_cost_recorded(tmp_path: Path) -> None:
    result = await sample(tmp_path, CLAUDE + PAID + "prices:\n  sonnet: {input: 3, output: 15}\n")
    assert result["content"]["text"] == "Paris."
    assert len(runs(tmp_path / "runs.jsonl")) == 1
    (record,) = records(tmp_path)
    # the stand-in reports 3 input and 6 output tokens: 3 x $3 + 6 x $15 per million
    assert (record["input_tokens"], record["output_tokens"]) == (3, 6)
    assert (record["cost_usd"], record["price_as_of"]) == (0.000099, "policy")

"""`audit summary` counts the tools: section's decisions apart from the server's requests, and what
the sampling checks refused (unsolicited, max_per_call, external checks, credentials)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.governance_log import write_governance_log
from helpers.support import run_subcommand


def summary(path: Path, *args: str) -> str:
    done = run_subcommand(["audit", "summary", *args, str(path)], check=True)
    return done.stdout


def test_tool_decisions_and_sampling_checks_in_the_json_summary(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_governance_log(path)
    data = json.loads(summary(path, "--json"))
    notes = data["servers"]["notes"]
    # five sampling requests, each counted once: the host's tool calls (whose ids are the same
    # numbers) neither count as requests nor replace a request's outcome
    assert (notes["requests"], notes["allowed"], notes["denied"], notes["errors"]) == (5, 1, 4, 0)
    assert (notes["input_tokens"], notes["output_tokens"]) == (12, 8)
    assert notes["tools"] == {"calls_allowed": 2, "calls_denied": 1, "calls_held": 1, "hidden": 1, "changes": 1}
    assert notes["refused"] == {"unsolicited": 1, "max_per_call": 1, "checks": 1, "secrets": 1}
    assert notes["secrets_found"] == 2
    assert data["total"]["tools"] == notes["tools"]
    assert data["total"]["refused"] == notes["refused"]


def test_the_text_summary_shows_them_in_tables_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_governance_log(path)
    assert summary(path).splitlines() == [
        "server  requests  allowed  denied  errors  tokens in  tokens out  p50 latency",
        "notes          5        1       4       0         12           8        40 ms",
        "total          5        1       4       0         12           8        40 ms",
        "",
        "server  tool calls allowed  denied  held  tools hidden  tool changes",
        "notes                    2       1     1             1             1",
        "total                    2       1     1             1             1",
        "",
        "server  refused unsolicited  over max_per_call  by checks  for secrets  secrets found",
        "notes                     1                  1          1            1              2",
        "total                     1                  1          1            1              2",
    ]

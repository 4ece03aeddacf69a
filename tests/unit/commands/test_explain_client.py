"""`policy explain --client NAME`: the caller's name under `serve`, for `client:` rules."""

from __future__ import annotations

from pathlib import Path

from helpers.support import run_subcommand, write_policy

POLICY = """\
llm:
  providers:
    openai:
      type: openai
      models: [gpt-4o-mini]
rules:
  - name: alice
    when: {client: alice}
    action: allow
    budget: {tokens: 100000, per: 1d}
  - name: everyone-else
    action: deny
    message: ask for a token of your own
"""


def explain(tmp_path: Path, *args: str) -> list[str]:
    policy = write_policy(tmp_path, POLICY)
    result = run_subcommand(["policy", "explain", policy, "--prompt", "hi", "--server", "notes", *args])
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_named_client_matches_its_rule_and_the_reason_says_so(tmp_path: Path) -> None:
    lines = explain(tmp_path, "--client", "alice")
    assert lines[1].startswith("request: sampling from server 'notes', host '' (no --host given), client 'alice',")
    assert lines[3:5] == ["rule 'alice' (line 7): MATCHES -> allow", "  because client 'alice' matches 'alice'"]
    assert "  budget: 100000 tokens per 1d" in lines


def test_another_client_falls_through_to_the_deny(tmp_path: Path) -> None:
    lines = explain(tmp_path, "--client", "bob")
    assert lines[3:7] == [
        "rule 'alice' (line 7): skipped: client 'bob' does not match 'alice'",
        "rule 'everyone-else' (line 11): MATCHES -> deny",
        "  because the rule has no conditions",
        "  the server is told: ask for a token of your own",
    ]


def test_without_client_it_is_explained_as_over_stdio(tmp_path: Path) -> None:
    lines = explain(tmp_path)
    assert "client" not in lines[1]
    assert lines[3] == (
        "rule 'alice' (line 7): skipped: no client name (only `serve` with bearer tokens names its caller), "
        "so client does not match 'alice'"
    )

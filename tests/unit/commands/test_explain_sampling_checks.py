"""`policy explain` shows the `sampling:` checks a sampling request meets, whatever rule matches."""

from __future__ import annotations

from pathlib import Path

from helpers.support import run_subcommand, write_policy

CHECKS = """\
sampling:
  allow_unsolicited: [notes-*]
  max_per_call: 5
  on_secret: deny
  scan_requests: true
rules:
  - name: everyone
    action: allow
"""


def explain(tmp_path: Path, policy: str, *args: str) -> list[str]:
    done = run_subcommand(["policy", "explain", write_policy(tmp_path, policy), "--prompt", "hi", *args], check=True)
    lines = done.stdout.splitlines()
    return lines[lines.index("sampling checks (the sampling: section, whatever rule matches):") :]


def test_the_policys_checks_for_a_server_allowed_to_sample_unasked(tmp_path: Path) -> None:
    assert explain(tmp_path, CHECKS, "--server", "notes-app") == [
        "sampling checks (the sampling: section, whatever rule matches):",
        "  max_per_call: 5 sampling requests per host request; past it: refused",
        "  allow_unsolicited: notes-*: server 'notes-app' may sample with no host request in flight "
        "(audited as unsolicited)",
        "  on_secret: deny: an LLM answer holding credentials is withheld and the server gets an error",
        "  scan_requests: true: the server's request is scanned too, before any LLM or human sees it (deny)",
    ]


def test_a_server_the_globs_do_not_name_is_refused_when_unasked(tmp_path: Path) -> None:
    lines = explain(tmp_path, CHECKS, "--server", "mail")
    assert lines[2] == (
        "  allow_unsolicited: notes-*: refused for server 'mail' when no host request is in flight "
        "(reason: unsolicited); inside any host request it goes on"
    )


def test_the_defaults_inside_a_tool_call(tmp_path: Path) -> None:
    lines = explain(tmp_path, "rules:\n  - name: everyone\n    action: allow\n", "--server", "mail", "--tool", "send")
    assert lines[1:] == [
        "  max_per_call: 25 sampling requests per host request; past it: refused",
        "  allow_unsolicited: false: not needed, the request comes inside a host tool call",
        "  on_secret: redact: credentials in the LLM's answer are masked before the server gets it",
        "  scan_requests: false: the server's request is not scanned for credentials",
    ]

"""The `checks:` section and a rule's `check:` through `mcp-sampling-proxy policy check` and `policy explain`:
each mistake named at FILE:LINE:COL with what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import CommandRun, run_subcommand, write_policy


def run(*args: str) -> CommandRun:
    return run_subcommand(list(args))  # in process, as the command line runs it


def with_check(entry: str, rule: str = "    check: [scan]\n    action: allow\n") -> str:
    return f"checks:\n  scan:\n{entry}rules:\n  - name: checked\n{rule}"


@pytest.mark.parametrize(
    ("entry", "mistake"),
    [
        (
            "    url: http://checks.example/hook\n",
            "3:10: checks.scan.url 'http://checks.example/hook' is http:// to checks.example, which is not "
            "loopback: the request and the verdict would travel unencrypted; use https://, or http:// to "
            "127.0.0.1, ::1 or localhost",
        ),
        (
            "    url: https://user:pw@checks.example/hook\n",
            "3:10: checks.scan.url holds a user name or password",
        ),
        ("    url: ftp://checks.example/hook\n", "3:10: checks.scan.url must be an https://HOST/PATH URL"),
        ("    command: /usr/local/bin/pii-scan --json\n", "3:14: checks.scan.command must be a list"),
        (
            "    command: [scan]\n    url: https://checks.example/\n",
            "3:5: checks.scan needs exactly one of command: [PROGRAM, ARG, ...] (a local validator) or url:",
        ),
        ("    command: [scan]\n    headers: {X-Token: abc}\n", "4:14: checks.scan.headers applies to url: checks only"),
        ("    url: https://c.example/\n    headers: {X-Token: '${1X}'}\n", "4:24: checks.scan.headers.X-Token has a"),
        (
            "    command: [scan]\n    stage: after\n",
            "4:12: checks.scan.stage 'after' is not one of request, answer, both",
        ),
        (
            "    command: [scan]\n    on_error: ignore\n",
            "4:15: checks.scan.on_error 'ignore' is not one of deny, allow",
        ),
        ("    command: [scan]\n    timeout: 1h\n", "4:14: checks.scan.timeout must be at most 10m"),
    ],
)
def test_a_bad_check_is_named_where_it_is(tmp_path: Path, entry: str, mistake: str) -> None:
    policy = write_policy(tmp_path, with_check(entry))
    done = run("policy", "check", policy)
    assert done.returncode == 1
    assert done.stderr.startswith(f"{policy}:{mistake}")


@pytest.mark.parametrize(
    ("rule", "mistake"),
    [
        (
            "    check: [scna]\n    action: allow\n",
            "6:13: rules[0].check[0] 'scna' is not a check (did you mean 'scan'?)",
        ),
        ("    check: scan\n    action: deny\n", "6:12: rules[0].check: a rule with action: deny refuses the request"),
        ("    check: [scan, scan]\n    action: allow\n", "6:12: rules[0].check names a check twice"),
    ],
)
def test_a_rule_names_defined_checks_only(tmp_path: Path, rule: str, mistake: str) -> None:
    policy = write_policy(tmp_path, with_check("    command: [scan]\n", rule))
    done = run("policy", "check", policy)
    assert done.returncode == 1
    assert done.stderr.startswith(f"{policy}:{mistake}")


def test_loopback_http_and_https_are_taken_and_explain_lists_the_checks(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path,
        "checks:\n"
        "  local:\n    url: http://127.0.0.1:8080/check\n    stage: both\n    on_error: allow\n"
        "  remote:\n    url: https://checks.example/hook\n    timeout: 2s\n"
        "    headers: {Authorization: 'Bearer ${CHECK_TOKEN}'}\n"
        "  scan:\n    command: [/usr/local/bin/pii-scan, --json]\n"
        "rules:\n  - name: checked\n    check: [scan, local, remote]\n    action: prompt\n",
    )
    assert run("policy", "check", policy).returncode == 0
    done = run("policy", "explain", policy, "--prompt", "hello", "--server", "notes")
    assert done.returncode == 0, done.stderr
    assert (
        "checks, in order (a failed check denies unless its on_error is allow):\n"
        "  scan: command /usr/local/bin/pii-scan --json (stage: request, timeout: 5s, on_error: deny)\n"
        "  local: POST http://127.0.0.1:8080/check (stage: both, timeout: 5s, on_error: allow)\n"
        "  remote: POST https://checks.example/hook (stage: request, timeout: 2s, on_error: deny)\n"
    ) in done.stdout

"""`mcp-sampling-proxy policy check` and the proxy's start name every mistake of a policy in one run."""

from __future__ import annotations

from pathlib import Path

from helpers.support import THREE_TYPOS, CommandRun, run_subcommand, write_policy


def run(*args: str) -> CommandRun:
    return run_subcommand([*args])


def test_check_reports_every_mistake_in_one_run(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, THREE_TYPOS)
    done = run("policy", "check", policy)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines == [
        f"{policy}:2:3: unknown key 'rout' in sampling (did you mean 'route'?); allowed: route, "
        "fallback_on_host_error, tools, max_concurrent, max_queued, keepalive_seconds, allow_unsolicited, "
        "max_per_call, on_secret, scan_requests",
        f"{policy}:5:5: unknown key 'acton' in rules[0] (did you mean 'action'?); allowed: name, when, action, "
        "message, rate_limit, budget, limits, provider, model, check",
        f"{policy}:7:13: rules[1].action 'allwo' is not one of allow, deny, prompt (did you mean 'allow'?)",
        f"{policy}:11:24: rules[2].when.max_tokens_over must be a whole number, got 'lots'",
        f"{policy}: 4 mistakes; fix them all, then check again",
    ]
    # the misspelt `action` is said once, not again as "rule 1 needs an action"
    assert "needs an action" not in done.stderr


def test_check_goes_on_to_the_next_file_and_names_each(tmp_path: Path) -> None:
    good = write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n", "good.yaml")
    bad = write_policy(tmp_path, "limits:\n  max_messages: 0\napproval:\n  timeout: soon\n", "bad.yaml")
    done = run("policy", "check", bad, good)
    assert done.returncode == 1
    assert f"{bad}:2:17: limits.max_messages must be at least 1, got 0" in done.stderr
    assert f"{bad}:4:12: approval.timeout must be a duration" in done.stderr
    assert f"{good}: ok (1 rules" in done.stdout


def test_a_missing_action_is_still_reported(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path, "rules:\n  - name: a\n  - name: b\n    action: deny\n  - name: a\n    action: allow\n"
    )
    done = run("policy", "check", policy)
    assert done.returncode == 1
    assert f"{policy}:2:5: rule 1 needs an action: one of allow, deny, prompt" in done.stderr
    assert f"{policy}:5:11: rule name 'a' is already used by the rule at line 2" in done.stderr

"""The `sampling:` keys of the sampling checks: defaults, each form, and mistakes at their position."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.config.sampling_checks import SamplingChecks
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError


def checks(text: str) -> SamplingChecks:
    return parse_settings(text, "policy.yaml").sampling.checks


def error_of(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_settings(text, "policy.yaml")
    return str(info.value)


def test_defaults_refuse_unsolicited_cap_at_25_and_redact() -> None:
    default = checks("sampling:\n  route: proxy\n")
    assert default == SamplingChecks(allow_unsolicited=False, max_per_call=25, on_secret="redact", scan_requests=False)
    assert not default.unsolicited_allowed("anything")


def test_every_key_is_read() -> None:
    given = checks(
        "sampling:\n  allow_unsolicited: true\n  max_per_call: 3\n  on_secret: deny\n  scan_requests: true\n"
    )
    assert given == SamplingChecks(allow_unsolicited=True, max_per_call=3, on_secret="deny", scan_requests=True)
    assert given.unsolicited_allowed("anything")


def test_allow_unsolicited_names_servers_by_glob_as_rules_do() -> None:
    given = checks("sampling:\n  allow_unsolicited: [notes-*, Summarizer]\n")
    assert given.unsolicited_allowed("notes-local")
    assert given.unsolicited_allowed("summarizer")  # compared as server: rules compare names
    assert not given.unsolicited_allowed("mailer")
    assert checks("sampling:\n  allow_unsolicited: mailer\n").unsolicited_allowed("mailer")


def test_mistakes_name_their_position_and_what_is_allowed() -> None:
    assert "policy.yaml:2:14: sampling.on_secret 'mask' is not one of redact, deny, allow" in error_of(
        "sampling:\n  on_secret: mask\n"
    )
    assert "policy.yaml:2:17: sampling.max_per_call must be at least 1, got 0" in error_of(
        "sampling:\n  max_per_call: 0\n"
    )
    message = error_of("sampling:\n  allow_unsolicited: [3]\n")
    assert "policy.yaml:2:23:" in message and "true, false, or server globs" in message
    assert "needs true, false, or at least one server glob" in error_of("sampling:\n  allow_unsolicited: []\n")
    assert "invisible character" in error_of('sampling:\n  allow_unsolicited: ["mail\\u200ber"]\n')

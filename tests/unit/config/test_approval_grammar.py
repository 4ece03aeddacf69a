"""`approval.webhook` and `approval.quorum` mistakes, each named with its position and what to do."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError

HOOK = "  webhook: {url: 'https://a.example/h', secret_env: H}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("approval:\n  quorum: 0\n", "policy.yaml:2:11: approval.quorum must be at least 1, got 0"),
        ("approval:\n  quorum: 11\n", "policy.yaml:2:11: approval.quorum must be at most 10 different approvers"),
        (
            "approval:\n  quorum: 3\n  channels: [terminal, host]\n",
            "policy.yaml:2:11: approval.quorum is 3, but the channels terminal, host can bring at most 2 "
            "different approvers: add console",
        ),
        ("approval:\n  webhook: {secret_env: H}\n", "policy.yaml:2:12: approval.webhook needs url: https://"),
        (
            "approval:\n  webhook: {url: 'https://a.example/h'}\n",
            "approval.webhook needs exactly one of secret_env: VARIABLE",
        ),
        (
            "approval:\n  webhook: {url: 'https://a.example/h', secret_env: H, secret_file: f}\n",
            "approval.webhook needs exactly one of secret_env",
        ),
        (
            "approval:\n  webhook: {url: 'ftp://a.example/h', secret_env: H}\n",
            "approval.webhook.url must be an https:// URL, got 'ftp://a.example/h'",
        ),
        (
            "approval:\n  webhook: {url: 'https://u:p@a.example/h', secret_env: H}\n",
            "approval.webhook.url holds a user name or password",
        ),
        ("approval:\n" + HOOK.replace("}", ", timeout: 0}"), "approval.webhook.timeout must be longer than 0"),
    ],
)
def test_mistakes_are_named(text: str, expected: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_settings(text, "policy.yaml")
    assert expected in str(refused.value)


def test_a_quorum_a_console_can_meet_is_accepted() -> None:
    settings = parse_settings("approval:\n  quorum: 5\n  channels: [terminal, console]\n", "policy.yaml")
    assert settings.approval.quorum == 5


def test_the_secrets_variable_is_withheld_from_the_server() -> None:
    settings = parse_settings("approval:\n" + HOOK, "policy.yaml")
    assert "H" in settings.secret_env_vars()

"""The approval channels by name (approval/registry.py): the policy can name exactly the channels the
registry makes, and the proxy asks them in the policy's order."""

from __future__ import annotations

import importlib.util

import pytest

from mcp_sampling_proxy.approval.console.server import ConsoleServer
from mcp_sampling_proxy.approval.registry import CHANNEL_NAMES, ChannelNeeds, build_channels
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError


@pytest.mark.parametrize("name", CHANNEL_NAMES)
def test_the_policy_can_name_each_channel_the_registry_makes(name: str) -> None:
    section = "  webhook: {url: 'https://approvals.example/hook', secret_env: HOOK}\n" if name == "webhook" else ""
    settings = parse_settings(f"approval:\n  channels: [{name}]\n{section}", "policy.yaml")
    assert settings.approval.channels == (name,)
    needs = ChannelNeeds(None, ConsoleServer(str, str), settings.approval.webhook)
    made = build_channels(settings.approval.channels, needs)
    assert [channel.name for channel in made] == [name]


def test_a_channel_the_registry_does_not_make_is_refused_with_the_ones_it_does() -> None:
    with pytest.raises(PolicyError) as refused:
        parse_settings("approval:\n  channels: [terminal, pager]\n", "policy.yaml")
    assert f"'pager' is not one of {', '.join(CHANNEL_NAMES)}" in str(refused.value)


def test_the_channels_are_asked_in_the_policys_order() -> None:
    needs = ChannelNeeds(None, ConsoleServer(str, str))
    made = build_channels(("host", "console", "terminal"), needs)
    assert [channel.name for channel in made] == ["host", "console", "terminal"]


def test_without_a_console_server_the_console_channel_is_left_out() -> None:
    made = build_channels(("console", "host"), ChannelNeeds(None, None))
    assert [channel.name for channel in made] == ["host"]


def test_the_registry_refuses_to_load_when_the_policys_names_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    """config/settings.py (below approval) holds the names the policy may use; a channel added to one
    list and not the other must stop the proxy at start, not be silently unreachable. The registry's
    module is run again here, as a new module beside the loaded one, with a name added to the list."""
    from mcp_sampling_proxy.config import settings

    monkeypatch.setattr(settings, "APPROVAL_CHANNELS", (*settings.APPROVAL_CHANNELS, "pager"))
    spec = importlib.util.find_spec("mcp_sampling_proxy.approval.registry")
    assert spec is not None and spec.loader is not None
    with pytest.raises(ImportError) as refused:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert "APPROVAL_CHANNELS lists ('terminal', 'console', 'host', 'webhook', 'pager')" in str(refused.value)


def test_the_webhook_channel_needs_its_section_and_the_section_needs_the_channel() -> None:
    with pytest.raises(PolicyError) as no_section:
        parse_settings("approval:\n  channels: [terminal, webhook]\n", "policy.yaml")
    assert "approval.channels lists webhook but approval has no webhook: section" in str(no_section.value)
    with pytest.raises(PolicyError) as not_listed:
        parse_settings(
            "approval:\n  channels: [terminal]\n  webhook: {url: 'https://a.example/h', secret_env: H}\n", "policy.yaml"
        )
    assert "approval.channels does not list webhook, but approval.webhook is set" in str(not_listed.value)
    # without a channel list, a webhook section adds the webhook after the default channels
    settings = parse_settings("approval:\n  webhook: {url: 'https://a.example/h', secret_file: s.txt}\n", "/p/x.yaml")
    assert settings.approval.channels == ("terminal", "console", "host", "webhook")
    assert settings.approval.webhook is not None and settings.approval.webhook.secret_file == "/p/s.txt"
    assert "/p/s.txt" in settings.named_files()  # hidden from a sandboxed server like the audit log

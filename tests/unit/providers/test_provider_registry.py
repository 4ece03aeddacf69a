"""The table of provider types (config/providers.py KINDS) and the adapters (providers/registry.py) agree:
a type the policy accepts always has an adapter, and what the table says of it holds for the policy."""

from __future__ import annotations

import anyio
import pytest

from mcp_sampling_proxy.config.providers import KINDS, PROVIDER_TYPES
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.providers.registry import FACTORIES, make_adapter


def test_every_type_the_policy_accepts_has_an_adapter() -> None:
    assert set(FACTORIES) == set(KINDS) == set(PROVIDER_TYPES)


@pytest.mark.parametrize("kind", list(KINDS.values()), ids=list(KINDS))
def test_a_policy_entry_of_each_type_makes_its_adapter(kind: object) -> None:
    from mcp_sampling_proxy.config.providers import ProviderKind

    assert isinstance(kind, ProviderKind)
    entry = f"    p:\n      type: {kind.name}\n"
    if kind.runs_command:
        entry += "      preset: llm\n"
    if not kind.default_models:
        with pytest.raises(PolicyError, match="needs models"):
            parse_settings(f"llm:\n  providers:\n{entry}", "policy.yaml")
        entry += "      models: [m]\n"
    if kind.http:
        entry += "      api_key_env: TEST_LLM_KEY\n"
    (provider,) = parse_settings(f"llm:\n  providers:\n{entry}", "policy.yaml").providers
    assert provider.kind is kind
    assert [m.name for m in provider.models] == list(kind.default_models or ("m",))
    adapter = make_adapter(provider)
    try:
        assert adapter.config is provider
        assert adapter.supports_tools is (kind.no_tools is None)
    finally:
        anyio.run(adapter.aclose)

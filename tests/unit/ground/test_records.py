"""Every proxy start creates every record class it imports. A stdlib dataclass compiles its methods when it is
created (about 1 ms of CPU each on the development machine); a `msgspec.Struct` is made in C. So the package's
records are Structs, and a dataclass is kept only where a field must stay out of `repr` or `==`
(CONTRIBUTING.md, Conventions)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

import msgspec

import mcp_sampling_proxy

# each keeps a secret (or the rule that matched) out of repr or ==, which a Struct's fields cannot say
DATACLASSES_ALLOWED = {
    "mcp_sampling_proxy.config.providers.ProviderConfig",  # api_key: no repr, not compared
    "mcp_sampling_proxy.policy.engine.Decision",  # matched, tool: not compared (tests compare decisions)
    "mcp_sampling_proxy.front.oauth_settings.ClientCredentials",  # client_secret: no repr
    "mcp_sampling_proxy.commands.init.StoredKey",  # value: the key, no repr
}


def _package_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module_info in pkgutil.walk_packages(mcp_sampling_proxy.__path__, "mcp_sampling_proxy."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = value
    return found


def test_records_are_structs_and_dataclasses_only_where_a_field_must_hide() -> None:
    classes = _package_classes()
    dataclass_names = {name for name, cls in classes.items() if dataclasses.is_dataclass(cls)}
    assert dataclass_names == DATACLASSES_ALLOWED, (
        f"stdlib dataclasses in the package: {sorted(dataclass_names - DATACLASSES_ALLOWED)} "
        f"(make them msgspec.Struct, see CONTRIBUTING.md); no longer dataclasses: "
        f"{sorted(DATACLASSES_ALLOWED - dataclass_names)}"
    )
    assert sum(issubclass(cls, msgspec.Struct) for cls in classes.values()) > 100


def test_a_key_kept_by_a_record_is_not_in_its_repr() -> None:
    from mcp_sampling_proxy.commands.init import StoredKey
    from mcp_sampling_proxy.config.providers import ProviderConfig
    from mcp_sampling_proxy.front.oauth_settings import ClientCredentials

    secret = "sk-never-printed-0123456789"
    shown = [
        repr(ProviderConfig(name="p", type="openai", api_key=secret)),
        repr(ClientCredentials(client_id="c", client_secret=secret)),
        repr(StoredKey(path=Path("k"), value=secret, write=True, source="s")),
    ]
    assert all(secret not in text for text in shown), shown

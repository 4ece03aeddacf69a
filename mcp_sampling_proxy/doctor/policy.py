"""doctor's first section: the policy file, loaded exactly as the proxy loads it."""

from __future__ import annotations

from typing import Any

from mcp_sampling_proxy.config.settings import load_settings
from mcp_sampling_proxy.doctor.checklist import Section
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.text.sanitize import one_line


def check_policy(path: str | None) -> tuple[Any, Section]:
    section = Section("policy")
    try:
        settings = load_settings(path)
    except PolicyError as exc:
        section.add(
            "fail",
            one_line(str(exc), 400),
            "fix the file at that line; `mcp-sampling-proxy policy check FILE` checks it again",
        )
        return None, section
    if path is None:
        section.add("info", "no --policy: providers come from the environment and every request needs approval")
    else:
        rules = len(settings.rules)
        providers = ", ".join(p.name for p in settings.providers) or "from the environment"
        section.add("ok", f"{path}: valid ({rules} rule{'s' if rules != 1 else ''}; providers: {providers})")
    return settings, section

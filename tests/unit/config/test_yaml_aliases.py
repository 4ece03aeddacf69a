"""Aliases in a policy file: shared values work, an alias bomb is refused before it is walked."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError


def test_yaml_aliases_that_multiply_the_policy_are_refused() -> None:
    """A "billion laughs" policy (nine levels of nine aliases: 387 million values in 600 bytes) used to
    grow the proxy to 2.1 GB before it was killed; it is refused at once, naming where the aliases start.
    A few aliases of ordinary size still work."""
    import resource

    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    text = "\n".join(lines) + "\nrules:\n  - name: x\n    action: allow\n    when: {server: *a9}\n"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(PolicyError) as refused:
        parse_settings(text, "policy.yaml")
    assert str(refused.value).startswith("policy.yaml:1:5: YAML aliases expand this document past 100,000 values")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: no expansion happened
    shared = (
        "rules:\n  - name: a\n    action: allow\n    when: &ours {server: notes}\n"
        "  - name: b\n    action: deny\n    when: *ours\n"
    )
    assert [rule.name for rule in parse_settings(shared, "policy.yaml").rules] == ["a", "b"]

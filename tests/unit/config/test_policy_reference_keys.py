"""The policy reference's governance sections and the grammar name the same keys.

Every YAML example in those sections passes `policy check` (the grammar refuses a key it does not
know, so a documented key the code does not parse fails here), every key a table or the text names
is one the grammar takes, and every key the grammar takes in those sections is documented.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.support import ROOT, run_subcommand

from mcp_sampling_proxy.config.approval_grammar import WEBHOOK_KEYS
from mcp_sampling_proxy.config.auto_answers import AUTO_ANSWER_KEYS
from mcp_sampling_proxy.config.checks import CHECK_KEYS
from mcp_sampling_proxy.config.price_grammar import PRICE_KEYS
from mcp_sampling_proxy.config.sampling_checks import SAMPLING_CHECK_KEYS
from mcp_sampling_proxy.config.tool_settings import RULE_KEYS as TOOL_RULE_KEYS
from mcp_sampling_proxy.config.tool_settings import TOOLS_KEYS

REFERENCE = ROOT / "docs" / "reference" / "policy.md"

# each governance section of the reference, and the keys the grammar takes in it
SECTIONS: dict[str, tuple[str, ...]] = {
    "Approvals off the box": (*(f"approval.webhook.{key}" for key in WEBHOOK_KEYS), "approval.quorum"),
    "Money budgets and prices": ("prices", "budget", "usd", "tokens", "per", *PRICE_KEYS),
    "External checks": ("checks", "check", *CHECK_KEYS),
    "Elicitation auto-answers": ("elicitation.auto_answers", *AUTO_ANSWER_KEYS),
    "Sampling checks": tuple(f"sampling.{key}" for key in SAMPLING_CHECK_KEYS),
    "Tools": ("tools", *TOOLS_KEYS, *(f"rules[].{key}" for key in TOOL_RULE_KEYS if key != "name")),
}


def section(title: str) -> str:
    """The text of the `## TITLE...` section, up to the next `## ` heading."""
    text = REFERENCE.read_text(encoding="utf-8")
    start = re.search(rf"^## {re.escape(title)}.*$", text, flags=re.MULTILINE)
    assert start is not None, f"no section '## {title}' in {REFERENCE}"
    end = re.search(r"^## ", text[start.end() :], flags=re.MULTILINE)
    return text[start.end() : start.end() + end.start()] if end else text[start.end() :]


def yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def documented_keys(text: str) -> set[str]:
    """The keys the section names: a table row's first column, `a.b` paths and `key:` in its text."""
    keys = set()
    for row in re.findall(r"^\| `([^`]+)`", text, flags=re.MULTILINE):
        keys.add(row.split(":", 1)[0].strip())
    keys.update(re.findall(r"`((?:approval|sampling|elicitation|tools)\.[a-z_.]+)(?<!\.json)`", text))
    keys.update(re.findall(r"^\s*-?\s*([a-z_]+):", "\n".join(yaml_blocks(text)), flags=re.MULTILINE))
    return keys


def mentioned(key: str, text: str) -> bool:
    """`key` is named in backticks, as a YAML key of an example, or as a table row."""
    last = key.rsplit(".", 1)[-1]
    return (
        any(f"`{name}`" in text or f"`{name}:" in text for name in (key, last))
        or re.search(rf"(^|[{{,\s]){re.escape(last)}:", "\n".join(yaml_blocks(text)), flags=re.MULTILINE) is not None
    )


def test_every_governance_example_passes_policy_check(tmp_path: Path) -> None:
    files = []
    for title in SECTIONS:
        for n, block in enumerate(yaml_blocks(section(title))):
            path = tmp_path / f"{title.split()[0].lower()}-{n}.yaml"
            path.write_text(block, encoding="utf-8")
            files.append(str(path))
    assert len(files) >= 4  # money, checks, auto-answers, tools
    result = run_subcommand(["policy", "check", *files])
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(files)


@pytest.mark.parametrize("title", SECTIONS)
def test_every_key_the_grammar_takes_is_documented(title: str) -> None:
    text = section(title)
    missing = [key for key in SECTIONS[title] if not mentioned(key, text)]
    assert missing == [], f"'## {title}' in {REFERENCE} does not document {missing}"


@pytest.mark.parametrize("title", SECTIONS)
def test_every_documented_key_is_one_the_grammar_takes(title: str) -> None:
    own = SECTIONS[title]
    # a key, its last part, or a section above it (`approval.webhook` above `approval.webhook.url`)
    accepted = {part for key in own for part in (key, key.rsplit(".", 1)[-1], key.rsplit(".", 1)[0])}
    # the keys an example needs around the section's own (the rule that names a check or a budget),
    # and the keys of other sections the text refers to
    context = {"rules", "name", "when", "server", "action", "tool", "elicitation", "approval", "sampling"}
    context |= {"approval.channels", "approval.timeout"}
    unknown = sorted(
        key
        for key in documented_keys(section(title))
        if key not in accepted and key.removeprefix("rules[].") not in accepted and key not in context
    )
    # a model's name in `prices:` is the operator's, not a key of the grammar
    unknown = [key for key in unknown if not re.fullmatch(r"gpt-[\w.-]+|my-local-model", key)]
    assert unknown == [], f"'## {title}' in {REFERENCE} names keys the policy grammar does not take: {unknown}"

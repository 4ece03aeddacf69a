"""The policy's `tools:` section: read as written, and mistakes named by FILE:LINE:COL."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError


def test_the_section_is_read() -> None:
    settings = parse_settings(
        "tools:\n  on_change: deny\n  rules:\n    - {name: no-rm, server: 'fs*', tool: [rm, 'del*'],"
        " arguments: '/etc', action: prompt}\n",
        "p.yaml",
    )
    assert settings.tools.on_change == "deny" and settings.tools.pin
    (rule,) = settings.tools.rules
    assert (rule.name, rule.servers, rule.tools, rule.action) == ("no-rm", ("fs*",), ("rm", "del*"), "prompt")
    assert rule.arguments is not None and rule.arguments.search('{"path":"/etc/x"}')


def test_the_defaults_ask_and_pin() -> None:
    tools = parse_settings("", "p.yaml").tools
    assert (tools.on_change, tools.pin, tools.rules) == ("ask", True, ())


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("tools:\n  on_change: maybe\n", "p.yaml:2:14"),
        ("tools:\n  rules:\n    - {tool: x}\n", "needs an action"),
        ("tools:\n  rules:\n    - {tool: x, action: deny, arguments: '(['}\n", "not a valid regular expression"),
        ("tools:\n  rules:\n    - {tool: x, action: deny, when: {}}\n", "when"),
    ],
)
def test_mistakes_are_named(text: str, said: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_settings(text, "p.yaml")
    assert said in str(caught.value)


@pytest.mark.parametrize(
    ("path", "asked"),
    [
        ("/home/me/notes.md", False),
        ("/etc/passwd", True),
        ("/home/../etc/passwd", True),  # walked out of /home with ..: the rule used to let it through unasked
        ("/home/me/../../etc/shadow", True),
        ("/home/./../root/.ssh/id_rsa", True),
        ("//etc/passwd", True),
        ("/home/me/./a/../b.txt", False),
    ],
)
def test_path_rules_judge_the_normal_path(path: str, asked: bool) -> None:
    """The docs' rule "ask before writing outside /home" sees each absolute path as the filesystem would
    resolve its dots and doubled slashes, so `..` does not walk around it; the server gets the arguments
    as they were sent."""
    from mcp_sampling_proxy.config.tool_settings import why_not

    rules = parse_settings(
        "tools:\n  rules:\n    - name: ask-outside-home\n      tool: write_file\n"
        '      arguments: \'"path":"/(?!home/)\'\n      action: prompt\n',
        "p.yaml",
    ).tools.rules
    decides = why_not(rules[0], "files", "write_file", {"path": path, "content": "x"}) is None
    assert decides == asked

"""wrap's edit of the user's policy: sandbox profiles added under sandbox.servers, the rest kept as written."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.config.policy_edit import CannotEdit, add_profiles
from mcp_sampling_proxy.config.settings import parse_settings

FS = ("fs", '{write: ["/srv/notes"], network: false}')


def test_a_policy_without_a_sandbox_section_gets_one_at_the_end() -> None:
    edited = add_profiles("# mine\nrules: []\n", [FS])
    assert edited.text == '# mine\nrules: []\n\nsandbox:\n  servers:\n    fs: {write: ["/srv/notes"], network: false}\n'
    assert edited.added == ("fs",) and edited.kept == ()


def test_entries_go_under_servers_at_its_indentation_after_the_last_one() -> None:
    text = (
        "sandbox:\n    write: [/srv]\n    servers:\n        a: {network: false}\n        b:\n          write: [/x]\n"
        "rules: []\n"
    )
    edited = add_profiles(text, [FS, ("a", "{network: true}")])
    assert edited.text == text.replace("rules: []", '        fs: {write: ["/srv/notes"], network: false}\nrules: []')
    assert edited.added == ("fs",) and edited.kept == ("a",)  # the user's own entry for `a` is not replaced
    settings = parse_settings(edited.text, "p.yaml").sandbox
    assert settings.for_server("fs").write == ("/srv", "/srv/notes")  # the section's grants, then its own
    assert settings.for_server("a").network.mode == "none"


def test_a_sandbox_section_without_servers_gets_them_and_keeps_its_comments() -> None:
    text = "sandbox:\n  mode: required  # everywhere\nrules: []\n"
    edited = add_profiles(text, [FS, ("on", "{network: false}")])
    assert edited.text.endswith("  mode: required  # everywhere\nrules: []\n")
    assert '  servers:\n    fs: {write: ["/srv/notes"], network: false}\n    "on": {network: false}\n' in edited.text
    assert parse_settings(edited.text, "p.yaml").sandbox.for_server("on").network.mode == "none"  # not YAML's true


def test_sandbox_off_on_one_line_is_left_alone_with_a_reason() -> None:
    with pytest.raises(CannotEdit, match="sandbox: off"):
        add_profiles("sandbox: off\n", [FS])

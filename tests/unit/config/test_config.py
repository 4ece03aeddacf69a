"""The policy file: every mistake is reported as FILE:LINE:COL with a message that says how to fix it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.support import write_policy

from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.config.settings import (
    DEFAULT_ANTHROPIC_MODEL,
    DEFAULT_OPENAI_MODEL,
    SamplingSettings,
    load_settings,
    parse_settings,
    settings_from_environment,
)
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.policy.conditions import ALWAYS, All, MethodIs, ServerMatches
from mcp_sampling_proxy.policy.rules import Rule

F = "policy.yaml"

ONE_PROVIDER = "llm:\n  providers:\n    p:\n      type: openai\n      models: [m]\n"


def error_of(text: str, where: str = F) -> str:
    with pytest.raises(PolicyError) as info:
        parse_settings(text, where)
    return str(info.value)


# -- mistakes, each with its exact position --------------------------------------------------------


def test_action_typo_names_choices_and_suggests_the_fix() -> None:
    message = error_of("rules:\n  - name: r\n    action: alow\n")
    assert message.startswith("policy.yaml:3:13: ")
    assert "'alow' is not one of allow, deny, prompt" in message
    assert "did you mean 'allow'" in message
    assert "rules[0].action" in message


def test_unknown_top_level_key() -> None:
    message = error_of("rule:\n  - action: allow\n")
    assert message.startswith("policy.yaml:1:1: unknown key 'rule' in the top level of the policy")
    assert "did you mean 'rules'" in message
    assert "allowed: llm, sampling, elicitation, rules, limits, approval, audit, state, telemetry, upstream" in message


def test_unknown_top_level_key_after_valid_ones_points_at_its_line() -> None:
    message = error_of("sampling:\n  route: auto\n\nauditt:\n  path: x\n")
    assert message.startswith("policy.yaml:4:1: unknown key 'auditt'")
    assert "did you mean 'audit'" in message


def test_unknown_provider_key_suggests_the_right_one() -> None:
    message = error_of("llm:\n  providers:\n    p:\n      type: openai\n      modles: [m]\n")
    assert message.startswith("policy.yaml:5:7: unknown key 'modles' in llm.providers.p")
    assert "did you mean 'models'" in message
    assert "allowed: type, base_url, api_key_env, models" in message


def test_provider_without_type() -> None:
    message = error_of("llm:\n  providers:\n    p:\n      models: [m]\n")
    assert message == "policy.yaml:4:7: provider 'p' needs a type: one of openai, anthropic, console, command"


def test_provider_without_models() -> None:
    message = error_of("llm:\n  providers:\n    p:\n      type: openai\n")
    assert message.startswith("policy.yaml:4:7: provider 'p' needs models: [MODEL, ...]")


def test_provider_with_empty_models_list() -> None:
    message = error_of("llm:\n  providers:\n    p:\n      type: anthropic\n      models: []\n")
    assert message.startswith("policy.yaml:4:7: provider 'p' needs models")


def test_console_provider_needs_no_models() -> None:
    settings = parse_settings("llm:\n  providers:\n    me:\n      type: console\n", F)
    assert settings.providers == [ProviderConfig(name="me", type="console", models=(ModelSpec("console"),))]


def test_bad_provider_type() -> None:
    message = error_of("llm:\n  providers:\n    p:\n      type: openia\n      models: [m]\n")
    assert message == (
        "policy.yaml:4:13: llm.providers.p.type 'openia' is not one of openai, anthropic, console, command "
        "(did you mean 'openai'?)"
    )


def test_base_url_without_scheme() -> None:
    message = error_of(
        "llm:\n  providers:\n    p:\n      type: openai\n      base_url: localhost:8080/v1\n      models: [m]\n"
    )
    assert message == "policy.yaml:5:17: base_url must start with http:// or https://, got 'localhost:8080/v1'"


@pytest.mark.parametrize("value", ["sk-proj-abc123", "sk_live_abc", "x" * 65])
def test_api_key_env_holding_a_key_is_refused(value: str) -> None:
    message = error_of(
        f"llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: {value}\n      models: [m]\n"
    )
    assert message.startswith("policy.yaml:5:20: api_key_env names the environment variable")
    assert "not the key itself" in message
    assert value not in message  # the secret is not echoed back to logs


def test_bad_yaml_syntax_reports_its_position() -> None:
    message = error_of("llm:\n  providers: {a: b\nrules: 1\n")
    assert message.startswith("policy.yaml:3:6: not valid YAML: ")
    assert "did not find expected ',' or '}'" in message


def test_tab_indentation_is_reported_at_the_tab() -> None:
    message = error_of("rules:\n\t- action: allow\n")
    assert message.startswith("policy.yaml:2:1: not valid YAML: ")


def test_duplicate_key_points_at_the_second_one() -> None:
    assert error_of("audit:\n  path: a\naudit:\n  path: b\n") == (
        "policy.yaml:3:1: key 'audit' appears twice in the top level of the policy"
    )
    message = error_of("llm:\n  providers:\n    p:\n      type: openai\n      type: anthropic\n      models: [m]\n")
    assert message == "policy.yaml:5:7: key 'type' appears twice in llm.providers.p"


@pytest.mark.parametrize(("rating", "value"), [("cost", "1.5"), ("speed", "-0.1"), ("intelligence", "2")])
def test_model_ratings_must_be_between_0_and_1(rating: str, value: str) -> None:
    message = error_of(
        f"llm:\n  providers:\n    p:\n      type: openai\n      models:\n        - name: m\n"
        f"          {rating}: {value}\n"
    )
    col = 13 + len(rating)
    assert message == (f"policy.yaml:7:{col}: llm.providers.p.models[0].{rating} must be between 0 and 1, got {value}")


def test_model_rating_must_be_a_number() -> None:
    message = error_of(
        "llm:\n  providers:\n    p:\n      type: openai\n      models:\n        - name: m\n          speed: fast\n"
    )
    assert message == "policy.yaml:7:18: llm.providers.p.models[0].speed must be a number, got 'fast'"


def test_model_mapping_needs_a_name() -> None:
    message = error_of("llm:\n  providers:\n    p:\n      type: openai\n      models:\n        - cost: 0.5\n")
    assert message == "policy.yaml:6:11: a model entry written as a mapping needs name: MODEL"


def test_alias_to_an_unknown_model() -> None:
    message = error_of(ONE_PROVIDER + "  aliases:\n    fast: nope\n")
    assert message == "policy.yaml:7:11: alias 'fast' points at model 'nope', which no provider lists in models"


def test_default_naming_an_unknown_provider() -> None:
    message = error_of(ONE_PROVIDER + "  default: q\n")
    assert message == "policy.yaml:6:12: llm.default 'q' is not a configured provider; configured: p"


def test_default_without_any_provider() -> None:
    message = error_of("llm:\n  default: openai\n")
    assert message == "policy.yaml:2:12: llm.default 'openai' is not a configured provider; configured: none"


def test_sampling_route_bad_value() -> None:
    message = error_of("sampling:\n  route: proxi\n")
    assert message == (
        "policy.yaml:2:10: sampling.route 'proxi' is not one of auto, proxy, host (did you mean 'proxy'?)"
    )


def test_upstream_era_bad_value() -> None:
    message = error_of("upstream:\n  era: modrn\n")
    assert message == (
        "policy.yaml:2:8: upstream.era 'modrn' is not one of auto, handshake, modern (did you mean 'modern'?)"
    )


@pytest.mark.parametrize(
    ("written", "era"), [("auto", "auto"), ("handshake", "handshake"), ("modern", "modern"), ("any", "auto")]
)
def test_upstream_era_values(written: str, era: str) -> None:
    """`any` (the name the default had before the era bridge) still means the default."""
    assert parse_settings(f"upstream:\n  era: {written}\n", F).era == era


def test_rule_without_action_and_bad_method() -> None:
    assert error_of("rules:\n  - name: a\n    action: allow\n  - name: b\n") == (
        "policy.yaml:4:5: rule 2 needs an action: one of allow, deny, prompt"
    )
    message = error_of("rules:\n  - action: allow\n    when:\n      method: sampeling\n")
    assert message.startswith("policy.yaml:4:15: rules[0].when.method 'sampeling' is not one of sampling, elicitation")
    assert "did you mean 'sampling'" in message


def test_wrong_shapes_say_what_was_expected() -> None:
    assert error_of("rules: allow\n") == (
        "policy.yaml:1:8: rules must be a list (lines starting with '- '), got 'allow'"
    )
    assert error_of("- a\n") == (
        "policy.yaml:1:1: the top level of the policy must be a mapping (key: value lines), got a list"
    )
    assert error_of("sampling:\n  tools: maybe\n") == (
        "policy.yaml:2:10: sampling.tools must be true or false, got 'maybe'"
    )
    assert error_of("llm:\n  providers:\n    p:\n      type: openai\n      models: [m]\n      max_attempts: 0\n") == (
        "policy.yaml:6:21: llm.providers.p.max_attempts must be at least 1, got 0"
    )


def test_file_name_in_prefix_is_the_path_given(tmp_path: Path) -> None:
    path = write_policy(tmp_path, "rules:\n  - action: alow\n")
    with pytest.raises(PolicyError) as info:
        load_settings(path, environ={})
    assert str(info.value).startswith(f"{path}:2:13: ")


def test_missing_policy_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(PolicyError) as info:
        load_settings(path, environ={})
    assert str(info.value) == f"{path}: policy file not found"


# -- a valid file ---------------------------------------------------------------------------------

FULL = """\
llm:
  providers:
    local:
      type: openai
      base_url: http://127.0.0.1:11434/v1/
      api_key_env: LOCAL_KEY
      models: [llama3, qwen2.5]
      timeout: 30
      tools: false
      headers:
        X-Team: research
    claude:
      type: anthropic
      api_key_env: MY_ANTHROPIC
      models:
        - claude-haiku
        - name: claude-opus
          cost: 0.1
          speed: 0.3
          intelligence: 1
      timeout:
        connect: 2.5
        read: 90
      max_attempts: 5
  default: claude
  aliases:
    Fast: claude-haiku
    local: llama3
sampling:
  route: proxy
  fallback_on_host_error: true
  tools: false
rules:
  - name: deny-untrusted
    when:
      server: "untrusted-*"
      method: sampling
    action: deny
    message: not for you
  - action: allow
audit:
  path: ~/audit.jsonl
upstream:
  pass_env: [LOCAL_KEY]
  shutdown_timeout: 1.5
  era: any
"""


def test_full_file_round_trip() -> None:
    settings = parse_settings(FULL, F)
    assert settings.source == F
    assert settings.providers == [
        ProviderConfig(
            name="local",
            type="openai",
            base_url="http://127.0.0.1:11434/v1",
            api_key_env="LOCAL_KEY",
            models=(ModelSpec("llama3"), ModelSpec("qwen2.5")),
            read_timeout=30,
            supports_tools=False,
            headers={"X-Team": "research"},
        ),
        ProviderConfig(
            name="claude",
            type="anthropic",
            api_key_env="MY_ANTHROPIC",
            models=(ModelSpec("claude-haiku"), ModelSpec("claude-opus", cost=0.1, speed=0.3, intelligence=1)),
            connect_timeout=2.5,
            read_timeout=90,
            max_attempts=5,
        ),
    ]
    assert settings.default_provider == "claude"
    assert settings.aliases == {"fast": "claude-haiku", "local": "llama3"}
    assert settings.sampling == SamplingSettings(route="proxy", fallback_on_host_error=True, advertise_tools=False)
    assert settings.rules == [
        Rule(
            name="deny-untrusted",
            action="deny",
            when=All((ServerMatches(("untrusted-*",)), MethodIs("sampling"))),
            message="not for you",
            line=34,
        ),
        Rule(name="rule-2", action="allow", when=ALWAYS, message=None, line=40),
    ]
    assert settings.audit_path == os.path.expanduser("~/audit.jsonl")
    assert settings.pass_env == ("LOCAL_KEY",)
    assert settings.shutdown_timeout == 1.5
    assert settings.era == "auto"


def test_defaults_for_an_empty_file_and_empty_when() -> None:
    empty = parse_settings("", F)
    assert empty.providers == [] and empty.rules == [] and empty.default_provider is None
    assert empty.sampling == SamplingSettings()
    assert empty.era == "auto"
    settings = parse_settings("rules:\n  - action: prompt\n    when:\n", F)
    assert settings.rules[0].when == ALWAYS
    assert parse_settings("upstream:\n  pass_env: ONE\n", F).pass_env == ("ONE",)


def test_load_settings_reads_the_file(tmp_path: Path) -> None:
    path = write_policy(tmp_path, FULL)
    settings = load_settings(path, environ={"OPENAI_API_KEY": "sk-x"})
    assert settings.source == path
    assert [p.name for p in settings.providers] == ["local", "claude"]  # the environment's are not added


# -- providers from the environment ---------------------------------------------------------------


def test_environment_openai_with_base_url_and_model() -> None:
    env = {"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "gpt-x"}
    settings = load_settings(None, environ=env)
    assert settings.source == "environment"
    assert settings.providers == [
        ProviderConfig(
            name="openai",
            type="openai",
            base_url="http://127.0.0.1:9/v1",
            api_key_env="OPENAI_API_KEY",
            models=(ModelSpec("gpt-x"),),
        ),
    ]


def test_environment_openai_defaults_and_base_url_alone() -> None:
    [provider] = settings_from_environment({"OPENAI_API_KEY": "sk-x"}).providers
    assert provider.base_url is None
    assert provider.models == (ModelSpec(DEFAULT_OPENAI_MODEL),)
    [local] = settings_from_environment({"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}).providers
    assert local.base_url == "http://127.0.0.1:11434/v1"


def test_environment_anthropic() -> None:
    [provider] = load_settings(None, environ={"ANTHROPIC_API_KEY": "sk-ant-x"}).providers
    assert provider == ProviderConfig(
        name="anthropic",
        type="anthropic",
        api_key_env="ANTHROPIC_API_KEY",
        models=(ModelSpec(DEFAULT_ANTHROPIC_MODEL),),
    )
    [custom] = settings_from_environment({"ANTHROPIC_API_KEY": "k", "ANTHROPIC_MODEL": "claude-x"}).providers
    assert custom.models == (ModelSpec("claude-x"),)


def test_environment_both_puts_openai_first() -> None:
    settings = load_settings(None, environ={"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o"})
    assert [p.name for p in settings.providers] == ["openai", "anthropic"]


def test_environment_without_keys_has_no_providers() -> None:
    assert load_settings(None, environ={"PATH": "/usr/bin", "OPENAI_API_KEY": ""}).providers == []


def test_policy_without_llm_falls_back_to_environment_providers(tmp_path: Path) -> None:
    path = write_policy(tmp_path, "rules:\n  - action: allow\n")
    settings = load_settings(path, environ={"ANTHROPIC_API_KEY": "sk-ant-x"})
    assert [p.name for p in settings.providers] == ["anthropic"]
    assert settings.rules[0].action == "allow"
    assert settings.source == path
    assert load_settings(path, environ={}).providers == []


# -- secrets kept from the upstream ---------------------------------------------------------------


def test_secret_env_vars_include_api_key_env_and_well_known_names() -> None:
    settings = parse_settings(FULL.replace("pass_env: [LOCAL_KEY]", "pass_env: [NOTHING]"), F)
    assert settings.secret_env_vars() == {"LOCAL_KEY", "MY_ANTHROPIC", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}


def test_secret_env_vars_minus_pass_env() -> None:
    settings = parse_settings(FULL.replace("pass_env: [LOCAL_KEY]", "pass_env: [LOCAL_KEY, OPENAI_API_KEY]"), F)
    assert settings.secret_env_vars() == {"MY_ANTHROPIC", "ANTHROPIC_API_KEY"}
    assert settings_from_environment({}).secret_env_vars() == {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}


def test_the_sandbox_section() -> None:
    settings = parse_settings(
        "sandbox:\n  hide: [secrets]\n  read: [~/projects]\n  network: false\n"
        "  servers:\n    trusted: off\n    files: {write: [/srv/out]}\n",
        "/etc/p/policy.yaml",
    )
    home = os.path.expanduser("~")
    assert settings.sandbox.mode == "auto" and settings.sandbox.network.mode == "none"
    assert settings.sandbox.hide == ("/etc/p/secrets",) and settings.sandbox.read == (f"{home}/projects",)
    assert settings.sandbox.for_server("trusted").mode == "off"
    files = settings.sandbox.for_server("files")
    assert files.write == ("/srv/out",) and files.hide == ("/etc/p/secrets",) and files.network.mode == "none"
    assert settings.sandbox.for_server("other") == settings.sandbox
    # YAML reads a bare off as false: it still means off
    assert parse_settings("sandbox: off\n", F).sandbox.mode == "off"
    assert parse_settings("sandbox: required\n", F).sandbox.mode == "required"
    assert error_of("sandbox:\n  mode: sometimes\n") == (
        "policy.yaml:2:9: sandbox.mode 'sometimes' is not one of auto, required, off"
    )
    # a bare ~ is YAML's null: said plainly, with the fix; quoted, it is the home directory
    assert error_of("sandbox:\n  read: [~]\n") == (
        'policy.yaml:2:10: sandbox read: a bare ~ is YAML\'s null, not your home directory: write "~" (quoted) or ~/'
    )
    assert parse_settings('sandbox:\n  read: ["~"]\n', F).sandbox.read == (home,)
    # the network: the relay by default, none, the user's own, or a list of hosts (each checked)
    assert parse_settings("rules: []\n", F).sandbox.network.mode == "relay"
    assert parse_settings("sandbox:\n  network: host\n", F).sandbox.network.mode == "host"
    listed = parse_settings(
        'sandbox:\n  servers:\n    fetch: {network: [api.example.com, "*.github.com:443", "[::1]:8080", 10.0.0.0/8]}\n',
        F,
    ).sandbox.for_server("fetch")
    assert [str(h) for h in listed.network.hosts] == ["api.example.com", "*.github.com:443", "[::1]:8080", "10.0.0.0/8"]
    assert listed.where == "sandbox.servers.fetch"
    assert error_of("sandbox:\n  network: [http://x.example]\n").startswith(
        "policy.yaml:2:13: network entry 'http://x.example': give a host name"
    )
    assert "must be true (public hosts" in error_of("sandbox:\n  network: sometimes\n")

"""The policy file: load, validate, and derive the settings the proxy runs with.

Everything is validated at start, with the position of the mistake, so the proxy never
discovers a typo in the middle of a session. Without a policy file, providers come from the
environment (OPENAI_API_KEY / OPENAI_BASE_URL, ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_sampling_proxy.config.child_env import WELL_KNOWN_KEY_VARS
from mcp_sampling_proxy.config.policy_file import read_policy_text
from mcp_sampling_proxy.config.providers import (
    COMMAND_PRESETS,
    KINDS,
    PROVIDER_TYPES,
    AzureSpec,
    CommandSpec,
    ModelSpec,
    ProviderConfig,
)
from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings
from mcp_sampling_proxy.policy.grammar import KnownProviders, parse_limits, parse_rules
from mcp_sampling_proxy.policy.rules import Rule, SizeLimits
from mcp_sampling_proxy.vocabulary import MiB
from mcp_sampling_proxy.yamlnodes import Node, PolicyError, load, shown_value

ROUTES = ("auto", "proxy", "host")
ERAS = ("auto", "handshake", "modern")
APPROVAL_CHANNELS = ("terminal", "console", "host")
AUDIT_CONTENT_MODES = ("none", "redacted", "full")
AUDIT_KEYS = ("path", "content", "redact", "fsync", "max_bytes")
FSYNC_BEFORE_ANSWER = "before_answer"  # audit.fsync: the answer waits for the record's fsync

STATE_BACKENDS = ("file", "redis")
ON_STATE_ERROR = ("deny", "allow_local")
STATE_KEYS = ("backend", "url", "url_env", "prefix", "on_state_error")

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"


DEFAULT_AUDIT_MAX_BYTES = 64 * MiB


@dataclass(frozen=True)
class ApprovalSettings:
    """The top-level `approval:` section."""

    channels: tuple[str, ...] = APPROVAL_CHANNELS  # tried in this order
    timeout: float = 120.0  # seconds
    review_response: bool = False  # let the approver check the LLM's answer before the server gets it


@dataclass(frozen=True)
class SamplingSettings:
    route: str = "auto"
    fallback_on_host_error: bool = False
    advertise_tools: bool = True  # offer `sampling.tools` upstream when the adapter can use tools
    max_concurrent: int = 8  # LLM calls this proxy makes at once; more wait in a queue ...
    max_queued: int = 256  # ... of at most this many; past it a request is refused (-1)
    keepalive_seconds: float = 5.0  # progress to the host's tools/call while a request waits; 0: never


@dataclass(frozen=True)
class ElicitationSettings:
    route: str = "auto"  # auto | console | host | decline
    url_mode: bool = False  # serve URL-mode elicitation on the console (show the URL, open it on consent)
    sensitive_form: str = "decline"  # decline | cancel | allow: forms that ask for secrets
    non_interactive: str = "decline"  # decline | cancel | accept_defaults: nobody to ask


@dataclass(frozen=True)
class AuditSettings:
    """The top-level `audit:` section (no path: no audit log)."""

    path: str | None = None
    content: str = "none"  # none | redacted | full
    redact: tuple[re.Pattern[str], ...] = ()  # the user's own patterns, on top of the built-in ones
    # True: each record is written before the server gets its answer and fsync'd right after, while the
    # answer is on its way; "before_answer": fsync'd before the answer too; False: never fsync'd
    fsync: bool | str = True
    max_bytes: int = DEFAULT_AUDIT_MAX_BYTES  # rotate when the file would grow past this; 0: never


@dataclass(frozen=True)
class StateSettings:
    """The top-level `state:` section: where rate limits, concurrency limits and token budgets live.

    `file` (the default): rate and concurrency limits per proxy in memory, budgets in the user's
    state file, shared by the proxies of this machine. `redis`: all three shared by every proxy
    pointing at the same Redis and prefix."""

    backend: str = "file"
    url: str | None = None  # redis://HOST:6379/0 (given, or read from url_env at start)
    url_env: str | None = None  # the variable holding the URL, to keep a password out of the file
    prefix: str = "mcp-sampling-proxy:"
    on_state_error: str = "deny"  # deny | allow_local: Redis unreachable


@dataclass(frozen=True)
class TelemetrySettings:
    """The top-level `telemetry:` section: OpenTelemetry export of decisions and LLM calls.

    Without the section, the standard OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT)
    variable turns it on; `enabled: false` keeps it off whatever the environment says."""

    configured: bool = False  # the policy has a telemetry section
    enabled: bool = True
    otlp_endpoint: str | None = None  # http://collector:4318 (OTLP over HTTP; /v1/traces etc. are added)
    service_name: str = "mcp-sampling-proxy"


@dataclass
class Settings:
    """Everything the proxy needs from the policy file (or the environment)."""

    providers: list[ProviderConfig] = field(default_factory=list)
    default_provider: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    elicitation: ElicitationSettings = field(default_factory=ElicitationSettings)
    rules: list[Rule] = field(default_factory=list)
    limits: SizeLimits = field(default_factory=SizeLimits)
    approval: ApprovalSettings = field(default_factory=ApprovalSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    state: StateSettings = field(default_factory=StateSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    pass_env: tuple[str, ...] = ()
    shutdown_timeout: float = 5.0
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    era: str = "auto"  # the server leg's protocol era: the host's when the server speaks it (relay/bridge.py)
    max_input_rounds: int = 8  # input_required rounds the proxy answers before giving up
    source: str = "environment"  # the policy file path, or "environment"

    @property
    def audit_path(self) -> str | None:
        """The audit log file (None: no audit log)."""
        return self.audit.path

    @audit_path.setter
    def audit_path(self, path: str | None) -> None:
        self.audit = replace(self.audit, path=path)

    def named_files(self) -> list[str]:
        """Files this policy names that the governed server must not see: the audit log, key files."""
        found = [self.audit.path] if self.audit.path else []
        return found + [p.api_key_file for p in self.providers if p.api_key_file]

    def secret_env_vars(self) -> set[str]:
        """Names of environment variables holding the proxy's own LLM keys."""
        names = {p.api_key_env for p in self.providers if p.api_key_env}
        names.update(WELL_KNOWN_KEY_VARS)
        if self.state.url_env:  # a Redis URL may hold a password
            names.add(self.state.url_env)
        return names - set(self.pass_env)


def load_settings(path: str | None, environ: dict[str, str] | None = None, *, text: str | None = None) -> Settings:
    """Load the policy file at `path` (`text`: its text, when the caller read it already), or derive
    settings from the environment."""
    environ = dict(os.environ) if environ is None else environ
    if path is None:
        return settings_from_environment(environ)
    settings = parse_settings(read_policy_text(path) if text is None else text, path)
    if not settings.providers:  # a policy without llm: keep the environment's providers
        settings.providers = settings_from_environment(environ).providers
    return settings


# (provider name and type, key variable, base URL variable, model variable, default model)
_ENV_PROVIDERS = (
    ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", DEFAULT_OPENAI_MODEL),
    ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", DEFAULT_ANTHROPIC_MODEL),
)


def settings_from_environment(environ: dict[str, str]) -> Settings:
    """Providers from well-known variables, in order: OpenAI-compatible first, then Anthropic.

    An OpenAI base URL alone is enough (local servers such as Ollama need no key)."""
    providers: list[ProviderConfig] = []
    for name, key_var, url_var, model_var, default_model in _ENV_PROVIDERS:
        if not (environ.get(key_var) or (name == "openai" and environ.get(url_var))):
            continue
        providers.append(
            ProviderConfig(
                name=name,
                type=name,
                base_url=environ.get(url_var) or None,
                api_key_env=key_var,
                models=(ModelSpec(environ.get(model_var, default_model)),),
            )
        )
    return Settings(providers=providers)


def parse_settings(text: str, where: str) -> Settings:
    """Validate a policy document; raises PolicyError naming FILE:LINE:COL."""
    root = load(text, where)
    settings = Settings(source=where)
    if root is None:
        return settings
    top = root.mapping(
        (
            "llm",
            "sampling",
            "elicitation",
            "rules",
            "limits",
            "approval",
            "audit",
            "state",
            "telemetry",
            "upstream",
            "sandbox",
        )
    )
    if "llm" in top:
        _parse_llm(top["llm"], settings)
    if "sampling" in top:
        settings.sampling = _parse_sampling(top["sampling"])
    if "elicitation" in top:
        settings.elicitation = _parse_elicitation(top["elicitation"])
    if "limits" in top:
        settings.limits = SizeLimits(**parse_limits(top["limits"]))
    if "approval" in top:
        settings.approval = _parse_approval(top["approval"])
    if "rules" in top:
        known = KnownProviders(
            models={p.name: tuple(m.name for m in p.models) for p in settings.providers},
            aliases=settings.aliases,
            from_environment=tuple(entry[0] for entry in _ENV_PROVIDERS),
        )
        settings.rules = parse_rules(top["rules"], known)
    if "audit" in top:
        settings.audit = _parse_audit(top["audit"], where)
    if "state" in top:
        settings.state = _parse_state(top["state"])
    if "telemetry" in top:
        settings.telemetry = _parse_telemetry(top["telemetry"])
    if "sandbox" in top:
        from mcp_sampling_proxy.config.sandbox_settings import parse_sandbox

        settings.sandbox = parse_sandbox(top["sandbox"], where)
    if "upstream" in top:
        upstream = top["upstream"].mapping(("pass_env", "shutdown_timeout", "era", "max_input_rounds"))
        if "max_input_rounds" in upstream:
            settings.max_input_rounds = upstream["max_input_rounds"].int(minimum=1)
        if "era" in upstream:  # "any" was the name of "auto" before the bridge: it still means that
            era = upstream["era"]
            settings.era = "auto" if era.value() == "any" else era.choice(ERAS)
        if "pass_env" in upstream:
            settings.pass_env = tuple(upstream["pass_env"].strings())
        if "shutdown_timeout" in upstream:
            settings.shutdown_timeout = upstream["shutdown_timeout"].number(minimum=0)
    return settings


def _parse_llm(node: Node, settings: Settings) -> None:
    llm = node.mapping(("providers", "default", "aliases"))
    if "providers" in llm:
        for name, pnode in llm["providers"].mapping().items():
            settings.providers.append(_parse_provider(name, pnode))
    names = [p.name for p in settings.providers]
    if "default" in llm:
        default = llm["default"].str()
        if default not in names:
            raise llm["default"].error(
                f"llm.default '{default}' is not a configured provider; configured: {', '.join(names) or 'none'}"
            )
        settings.default_provider = default
    if "aliases" in llm:
        known = {m.name for p in settings.providers for m in p.models}
        for hint, target in llm["aliases"].mapping().items():
            model = target.str()
            if model not in known:
                raise target.error(f"alias '{hint}' points at model '{model}', which no provider lists in models")
            settings.aliases[hint.lower()] = model


_PROVIDER_KEYS = (
    "type",
    "base_url",
    "api_key_env",
    "models",
    "timeout",
    "max_attempts",
    "tools",
    "headers",
    "api_key_file",
    "api_key_command",
    "api_key_header",
    "azure",
    "preset",
    "command",
    "args",
    "output",
    "json",
    "prompt",
    "pass_env",
)
_COMMAND_KEYS = ("preset", "command", "args", "output", "json", "prompt", "pass_env")
# Keys of HTTP providers that mean nothing to a command (it brings its own login and endpoint).
_HTTP_KEYS = (
    "base_url",
    "api_key_env",
    "api_key_file",
    "api_key_command",
    "api_key_header",
    "azure",
    "headers",
    "max_attempts",
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _parse_provider(name: str, node: Node) -> ProviderConfig:
    fields = node.mapping(_PROVIDER_KEYS)
    if "type" not in fields:
        raise node.error(f"provider '{name}' needs a type: one of {', '.join(PROVIDER_TYPES)}")
    ptype = fields["type"].choice(PROVIDER_TYPES)
    kind = KINDS[ptype]
    misplaced = [k for k in (_HTTP_KEYS if kind.runs_command else _COMMAND_KEYS) if k in fields]
    if misplaced:
        why = "a command brings its own login and endpoint" if kind.runs_command else "it applies to type: command only"
        raise fields[misplaced[0]].error(f"provider '{name}': {misplaced[0]} does not apply to type: {ptype} ({why})")
    models: list[ModelSpec] = []
    if "models" in fields:
        models = [_parse_model(m) for m in fields["models"].sequence()]
    if not models and not kind.default_models:
        raise node.error(f"provider '{name}' needs models: [MODEL, ...] (the first is the default)")
    models = models or [ModelSpec(model) for model in kind.default_models]
    if kind.runs_command:
        return _parse_command_provider(name, node, fields, models)
    kwargs: dict[str, Any] = {}
    if "base_url" in fields:
        url = fields["base_url"].str()
        if not url.startswith(("http://", "https://")):
            raise fields["base_url"].error(f"base_url must start with http:// or https://, got '{url}'")
        kwargs["base_url"] = url.rstrip("/")
    if "api_key_env" in fields:
        env = fields["api_key_env"].str()
        if env.startswith(("sk-", "sk_")) or len(env) > 64:
            raise fields["api_key_env"].error(
                "api_key_env names the environment variable that holds the key, not the key itself"
            )
        kwargs["api_key_env"] = env
    kwargs.update(_parse_key_source(name, node, fields))
    if "timeout" in fields:
        tnode = fields["timeout"]
        if tnode.is_mapping():
            t = tnode.mapping(("connect", "read", "total"))
            if "connect" in t:
                kwargs["connect_timeout"] = t["connect"].number(minimum=0.1)
            if "read" in t:
                kwargs["read_timeout"] = t["read"].number(minimum=0.1)
            if "total" in t:
                kwargs["total_timeout"] = t["total"].duration()
        else:
            kwargs["read_timeout"] = tnode.number(minimum=0.1)
    if "max_attempts" in fields:
        kwargs["max_attempts"] = fields["max_attempts"].int(minimum=1)
    if "tools" in fields:
        kwargs["supports_tools"] = fields["tools"].bool()
    if "headers" in fields:
        kwargs["headers"] = {k: v.str() for k, v in fields["headers"].mapping().items()}
    if "api_key_header" in fields:
        header = fields["api_key_header"].str()
        if not _HEADER_NAME.match(header):
            raise fields["api_key_header"].error(f"api_key_header must be an HTTP header name, got '{header}'")
        kwargs["api_key_header"] = header.lower()
    if "azure" in fields:
        if ptype != "openai":
            raise fields["azure"].error(f"provider '{name}': azure: applies to type: openai only")
        kwargs["azure"] = _parse_azure(name, node, fields)
    return ProviderConfig(name=name, type=ptype, models=tuple(models), **kwargs)


def _parse_azure(name: str, node: Node, fields: dict[str, Node]) -> AzureSpec:
    """Azure OpenAI: base_url is the resource endpoint; the deployment (default: the model's name)
    and api-version make the URL."""
    azure = fields["azure"].mapping(("api_version", "deployment"))
    if "api_version" not in azure:
        raise fields["azure"].error(
            f"provider '{name}': azure needs api_version (e.g. 2024-10-21, from Azure's API version list)"
        )
    if "base_url" not in fields:
        raise node.error(f"provider '{name}': azure needs base_url: https://RESOURCE.openai.azure.com")
    return AzureSpec(
        api_version=azure["api_version"].str(), deployment=azure["deployment"].str() if "deployment" in azure else None
    )


def _parse_command_provider(name: str, node: Node, fields: dict[str, Node], models: list[ModelSpec]) -> ProviderConfig:
    """`type: command`: a preset (claude, codex, gemini, llm) or a custom argv; never tools."""
    has_preset, has_command = "preset" in fields, "command" in fields
    if has_preset == has_command:
        raise node.error(
            f"provider '{name}' (command) needs exactly one of preset: ({', '.join(COMMAND_PRESETS)}) "
            "or command: [PROGRAM, ARGS...]"
        )
    spec: dict[str, Any] = {}
    if has_preset:
        spec["preset"] = fields["preset"].choice(COMMAND_PRESETS)
        for key in ("output", "json", "prompt"):
            if key in fields:
                raise fields[key].error(
                    f"provider '{name}': {key} is set by preset {spec['preset']}; use command: for your own"
                )
        if "args" in fields:
            spec["argv"] = tuple(_command_args(fields["args"]))
    else:
        if "args" in fields:
            raise fields["args"].error(f"provider '{name}': args: goes with preset:; put them in command:")
        argv = _command_args(fields["command"])
        if not argv or not argv[0]:
            raise fields["command"].error(f"provider '{name}': command needs a program: [PROGRAM, ARGS...]")
        spec["argv"] = tuple(argv)
        spec["output"] = fields["output"].choice(("text", "json")) if "output" in fields else "text"
        spec["prompt"] = fields["prompt"].choice(("stdin", "arg")) if "prompt" in fields else "stdin"
        if "json" in fields:
            if spec["output"] != "json":
                raise fields["json"].error(f"provider '{name}': json: goes with output: json")
            paths = fields["json"].mapping(("text", "input_tokens", "output_tokens", "stop_reason"))
            for key, pnode in paths.items():
                spec[f"{key}_path"] = pnode.str()
        if spec["output"] == "json" and "text_path" not in spec:
            raise node.error(
                f"provider '{name}': output: json needs json: {{text: PATH}}, the dotted path "
                "to the answer (e.g. choices.0.message.content)"
            )
    if "pass_env" in fields:  # key variables this CLI may have (the proxy withholds them from what it starts)
        spec["pass_env"] = tuple(fields["pass_env"].strings())
    kwargs: dict[str, Any] = {}
    if "timeout" in fields:  # the whole run: a command has no connect or read phase
        tnode = fields["timeout"]
        if tnode.is_mapping():
            raise tnode.error(
                f"provider '{name}': a command's timeout is one duration for the whole run (e.g. timeout: 300 or 5m)"
            )
        kwargs["total_timeout"] = tnode.duration()
    if "tools" in fields and fields["tools"].bool():
        raise fields["tools"].error(f"provider '{name}': command providers cannot use tools (tools: false)")
    return ProviderConfig(
        name=name,
        type="command",
        models=tuple(models),
        supports_tools=False,
        command=CommandSpec(**spec),
        **kwargs,
    )


def _command_args(node: Node) -> list[str]:
    """An argv list (empty strings allowed: `--tools ""`), or a string split like a shell would."""
    if not node.is_sequence():
        return shlex.split(node.str())
    out = []
    for item in node.sequence():
        value = item.value()
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise item.error(f"{item.label} must be a string, got {shown_value(value)}")
        out.append(str(value))
    return out


def _parse_key_source(name: str, node: Node, fields: dict[str, Node]) -> dict[str, object]:
    """api_key_file / api_key_command: keys that never sit in an environment (see keys.py).
    Only parsed here: the file is read and the command run at start, never by `policy check`."""
    sources = [k for k in ("api_key_env", "api_key_file", "api_key_command") if k in fields]
    if len(sources) > 1:
        raise fields[sources[1]].error(
            f"provider '{name}' has both {sources[0]} and {sources[1]}: give exactly one key source"
        )
    kwargs: dict[str, Any] = {}
    if "api_key_file" in fields:
        path = fields["api_key_file"].str()
        if not path.strip():
            raise fields["api_key_file"].error("api_key_file needs the path of a file holding only the key")
        path = os.path.expanduser(path)
        if not os.path.isabs(path):  # hosts start the proxy in any directory: relative to the policy file
            path = os.path.join(os.path.dirname(os.path.abspath(node.where)), path)
        kwargs["api_key_file"] = os.path.normpath(path)
    if "api_key_command" in fields:
        cnode = fields["api_key_command"]
        # A list is run as is; a string is split like a shell would (shlex), but never run by one.
        argv = list(cnode.strings()) if cnode.is_sequence() else shlex.split(cnode.str())
        if not argv or not argv[0]:
            raise cnode.error('api_key_command needs a command that prints the key, e.g. ["pass", "show", "openai"]')
        kwargs["api_key_command"] = tuple(argv)
    return kwargs


def _parse_model(node: Node) -> ModelSpec:
    if not node.is_mapping():
        return ModelSpec(node.str())
    fields = node.mapping(("name", "cost", "speed", "intelligence", "reasoning"))
    if "name" not in fields:
        raise node.error("a model entry written as a mapping needs name: MODEL")
    ratings = {
        key: fields[key].number(minimum=0, maximum=1) for key in ("cost", "speed", "intelligence") if key in fields
    }
    reasoning = fields["reasoning"].bool() if "reasoning" in fields else None
    return ModelSpec(fields["name"].str(), **ratings, reasoning=reasoning)


def _parse_sampling(node: Node) -> SamplingSettings:
    fields = node.mapping(
        ("route", "fallback_on_host_error", "tools", "max_concurrent", "max_queued", "keepalive_seconds")
    )
    defaults = SamplingSettings()
    return SamplingSettings(
        keepalive_seconds=fields["keepalive_seconds"].number(minimum=0)
        if "keepalive_seconds" in fields
        else defaults.keepalive_seconds,
        max_concurrent=fields["max_concurrent"].int(minimum=1)
        if "max_concurrent" in fields
        else defaults.max_concurrent,
        max_queued=fields["max_queued"].int(minimum=0) if "max_queued" in fields else defaults.max_queued,
        route=fields["route"].choice(ROUTES) if "route" in fields else "auto",
        fallback_on_host_error=fields["fallback_on_host_error"].bool() if "fallback_on_host_error" in fields else False,
        advertise_tools=fields["tools"].bool() if "tools" in fields else True,
    )


def _parse_elicitation(node: Node) -> ElicitationSettings:
    fields = node.mapping(("route", "url_mode", "sensitive_form", "non_interactive"))
    defaults = ElicitationSettings()
    return ElicitationSettings(
        route=fields["route"].choice(("auto", "console", "host", "decline")) if "route" in fields else defaults.route,
        url_mode=fields["url_mode"].bool() if "url_mode" in fields else defaults.url_mode,
        sensitive_form=fields["sensitive_form"].choice(("decline", "cancel", "allow"))
        if "sensitive_form" in fields
        else defaults.sensitive_form,
        non_interactive=fields["non_interactive"].choice(("decline", "cancel", "accept_defaults"))
        if "non_interactive" in fields
        else defaults.non_interactive,
    )


# -- sizes and durations ----------------------------------------------------------------------------

# -- limits and approval ----------------------------------------------------------------------------


def _parse_approval(node: Node) -> ApprovalSettings:
    fields_ = node.mapping(("channels", "timeout", "review_response"))
    settings = ApprovalSettings()
    if "channels" in fields_:
        cnode = fields_["channels"]
        items = [cnode] if not cnode.is_sequence() else cnode.sequence()
        channels: list[str] = []
        for item in items:
            name = item.choice(APPROVAL_CHANNELS)
            if name in channels:
                raise item.error(f"{cnode.label} lists '{name}' twice")
            channels.append(name)
        if not channels:
            raise cnode.error(
                f"{cnode.label} needs at least one of {', '.join(APPROVAL_CHANNELS)} (in the order to try them); "
                "to never ask anyone, end the rules with one that has action: deny"
            )
        settings = replace(settings, channels=tuple(channels))
    if "timeout" in fields_:
        settings = replace(settings, timeout=fields_["timeout"].duration())
    if "review_response" in fields_:
        settings = replace(settings, review_response=fields_["review_response"].bool())
    return settings


# -- audit ------------------------------------------------------------------------------------------


def _parse_audit(node: Node, where: str) -> AuditSettings:
    given = node.mapping(AUDIT_KEYS)
    if "path" not in given:
        if given:
            from mcp_sampling_proxy.config.dirs import home_relative, state_dir

            example = home_relative(state_dir(create=False) / "audit.jsonl")  # this OS's place for it
            raise node.error(
                f"{node.label} sets {', '.join(given)} but no path: give path: FILE "
                f"(e.g. {example}), or remove the audit section"
            )
        return AuditSettings()
    path = os.path.expanduser(given["path"].str())
    if not os.path.isabs(path):  # hosts start the proxy in any directory: relative to the policy file
        path = os.path.join(os.path.dirname(os.path.abspath(where)), path)
    settings = AuditSettings(path=os.path.normpath(path))
    if "content" in given:
        settings = replace(settings, content=given["content"].choice(AUDIT_CONTENT_MODES))
    if "redact" in given:
        rnode = given["redact"]
        items = [rnode] if not rnode.is_sequence() else rnode.sequence()
        patterns = []
        for item in items:
            pattern = item.regex()
            if pattern.search(""):
                raise item.error(
                    f"{item.label} /{pattern.pattern}/ matches the empty string, so it would mask "
                    "between every character; make it match the secret itself"
                )
            patterns.append(pattern)
        settings = replace(settings, redact=tuple(patterns))
    if "fsync" in given:
        node = given["fsync"]
        if node.value() == FSYNC_BEFORE_ANSWER:
            settings = replace(settings, fsync=FSYNC_BEFORE_ANSWER)
        elif not isinstance(node.value(), bool):
            raise node.error(
                f"{node.label} must be true (each record is fsync'd right after it is written, while "
                f"the answer goes out), {FSYNC_BEFORE_ANSWER} (the answer waits for the fsync too) "
                f"or false (never fsync'd), got {node.value()!r}"
            )
        else:
            settings = replace(settings, fsync=node.bool())
    if "max_bytes" in given:
        settings = replace(settings, max_bytes=given["max_bytes"].size())
    return settings


# -- state --------------------------------------------------------------------------------------------


def _parse_state(node: Node) -> StateSettings:
    given = node.mapping(STATE_KEYS)
    backend = given["backend"].choice(STATE_BACKENDS) if "backend" in given else "file"
    settings = StateSettings(backend=backend)
    if backend == "file":
        extra = [k for k in given if k != "backend"]
        if extra:
            raise given[extra[0]].error(
                f"{given[extra[0]].label} applies to backend: redis only; this state "
                "section uses the local file store (backend: file, the default)"
            )
        return settings
    if ("url" in given) == ("url_env" in given):
        raise node.error(
            f"{node.label} with backend: redis needs exactly one of url: redis://HOST:6379/0 or "
            "url_env: VARIABLE (a variable holding the URL, to keep a password out of this file)"
        )
    if "url" in given:
        url = given["url"].str()
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise given["url"].error(
                f"{given['url'].label} must start with redis://, rediss:// or unix://, got {url!r}"
            )
        settings = replace(settings, url=url)
    else:
        settings = replace(settings, url_env=given["url_env"].str())
    if "prefix" in given:
        settings = replace(settings, prefix=given["prefix"].str())
    if "on_state_error" in given:
        settings = replace(settings, on_state_error=given["on_state_error"].choice(ON_STATE_ERROR))
    return settings


def installed(module: str) -> bool:
    """True when `module` (dotted names too) can be imported, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _parse_telemetry(node: Node) -> TelemetrySettings:
    given = node.mapping(("enabled", "otlp_endpoint", "service_name"))
    settings = TelemetrySettings(configured=True)
    if "enabled" in given:
        settings = replace(settings, enabled=given["enabled"].bool())
    if "otlp_endpoint" in given:
        endpoint = given["otlp_endpoint"].str()
        if not endpoint.startswith(("http://", "https://")):
            raise given["otlp_endpoint"].error(
                f"{given['otlp_endpoint'].label} must be an http:// or https:// URL "
                "of an OTLP/HTTP receiver, e.g. http://localhost:4318"
            )
        settings = replace(settings, otlp_endpoint=endpoint.rstrip("/"))
    if "service_name" in given:
        settings = replace(settings, service_name=given["service_name"].str())
    if settings.enabled and "otlp_endpoint" not in given:
        raise node.error(
            f"{node.label} needs otlp_endpoint: http://HOST:4318 (or leave the section out and set "
            "OTEL_EXPORTER_OTLP_ENDPOINT), or enabled: false"
        )
    return settings


def telemetry_wanted(telemetry: TelemetrySettings, environ: Mapping[str, str]) -> bool:
    """True when decisions should be exported: the policy says so, or the standard variables do."""
    if telemetry.configured:
        return telemetry.enabled
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def check_telemetry(telemetry: TelemetrySettings) -> None:
    """PolicyError when the policy asks for telemetry and the OpenTelemetry packages are missing."""
    if telemetry.configured and telemetry.enabled and not installed("opentelemetry.exporter.otlp.proto.http"):
        raise PolicyError(
            "telemetry: needs the OpenTelemetry SDK and OTLP/HTTP exporter, which are not installed: "
            "pip install 'mcp-sampling-proxy[otel]' (or remove the telemetry section)"
        )


def resolve_state(state: StateSettings, environ: Mapping[str, str]) -> StateSettings:
    """The state settings with the Redis URL read from `url_env`; PolicyError when it cannot be."""
    if state.backend != "redis":
        return state
    if not installed("redis"):
        raise PolicyError(
            "state.backend: redis needs the redis package, which is not installed: "
            "pip install 'mcp-sampling-proxy[redis]' (or use backend: file)"
        )
    if state.url or not state.url_env:
        return state
    url = environ.get(state.url_env, "")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        problem = "is not set" if not url else "does not hold a redis://, rediss:// or unix:// URL"
        raise PolicyError(
            f"state.url_env: {state.url_env} {problem} in the proxy's environment; set it to "
            "the Redis URL, e.g. redis://HOST:6379/0"
        )
    return replace(state, url=url)

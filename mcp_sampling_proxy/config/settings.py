"""The policy file: load, validate, and derive the settings the proxy runs with.

Everything is validated at start, with the position of the mistake, so the proxy never
discovers a typo in the middle of a session. Without a policy file, providers come from the
environment (OPENAI_API_KEY / OPENAI_BASE_URL, ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping

from msgspec import Struct, field
from msgspec.structs import replace

from mcp_sampling_proxy.config.approval_grammar import WebhookSettings, check_quorum, parse_quorum, parse_webhook
from mcp_sampling_proxy.config.auto_answers import AutoAnswer, parse_auto_answers
from mcp_sampling_proxy.config.checks import CheckSpec, parse_checks
from mcp_sampling_proxy.config.child_env import WELL_KNOWN_KEY_VARS
from mcp_sampling_proxy.config.dirs import home_relative, state_dir
from mcp_sampling_proxy.config.policy_file import read_policy_text
from mcp_sampling_proxy.config.price_grammar import parse_prices
from mcp_sampling_proxy.config.prices import PriceTable
from mcp_sampling_proxy.config.provider_grammar import parse_provider
from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig, preset_key_vars
from mcp_sampling_proxy.config.sampling_checks import SAMPLING_CHECK_KEYS, SamplingChecks, parse_sampling_checks
from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings, parse_sandbox
from mcp_sampling_proxy.config.tool_settings import ToolSettings, parse_tools
from mcp_sampling_proxy.notation.vocabulary import MiB
from mcp_sampling_proxy.notation.yamlnodes import Node, PolicyError, load
from mcp_sampling_proxy.policy.grammar import KnownProviders, parse_limits, parse_rules
from mcp_sampling_proxy.policy.rules import Rule, SizeLimits

ROUTES = ("auto", "proxy", "host")
ERAS = ("auto", "handshake", "modern")
APPROVAL_CHANNELS = ("terminal", "console", "host", "webhook")
DEFAULT_APPROVAL_CHANNELS = ("terminal", "console", "host")  # and webhook, when approval.webhook is set
AUDIT_CONTENT_MODES = ("none", "redacted", "full")
AUDIT_KEYS = ("path", "content", "redact", "fsync", "max_bytes")
FSYNC_BEFORE_ANSWER = "before_answer"  # audit.fsync: the answer waits for the record's fsync

STATE_BACKENDS = ("file", "redis")
ON_STATE_ERROR = ("deny", "allow_local")
STATE_KEYS = ("backend", "url", "url_env", "prefix", "on_state_error")

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"


DEFAULT_AUDIT_MAX_BYTES = 64 * MiB


class ApprovalSettings(Struct, frozen=True):
    """The top-level `approval:` section."""

    channels: tuple[str, ...] = DEFAULT_APPROVAL_CHANNELS  # tried in this order
    timeout: float = 120.0  # seconds
    review_response: bool = False  # let the approver check the LLM's answer before the server gets it
    quorum: int = 1  # approvals from different people needed before a request runs
    webhook: WebhookSettings | None = None  # where the webhook channel POSTs its signed requests


class SamplingSettings(Struct, frozen=True):
    route: str = "auto"
    fallback_on_host_error: bool = False
    advertise_tools: bool = True  # offer `sampling.tools` upstream when the adapter can use tools
    max_concurrent: int = 8  # LLM calls this proxy makes at once; more wait in a queue ...
    max_queued: int = 256  # ... of at most this many; past it a request is refused (-1)
    keepalive_seconds: float = 5.0  # progress to the host's tools/call while a request waits; 0: never
    checks: SamplingChecks = field(default_factory=SamplingChecks)  # unsolicited, per-call cap, secrets


class ElicitationSettings(Struct, frozen=True):
    route: str = "auto"  # auto | console | host | decline
    url_mode: bool = False  # serve URL-mode elicitation on the console (show the URL, open it on consent)
    sensitive_form: str = "decline"  # decline | cancel | allow: forms that ask for secrets
    non_interactive: str = "decline"  # decline | cancel | accept_defaults: nobody to ask
    auto_answers: tuple[AutoAnswer, ...] = ()  # forms the policy answers itself (config/auto_answers.py)


class AuditSettings(Struct, frozen=True):
    """The top-level `audit:` section (no path: no audit log)."""

    path: str | None = None
    content: str = "none"  # none | redacted | full
    redact: tuple[re.Pattern[str], ...] = ()  # the user's own patterns, on top of the built-in ones
    # True: each record is written before the server gets its answer and fsync'd right after, while the
    # answer is on its way; "before_answer": fsync'd before the answer too; False: never fsync'd
    fsync: bool | str = True
    max_bytes: int = DEFAULT_AUDIT_MAX_BYTES  # rotate when the file would grow past this; 0: never


class StateSettings(Struct, frozen=True):
    """The top-level `state:` section: where rate limits, concurrency limits and token budgets live.

    `file` (the default): rate and concurrency limits per proxy in memory, budgets in the user's
    state file, shared by the proxies of this machine. `redis`: all three shared by every proxy
    pointing at the same Redis and prefix."""

    backend: str = "file"
    url: str | None = None  # redis://HOST:6379/0 (given, or read from url_env at start)
    url_env: str | None = None  # the variable holding the URL, to keep a password out of the file
    prefix: str = "mcp-sampling-proxy:"
    on_state_error: str = "deny"  # deny | allow_local: Redis unreachable


class TelemetrySettings(Struct, frozen=True):
    """The top-level `telemetry:` section: OpenTelemetry export of decisions and LLM calls.

    Without the section, the standard OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT)
    variable turns it on; `enabled: false` keeps it off whatever the environment says."""

    configured: bool = False  # the policy has a telemetry section
    enabled: bool = True
    otlp_endpoint: str | None = None  # http://collector:4318 (OTLP over HTTP; /v1/traces etc. are added)
    service_name: str = "mcp-sampling-proxy"


class Settings(Struct):
    """Everything the proxy needs from the policy file (or the environment)."""

    providers: list[ProviderConfig] = field(default_factory=list)
    default_provider: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    elicitation: ElicitationSettings = field(default_factory=ElicitationSettings)
    rules: list[Rule] = field(default_factory=list)
    checks: dict[str, CheckSpec] = field(default_factory=dict)  # external validators by name (config/checks.py)
    limits: SizeLimits = field(default_factory=SizeLimits)
    approval: ApprovalSettings = field(default_factory=ApprovalSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    state: StateSettings = field(default_factory=StateSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    prices: PriceTable = field(default_factory=PriceTable)  # the shipped table, under the policy's prices:
    pass_env: tuple[str, ...] = ()
    shutdown_timeout: float = 5.0
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    era: str = "auto"  # the server leg's protocol era: the host's when the server speaks it (relay/bridge.py)
    max_input_rounds: int = 8  # input_required rounds the proxy answers before giving up
    tools: ToolSettings = field(default_factory=ToolSettings)  # pinning and tool-call rules (tool_settings.py)
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
        return [path for _what, path in self.trusted_files()]

    def trusted_files(self) -> list[tuple[str, str]]:
        """`named_files`, each with what it is (for messages): (what, path)."""
        found = [("the audit log", self.audit.path)] if self.audit.path else []
        if self.approval.webhook is not None and self.approval.webhook.secret_file:
            found.append(("the webhook's secret file", self.approval.webhook.secret_file))
        return found + [(f"provider '{p.name}''s key file", p.api_key_file) for p in self.providers if p.api_key_file]

    def secret_env_vars(self) -> set[str]:
        """Names of environment variables holding the proxy's own LLM keys."""
        names = {p.api_key_env for p in self.providers if p.api_key_env}
        names.update(WELL_KNOWN_KEY_VARS)
        names.update(var for p in self.providers if p.command for var in preset_key_vars(p.command.preset))
        if self.state.url_env:  # a Redis URL may hold a password
            names.add(self.state.url_env)
        if self.approval.webhook is not None and self.approval.webhook.secret_env:
            names.add(self.approval.webhook.secret_env)
        for check in self.checks.values():  # a check's header tokens
            names.update(check.variables())
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
    """Validate a policy document; raises PolicyError naming FILE:LINE:COL of every mistake found (each
    section, rule and condition is checked even when an earlier one is wrong)."""
    root = load(text, where, gather=True)
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
            "prices",
            "tools",
            "checks",
        )
    )
    errors = root.errors
    assert errors is not None  # gathered: one run names every mistake
    if "llm" in top:
        before = len(errors.mistakes)
        top["llm"].attempt(lambda: _parse_llm(top["llm"], settings), None)
        llm_broken = len(errors.mistakes) > before
    if "sampling" in top:
        settings.sampling = top["sampling"].attempt(lambda: _parse_sampling(top["sampling"]), settings.sampling)
    if "elicitation" in top:
        settings.elicitation = top["elicitation"].attempt(
            lambda: _parse_elicitation(top["elicitation"]), settings.elicitation
        )
    if "limits" in top:
        settings.limits = top["limits"].attempt(lambda: SizeLimits(**parse_limits(top["limits"])), settings.limits)
    if "approval" in top:
        settings.approval = top["approval"].attempt(lambda: _parse_approval(top["approval"], where), settings.approval)
    if "checks" in top:
        settings.checks = top["checks"].attempt(lambda: parse_checks(top["checks"]), {})
    if "rules" in top:
        known = KnownProviders(
            models={p.name: tuple(m.name for m in p.models) for p in settings.providers},
            aliases=settings.aliases,
            from_environment=tuple(entry[0] for entry in _ENV_PROVIDERS),
            unchecked="llm" in top and llm_broken,  # a broken llm section's names would only add noise
        )
        defined = tuple(top["checks"].keys()) if "checks" in top else ()  # a broken one is reported once
        settings.rules = top["rules"].attempt(lambda: parse_rules(top["rules"], known, defined), [])
    if "audit" in top:
        settings.audit = top["audit"].attempt(lambda: _parse_audit(top["audit"], where), settings.audit)
    if "state" in top:
        settings.state = top["state"].attempt(lambda: _parse_state(top["state"]), settings.state)
    if "telemetry" in top:
        settings.telemetry = top["telemetry"].attempt(lambda: _parse_telemetry(top["telemetry"]), settings.telemetry)
    if "prices" in top:
        settings.prices = top["prices"].attempt(lambda: parse_prices(top["prices"]), settings.prices)
    if "sandbox" in top:
        settings.sandbox = top["sandbox"].attempt(lambda: parse_sandbox(top["sandbox"], where), settings.sandbox)
    if "tools" in top:
        settings.tools = top["tools"].attempt(lambda: parse_tools(top["tools"]), settings.tools)
    if "upstream" in top:
        top["upstream"].attempt(lambda: _parse_upstream(top["upstream"], settings), None)
    errors.check()
    return settings


def _parse_upstream(node: Node, settings: Settings) -> None:
    upstream = node.mapping(("pass_env", "shutdown_timeout", "era", "max_input_rounds"))
    if "max_input_rounds" in upstream:
        settings.max_input_rounds = upstream["max_input_rounds"].int(minimum=1)
    if "era" in upstream:  # "any" was the name of "auto" before the bridge: it still means that
        era = upstream["era"]
        settings.era = "auto" if era.value() == "any" else era.choice(ERAS)
    if "pass_env" in upstream:
        settings.pass_env = tuple(upstream["pass_env"].strings())
    if "shutdown_timeout" in upstream:
        settings.shutdown_timeout = upstream["shutdown_timeout"].number(minimum=0)


def _parse_llm(node: Node, settings: Settings) -> None:
    llm = node.mapping(("providers", "default", "aliases"))
    if "providers" in llm:
        for name, pnode in llm["providers"].mapping().items():
            settings.providers.append(parse_provider(name, pnode))
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


def _parse_sampling(node: Node) -> SamplingSettings:
    fields = node.mapping(
        (
            "route",
            "fallback_on_host_error",
            "tools",
            "max_concurrent",
            "max_queued",
            "keepalive_seconds",
            *SAMPLING_CHECK_KEYS,
        )
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
        checks=parse_sampling_checks(fields),
    )


def _parse_elicitation(node: Node) -> ElicitationSettings:
    fields = node.mapping(("route", "url_mode", "sensitive_form", "non_interactive", "auto_answers"))
    defaults = ElicitationSettings()
    return ElicitationSettings(
        auto_answers=parse_auto_answers(fields["auto_answers"]) if "auto_answers" in fields else (),
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


def _parse_approval(node: Node, where: str) -> ApprovalSettings:
    fields_ = node.mapping(("channels", "timeout", "review_response", "quorum", "webhook"))
    settings = ApprovalSettings()
    if "webhook" in fields_:  # its grammar: config/approval_grammar.py
        webhook = parse_webhook(fields_["webhook"], where)
        settings = replace(settings, webhook=webhook, channels=(*settings.channels, "webhook"))
    if "quorum" in fields_:
        settings = replace(settings, quorum=parse_quorum(fields_["quorum"]))
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
        if ("webhook" in channels) != (settings.webhook is not None):
            raise cnode.error(
                f"{cnode.label} lists webhook but approval has no webhook: section (url, secret_env or secret_file)"
                if settings.webhook is None
                else f"{cnode.label} does not list webhook, but approval.webhook is set: add webhook to the list "
                "(where in the order it is asked), or remove the webhook section"
            )
        settings = replace(settings, channels=tuple(channels))
    if "quorum" in fields_:
        check_quorum(fields_["quorum"], settings.quorum, settings.channels)
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

"""The policy file: load, validate, and derive the settings the proxy runs with.

Everything is validated at start, with the position of the mistake, so the proxy never
discovers a typo in the middle of a session. Without a policy file, providers come from the
environment (OPENAI_API_KEY / OPENAI_BASE_URL, ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from mcp_sampling_proxy.llm.base import ModelSpec, ProviderConfig
from mcp_sampling_proxy.yamlnodes import Node, PolicyError, load

PROVIDER_TYPES = ("openai", "anthropic", "console")
ROUTES = ("auto", "proxy", "host")
ACTIONS = ("allow", "deny", "prompt")
METHODS = ("sampling", "elicitation")
ERAS = ("handshake", "any")

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"
# Environment variables the proxy reads as LLM secrets; never passed to the upstream child.
WELL_KNOWN_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@dataclass(frozen=True)
class Rule:
    """One `rules[]` entry. `when` holds the conditions (all must match); empty matches all."""

    name: str
    action: str
    when: dict[str, object] = field(default_factory=dict)
    message: str | None = None
    line: int = 0  # where the rule starts in the file, for explanations


@dataclass(frozen=True)
class SamplingSettings:
    route: str = "auto"
    fallback_on_host_error: bool = False
    advertise_tools: bool = True  # offer `sampling.tools` upstream when the adapter can use tools


@dataclass
class Settings:
    """Everything the proxy needs from the policy file (or the environment)."""

    providers: list[ProviderConfig] = field(default_factory=list)
    default_provider: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    rules: list[Rule] = field(default_factory=list)
    audit_path: str | None = None
    pass_env: tuple[str, ...] = ()
    shutdown_timeout: float = 5.0
    era: str = "handshake"  # handshake: answer server/discover so hosts fall back to initialize
    source: str = "environment"  # the policy file path, or "environment"

    def secret_env_vars(self) -> set[str]:
        """Names of environment variables holding the proxy's own LLM keys."""
        names = {p.api_key_env for p in self.providers if p.api_key_env}
        names.update(WELL_KNOWN_KEY_VARS)
        return names - set(self.pass_env)


def load_settings(path: str | None, environ: dict[str, str] | None = None) -> Settings:
    """Load the policy file at `path`, or derive settings from the environment."""
    environ = dict(os.environ) if environ is None else environ
    if path is None:
        return settings_from_environment(environ)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy file: {exc.strerror}") from None
    settings = parse_settings(text, path)
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
        providers.append(ProviderConfig(
            name=name,
            type=name,
            base_url=environ.get(url_var) or None,
            api_key_env=key_var,
            models=(ModelSpec(environ.get(model_var, default_model)),),
        ))
    return Settings(providers=providers)


def parse_settings(text: str, where: str) -> Settings:
    """Validate a policy document; raises PolicyError naming FILE:LINE:COL."""
    root = load(text, where)
    settings = Settings(source=where)
    if root is None:
        return settings
    top = root.mapping(("llm", "sampling", "rules", "audit", "upstream"))
    if "llm" in top:
        _parse_llm(top["llm"], settings)
    if "sampling" in top:
        settings.sampling = _parse_sampling(top["sampling"])
    if "rules" in top:
        settings.rules = [_parse_rule(node, i) for i, node in enumerate(top["rules"].sequence())]
    if "audit" in top:
        audit = top["audit"].mapping(("path",))
        if "path" in audit:
            settings.audit_path = os.path.expanduser(audit["path"].str())
    if "upstream" in top:
        upstream = top["upstream"].mapping(("pass_env", "shutdown_timeout", "era"))
        if "era" in upstream:
            settings.era = upstream["era"].choice(ERAS)
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
                raise target.error(
                    f"alias '{hint}' points at model '{model}', which no provider lists in models"
                )
            settings.aliases[hint.lower()] = model


_PROVIDER_KEYS = (
    "type", "base_url", "api_key_env", "models", "timeout", "max_attempts", "tools", "headers",
)


def _parse_provider(name: str, node: Node) -> ProviderConfig:
    fields = node.mapping(_PROVIDER_KEYS)
    if "type" not in fields:
        raise node.error(f"provider '{name}' needs a type: one of {', '.join(PROVIDER_TYPES)}")
    ptype = fields["type"].choice(PROVIDER_TYPES)
    models: list[ModelSpec] = []
    if "models" in fields:
        models = [_parse_model(m) for m in fields["models"].sequence()]
    if not models and ptype != "console":
        raise node.error(f"provider '{name}' needs models: [MODEL, ...] (the first is the default)")
    if ptype == "console" and not models:
        models = [ModelSpec("console")]
    kwargs: dict[str, object] = {}
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
    if "timeout" in fields:
        tnode = fields["timeout"]
        if tnode.is_mapping():
            t = tnode.mapping(("connect", "read"))
            if "connect" in t:
                kwargs["connect_timeout"] = t["connect"].number(minimum=0.1)
            if "read" in t:
                kwargs["read_timeout"] = t["read"].number(minimum=0.1)
        else:
            kwargs["read_timeout"] = tnode.number(minimum=0.1)
    if "max_attempts" in fields:
        kwargs["max_attempts"] = fields["max_attempts"].int(minimum=1)
    if "tools" in fields:
        kwargs["supports_tools"] = fields["tools"].bool()
    if "headers" in fields:
        kwargs["headers"] = {k: v.str() for k, v in fields["headers"].mapping().items()}
    return ProviderConfig(name=name, type=ptype, models=tuple(models), **kwargs)  # type: ignore[arg-type]


def _parse_model(node: Node) -> ModelSpec:
    if not node.is_mapping():
        return ModelSpec(node.str())
    fields = node.mapping(("name", "cost", "speed", "intelligence"))
    if "name" not in fields:
        raise node.error("a model entry written as a mapping needs name: MODEL")
    ratings = {
        key: fields[key].number(minimum=0, maximum=1) for key in ("cost", "speed", "intelligence") if key in fields
    }
    return ModelSpec(fields["name"].str(), **ratings)


def _parse_sampling(node: Node) -> SamplingSettings:
    fields = node.mapping(("route", "fallback_on_host_error", "tools"))
    return SamplingSettings(
        route=fields["route"].choice(ROUTES) if "route" in fields else "auto",
        fallback_on_host_error=fields["fallback_on_host_error"].bool()
        if "fallback_on_host_error" in fields
        else False,
        advertise_tools=fields["tools"].bool() if "tools" in fields else True,
    )


_WHEN_KEYS = ("server", "method")


def _parse_rule(node: Node, index: int) -> Rule:
    fields = node.mapping(("name", "when", "action", "message"))
    if "action" not in fields:
        raise node.error(f"rule {index + 1} needs an action: one of {', '.join(ACTIONS)}")
    action = fields["action"].choice(ACTIONS)
    name = fields["name"].str() if "name" in fields else f"rule-{index + 1}"
    when: dict[str, object] = {}
    if "when" in fields and fields["when"].value() is not None:
        for key, cond in fields["when"].mapping(_WHEN_KEYS).items():
            if key == "method":
                when[key] = cond.choice(METHODS)
            else:
                when[key] = cond.str()
    message = fields["message"].str() if "message" in fields else None
    return Rule(name=name, action=action, when=when, message=message, line=node.node.start_mark.line + 1)

"""What the policy says about an LLM provider: its type, endpoint, key source, models and how to run
a CLI provider (read by config/settings.py, used by the adapters in providers/).

`KINDS` is the one table of provider types: what the policy accepts for each and how the proxy treats
it. A new type is a row here, its adapter in providers/ and a line in providers/registry.py (see
CONTRIBUTING.md); nothing else names the types.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProviderKind:
    """One provider type, as the policy and the proxy know it."""

    name: str  # what `type:` says
    http: bool  # speaks HTTP to an endpoint: base_url and key settings apply; its client is made at start
    runs_command: bool = False  # runs a CLI: command settings apply, endpoint and key settings do not
    default_models: tuple[str, ...] = ()  # when the policy lists none (empty: `models:` is required)
    no_tools: str | None = None  # why it can never serve a request that offers tools (None: `tools:` says)
    api: str | None = None  # the API it speaks, as OpenTelemetry's GenAI conventions name it


@dataclass(frozen=True)
class ModelSpec:
    """A configured model and optional 0..1 ratings (higher is better: cheaper, faster, smarter)."""

    name: str
    cost: float | None = None
    speed: float | None = None
    intelligence: float | None = None
    # OpenAI reasoning model (o-series, GPT-5): max_completion_tokens, no temperature; None: by name
    reasoning: bool | None = None


COMMAND_PRESETS = ("claude", "codex", "gemini", "llm")
COMMAND_DEFAULT_MODEL = "default"  # a command's model of this name: the CLI's own default, no model flag


@dataclass(frozen=True)
class CommandSpec:
    """How a `type: command` provider runs its CLI (see providers/command.py).

    Either a `preset` (claude, codex, gemini, llm: argv and output format built in) or a custom
    `argv` whose `{model}`, `{prompt}` and `{output_file}` placeholders are filled in per call.
    """

    preset: str | None = None
    argv: tuple[str, ...] = ()  # custom command; for a preset, extra arguments (`args:`)
    output: str = "text"  # text | json
    prompt: str = "stdin"  # stdin | arg
    # output: json: dotted paths (`choices.0.message.content`) to the answer and, optionally, usage
    text_path: str | None = None
    input_tokens_path: str | None = None
    output_tokens_path: str | None = None
    stop_reason_path: str | None = None
    # key variables the proxy otherwise withholds from what it starts, given to this CLI (`pass_env:`)
    pass_env: tuple[str, ...] = ()


@dataclass(frozen=True)
class AzureSpec:
    """Azure OpenAI: the deployment URL and api-version (the key goes in an `api-key` header)."""

    api_version: str
    deployment: str | None = None  # None: the chosen model's name is the deployment name


@dataclass(frozen=True)
class ProviderConfig:
    """One `llm.providers.NAME` entry of the policy file (or one derived from the environment)."""

    name: str
    type: str  # a key of KINDS
    base_url: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None  # exactly one of the three key sources
    api_key_command: tuple[str, ...] | None = None
    # The key read from api_key_file / api_key_command at start (see keys.py): memory only, no repr.
    api_key: str | None = field(default=None, repr=False, compare=False)
    models: tuple[ModelSpec, ...] = ()
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    total_timeout: float = 300.0  # the whole call, retries and backoff included (a drip-feeding LLM)
    max_attempts: int = 3  # total attempts, including the first
    backoff_base: float = 0.5  # seconds; doubled per attempt, with jitter
    backoff_max: float = 30.0  # also caps how long a Retry-After is honoured
    supports_tools: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    # the header that carries the key as is (Azure: api-key); None: the provider's own (Bearer for OpenAI)
    api_key_header: str | None = None
    azure: AzureSpec | None = None
    command: CommandSpec | None = None  # type: command only

    @property
    def kind(self) -> ProviderKind:
        return KINDS[self.type]


KINDS: dict[str, ProviderKind] = {
    kind.name: kind
    for kind in (
        ProviderKind("openai", http=True, api="openai"),
        ProviderKind("anthropic", http=True, api="anthropic"),
        ProviderKind("console", http=False, default_models=("console",), no_tools="the console cannot use tools"),
        ProviderKind(
            "command",
            http=False,
            runs_command=True,
            default_models=(COMMAND_DEFAULT_MODEL,),
            no_tools="command providers cannot use tools",
        ),
    )
}
PROVIDER_TYPES = tuple(KINDS)

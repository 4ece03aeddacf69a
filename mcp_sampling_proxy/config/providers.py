"""What the policy says about an LLM provider: its type, endpoint, key source, models and how to run
a CLI provider (read by config/settings.py, used by the adapters in providers/).

`KINDS` is the one table of provider types: what the policy accepts for each and how the proxy treats
it. A new type is a row here, its adapter in providers/ and a line in providers/registry.py (see
CONTRIBUTING.md); nothing else names the types.
"""

from __future__ import annotations

import dataclasses

from msgspec import Struct


class ProviderKind(Struct, frozen=True):
    """One provider type, as the policy and the proxy know it."""

    name: str  # what `type:` says
    http: bool  # speaks HTTP to an endpoint: base_url and key settings apply; its client is made at start
    runs_command: bool = False  # runs a CLI: command settings apply, endpoint and key settings do not
    default_models: tuple[str, ...] = ()  # when the policy lists none (empty: `models:` is required)
    no_tools: str | None = None  # why it can never serve a request that offers tools (None: `tools:` says)
    api: str | None = None  # the API it speaks, as OpenTelemetry's GenAI conventions name it


class ModelSpec(Struct, frozen=True):
    """A configured model and optional 0..1 ratings (higher is better: cheaper, faster, smarter)."""

    name: str
    cost: float | None = None
    speed: float | None = None
    intelligence: float | None = None
    # OpenAI reasoning model (o-series, GPT-5): max_completion_tokens, no temperature; None: by name
    reasoning: bool | None = None


class PresetFacts(Struct, frozen=True):
    """What a command preset costs and how it keeps the CLI's own agent at bay: shown in `--help`,
    the docs and `doctor`, so nobody learns from an invoice which meter a sampling request ran on."""

    meter: str  # what a run spends
    tools_off: str  # how the preset runs the CLI with its tools disabled
    key_vars: tuple[str, ...] = ()  # one of these must be set for the CLI to sign in (empty: its own login)


# As the CLIs are in late 2026. Claude: since 2026-06-15 `claude -p` and the Agent SDK draw from a separate
# programmatic credit pool at API rates. Gemini CLI: consumer (Google account) sign-in retired on 2026-06-18.
PRESET_FACTS: dict[str, PresetFacts] = {
    "claude": PresetFacts(
        meter="Anthropic's programmatic credit pool, billed at API rates (since 2026-06-15; not a Pro/Max "
        "plan's usage limits)",
        tools_off='--tools "" (no built-in tools) and --strict-mcp-config (none of your MCP servers)',
    ),
    "codex": PresetFacts(
        meter="your ChatGPT plan's Codex limits (signed in with ChatGPT; an API-key sign-in spends API credit)",
        tools_off="-c features.shell_tool=false -c features.unified_exec=false -c web_search=disabled "
        "-c mcp_servers={} (no shell, no web search, none of your MCP servers), in a read-only sandbox",
    ),
    "gemini": PresetFacts(
        meter="a Gemini API key at API rates (Google-account sign-in for Gemini CLI ended 2026-06-18)",
        tools_off="a settings file of its own (GEMINI_CLI_SYSTEM_SETTINGS_PATH): no built-in tools, no MCP "
        "servers, no extensions",
        key_vars=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    ),
    "llm": PresetFacts(
        meter="the API key `llm keys` holds for the model's provider (a local model: nothing)",
        tools_off="none are offered (llm runs tools only when given -T/--functions)",
    ),
}
COMMAND_PRESETS = tuple(PRESET_FACTS)


def preset_key_vars(preset: str | None) -> tuple[str, ...]:
    """The API key variables a preset's CLI signs in with: withheld from the server, given to the CLI."""
    facts = PRESET_FACTS.get(preset or "")
    return facts.key_vars if facts else ()


# CLIs that cannot be run safely as a provider, and why: the policy refuses them as a preset or a command.
REFUSED_CLIS: dict[str, str] = {
    "agy": "Antigravity's `agy -p` writes its answer to the terminal, not to stdout, so the proxy cannot capture "
    "it, and it runs tools without asking; use Gemini through an API key instead (preset: gemini with "
    "GEMINI_API_KEY set, or type: openai with base_url: https://generativelanguage.googleapis.com/v1beta/openai)",
}

# Flags that let an agent CLI act without asking (permission or sandbox bypasses): never in a provider's command.
BYPASS_FLAGS = (
    "--dangerously-skip-permissions",
    "--allow-dangerously-skip-permissions",
    "--dangerously-bypass-approvals-and-sandbox",
    "--full-auto",
    "--yolo",
)
# Options whose value turns the asking off: `--permission-mode bypassPermissions`, `--approval-mode yolo`.
BYPASS_VALUES = {
    "--permission-mode": ("bypassPermissions", "acceptEdits"),
    "--approval-mode": ("yolo", "auto_edit"),
    "--sandbox": ("danger-full-access",),
    "-s": ("danger-full-access",),
}


def bypass_flag(argv: tuple[str, ...] | list[str], *, short_yolo: bool = False) -> str | None:
    """The first argument of `argv` that lets an agent CLI act without asking, or None. `-y` is Gemini's
    `--yolo` (`short_yolo`: checked for the gemini preset only; in other programs it means other things)."""
    for index, arg in enumerate(argv):
        name, _, inline = arg.partition("=")
        if name in BYPASS_FLAGS or (short_yolo and arg == "-y"):
            return arg
        value = inline if inline else (argv[index + 1] if index + 1 < len(argv) else "")
        if name in BYPASS_VALUES and value in BYPASS_VALUES[name]:
            return f"{name} {value}"
    return None


COMMAND_DEFAULT_MODEL = "default"  # a command's model of this name: the CLI's own default, no model flag


class CommandSpec(Struct, frozen=True):
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


class AzureSpec(Struct, frozen=True):
    """Azure OpenAI: the deployment URL and api-version (the key goes in an `api-key` header)."""

    api_version: str
    deployment: str | None = None  # None: the chosen model's name is the deployment name


@dataclasses.dataclass(frozen=True)
class ProviderConfig:
    """One `llm.providers.NAME` entry of the policy file (or one derived from the environment)."""

    name: str
    type: str  # a key of KINDS
    base_url: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None  # exactly one of the three key sources
    api_key_command: tuple[str, ...] | None = None
    # The key read from api_key_file / api_key_command at start (see keys.py): memory only, no repr.
    api_key: str | None = dataclasses.field(default=None, repr=False, compare=False)
    models: tuple[ModelSpec, ...] = ()
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    total_timeout: float = 300.0  # the whole call, retries and backoff included (a drip-feeding LLM)
    max_attempts: int = 3  # total attempts, including the first
    backoff_base: float = 0.5  # seconds; doubled per attempt, with jitter
    backoff_max: float = 30.0  # also caps how long a Retry-After is honoured
    supports_tools: bool = True
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
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

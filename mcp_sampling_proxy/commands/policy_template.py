"""The policy file `init` writes: a shipped policy, its comments kept, with the chosen LLM and an audit log.

Text in, text out (no YAML round trip), so every comment of the shipped file survives; the result
is parsed with the proxy's own loader before it is written, so `init` cannot write a file the
proxy would refuse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from mcp_sampling_proxy.config.providers import ModelSpec

SHIPPED = ("default", "local-llm", "trusted-autoapprove", "strict")
_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*:")


def shipped_text(name: str) -> str:
    """The text of a shipped policy (`policies/NAME.yaml`, installed inside the package)."""
    return (resources.files("mcp_sampling_proxy") / "policies" / f"{name}.yaml").read_text(encoding="utf-8")


def shipped_summary(name: str) -> str:
    """The first comment line of a shipped policy, after its file name: what it is for."""
    first = shipped_text(name).splitlines()[0].lstrip("# ")
    return first.split(":", 1)[1].strip() if ":" in first else first


@dataclass(frozen=True)
class LLMChoice:
    """The provider `init` puts first: the proxy's default LLM."""

    name: str  # the provider's name in the file
    type: str  # openai | anthropic
    base_url: str
    key_env: str | None  # None: no key (a local server)
    model: str


def render(
    template: str,
    source: str,
    llm: LLMChoice | None,
    audit_path: str,
    shipped_models: tuple[ModelSpec, ...] = (),
    *,
    is_default: bool = True,
) -> str:
    """The file to write: a header, the shipped text with `llm` put in, and an audit section.

    `shipped_models`: the models the shipped policy gives a provider of the same name, kept after
    the chosen one so its rules' `model:` settings still resolve."""
    lines = template.splitlines()
    if llm is not None:
        lines = _with_llm(lines, llm, shipped_models)
    if not any(line.startswith("audit:") for line in lines):
        lines = [line for line in lines if not re.match(r"#\s*(audit:|path: \S*audit\.jsonl)", line.strip())]
        while lines and not lines[-1].strip():
            lines.pop()
        lines += [
            "",
            "audit:                               # one hash-chained line per decision",
            f"  path: {audit_path}   # read it: mcp-sampling-proxy audit tail|verify|summary {audit_path}",
            "  content: none                      # none (sizes and SHA-256 only) | redacted | full",
        ]
    if not any(line.startswith("sandbox:") for line in lines):
        lines += [
            "",
            "# sandbox:                           # servers run in a bubblewrap sandbox where it works;",
            '#   read: ["~"]                      # narrow it: your home read-only for servers ...',
            "#   write: [~/projects]              # ... but these; docs/sandbox.md has profiles per server",
            "#   network: true                    # mode: required refuses to run a server unconfined",
        ]
    header = [
        "# mcp-sampling-proxy policy, written by `mcp-sampling-proxy init` from the shipped policy",
        f"# '{source}.yaml'. "
        + (
            "The proxy uses this file when it is started without --policy."
            if is_default
            else "Start the proxy with --policy and this file's path to use it."
        ),
        "# After editing, check it: mcp-sampling-proxy policy check FILE (or: mcp-sampling-proxy doctor).",
        '# Every setting: the README\'s "Policy file" section.',
        "#",
    ]
    return "\n".join(header + lines) + "\n"


def _with_llm(lines: list[str], llm: LLMChoice, shipped_models: tuple[ModelSpec, ...]) -> list[str]:
    block = _provider_block(llm, shipped_models)
    start = next((i for i, line in enumerate(lines) if line.startswith("llm:")), None)
    if start is None:  # no llm section: add one after the leading comments
        at = 0
        while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()):
            at += 1
        section = [
            "llm:",
            "  providers:",
            *block,
            f"  default: {llm.name}                    # answers sampling unless a rule names another provider",
            "",
        ]
        return lines[:at] + section + lines[at:]
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    section = [line for line in lines[start:end] if not line.startswith("  default:")]
    providers = next((i for i, line in enumerate(section) if line.startswith("  providers:")), None)
    if providers is None:
        section[1:1] = ["  providers:", *block]
    else:
        section = _drop_provider(section, providers, llm.name)
        section[providers + 1 : providers + 1] = block
    while section and not section[-1].strip():
        section.pop()
    section += [f"  default: {llm.name}                    # answers sampling unless a rule names another provider", ""]
    return lines[:start] + section + lines[end:]


def _drop_provider(section: list[str], providers: int, name: str) -> list[str]:
    """The llm section without the shipped provider called `name` (the chosen one takes its place)."""
    head = f"    {name}:"
    start = next(
        (
            i
            for i in range(providers + 1, len(section))
            if section[i].startswith(head) and section[i][len(head) : len(head) + 1] in ("", " ")
        ),
        None,
    )
    if start is None:
        return section
    end = start + 1
    while end < len(section) and (not section[end].strip() or section[end].startswith("      ")):
        end += 1
    return section[:start] + section[end:]


def _provider_block(llm: LLMChoice, shipped_models: tuple[ModelSpec, ...]) -> list[str]:
    from mcp_sampling_proxy.hosts.yaml_doc import yaml_string  # values typed or listed by a server: quoted

    chosen = next(
        (_model_text(m) for m in shipped_models if m.name == llm.model), yaml_string(llm.model)
    )  # keep its ratings
    models = [chosen] + [_model_text(m) for m in shipped_models if m.name != llm.model]
    key = (
        f"      api_key_env: {yaml_string(llm.key_env)}            # the variable holding the key (the host "
        "config's env); never the key itself"
        if llm.key_env
        else "      # no key: a local server (add api_key_env: VAR if yours wants one)"
    )
    return [
        f"    {llm.name}:                         # chosen at init; checked with a tiny request",
        f"      type: {llm.type}",
        f"      base_url: {yaml_string(llm.base_url)}",
        key,
        f"      models: [{', '.join(models)}]   # the first is the default",
    ]


def _model_text(model: ModelSpec) -> str:
    extra = {
        k: getattr(model, k) for k in ("cost", "speed", "intelligence", "reasoning") if getattr(model, k) is not None
    }
    if not extra:
        return model.name
    inner = ", ".join(
        [f"name: {model.name}", *(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in extra.items())]
    )
    return "{" + inner + "}"

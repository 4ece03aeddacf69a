"""The policy file `init` writes: a shipped policy, its comments kept, with the chosen LLM and an audit log.

Text in, text out (no YAML round trip), so every comment of the shipped file survives; the result
is parsed with the proxy's own loader before it is written, so `init` cannot write a file the
proxy would refuse.
"""

from __future__ import annotations

import re
import textwrap
from importlib import resources

from msgspec import Struct

from mcp_sampling_proxy.config.providers import ModelSpec
from mcp_sampling_proxy.hosts.yaml_doc import yaml_string  # values typed or listed by a server: quoted

SHIPPED = ("default", "local-llm", "trusted-autoapprove", "strict")
_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*:")


def shipped_text(name: str) -> str:
    """The text of a shipped policy (`policies/NAME.yaml`, installed inside the package)."""
    return (resources.files("mcp_sampling_proxy") / "policies" / f"{name}.yaml").read_text(encoding="utf-8")


def shipped_summary(name: str) -> str:
    """What a shipped policy is for: its first comment paragraph, whole, after its file name."""
    words: list[str] = []
    for line in shipped_text(name).splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        words.append(text)
    first = " ".join(words)
    return first.split(":", 1)[1].strip() if first.startswith(f"{name}.yaml:") else first


class LLMChoice(Struct, frozen=True):
    """The provider `init` puts first: the proxy's default LLM."""

    name: str  # the provider's name in the file
    type: str  # openai | anthropic
    base_url: str
    key_env: str | None  # the variable holding the key; None: no key variable (a local server, or key_file)
    model: str
    key_file: str | None = None  # the key file, as the policy names it (`~/...`): the proxy reads it itself


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
            "# sandbox:                           # servers run in a bubblewrap sandbox, by grant, where it works:",
            "#   servers:                         # your files read-only to them, your secrets out of sight;",
            "#     notes: {write: [~/notes]}      # grant one a directory (`wrap` writes known servers' grants)",
            "#     fetch: {network: [docs.python.org]}   # network: true (public hosts) | false | host | a list",
            "#   mode: required                   # refuse to run a server unconfined where there is no sandbox",
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
        "# Every setting: docs/reference/policy.md (the docs site's Policy file reference).",
        (
            "# The audit log is audit.path below: `mcp-sampling-proxy audit tail` (or verify, summary) reads it"
            if is_default
            else "# The audit log is audit.path below: `mcp-sampling-proxy audit tail FILE` (or verify, summary)"
        ),
        (
            "# when FILE is left out. `mcp-sampling-proxy doctor` says whether each host's proxy gets its key."
            if is_default
            else "# reads it. `mcp-sampling-proxy doctor --policy FILE` says whether each host's proxy gets its key."
        ),
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
    chosen = next(
        (_model_text(m) for m in shipped_models if m.name == llm.model), yaml_string(llm.model)
    )  # keep its ratings
    models = [chosen] + [_model_text(m) for m in shipped_models if m.name != llm.model]
    if llm.key_file:
        key = (
            f"      api_key_file: {yaml_string(llm.key_file)}   # yours, mode 0600: the proxy reads it at start, "
            "whatever environment the host gives it"
        )
    elif llm.key_env:
        key = (
            f"      api_key_env: {yaml_string(llm.key_env)}            # the variable holding the key (the host "
            "config's env); never the key itself"
        )
    else:
        key = "      # no key: a local server (add api_key_file: FILE or api_key_env: VAR if yours wants one)"
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


def without_providers(text: str, missing: dict[str, str], models: dict[str, tuple[str, ...]]) -> str:
    """`text` with the providers in `missing` (name -> why) commented out, and what names them: rule
    `provider:`/`model:` lines, aliases, `default:`. With none left, the whole `llm:` section goes, and the
    proxy takes its LLM from the environment as it does without one. Text in, text out, like `render`."""
    lines = text.splitlines()
    gone = {m for name in missing for m in models.get(name, ())}
    start = next((i for i, line in enumerate(lines) if line.startswith("llm:")), None)
    if start is None or not missing:
        return text
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    kept = [name for name in models if name not in missing]
    if not kept:
        why = "; ".join(f"{name}: {reason}" for name, reason in missing.items())
        note = (
            f"init commented out the llm section ({why}). Without it the proxy takes its LLM from "
            "OPENAI_API_KEY / ANTHROPIC_API_KEY in the environment the host gives it. To use a provider "
            "below, uncomment it with api_key_file: FILE (a 0600 file holding the key) in place of api_key_env."
        )
        section = [
            *textwrap.wrap(note, 98, initial_indent="# ", subsequent_indent="# "),
            *[f"# {line}" if line.strip() else line for line in lines[start:end]],
        ]
        lines[start:end] = section
        return "\n".join(_without_references(lines, set(missing), gone)) + "\n"
    out = lines[:start]
    at = start
    while at < end:
        line = lines[at]
        head = next((name for name in missing if line.startswith(f"    {name}:")), None)
        if head is not None:
            out.append(
                f"    # {head}: commented out by init, {missing[head]}; uncomment it with api_key_file: FILE instead"
            )
            out.append(f"#{line}")
            at += 1
            while at < end and lines[at].startswith("      "):
                out.append(f"#{lines[at]}")
                at += 1
            continue
        if line.startswith("  default:") and line.split(":", 1)[1].split("#")[0].strip() in missing:
            out.append(f"  default: {kept[0]}                    # the first provider init kept")
        elif line.startswith("    ") and not line.startswith("     ") and _value(line) in gone:
            out.append(f"#{line}   # its model's provider is commented out")  # an alias
        else:
            out.append(line)
        at += 1
    for i, line in enumerate(out):  # an aliases table left without aliases: commented out too
        if line.startswith("  aliases:") and not any(
            x.startswith("    ") for x in out[i + 1 :] if x.strip() and not x.startswith("#")
        ):
            out[i] = f"#{line}"
    return "\n".join(_without_references(out + lines[end:], set(missing), gone)) + "\n"


def _value(line: str) -> str:
    """The scalar after the first colon of a `key: value` line, unquoted, without a trailing comment."""
    value = line.split(":", 1)[1].split(" #")[0].strip() if ":" in line else ""
    return value.strip("'\"")


def _without_references(lines: list[str], providers: set[str], models: set[str]) -> list[str]:
    """Rules' `provider:` and `model:` lines that name what is commented out, commented out too."""
    out: list[str] = []
    in_rules = False
    for line in lines:
        if line and not line[0].isspace() and not line.startswith("#"):
            in_rules = line.startswith("rules:")
        stripped = line.strip().removeprefix("- ")
        names = providers if stripped.startswith("provider:") else models if stripped.startswith("model:") else None
        if in_rules and names is not None and _value(stripped) in names:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# {stripped}   # commented out by init with its provider")
        else:
            out.append(line)
    return out

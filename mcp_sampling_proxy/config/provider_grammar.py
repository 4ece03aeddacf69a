"""The grammar of a provider entry under `llm.providers` in the policy file.

Each entry is read from its YAML node and checked whole at start (errors name FILE:LINE:COL and
what is allowed): its type (the table in providers.py), the keys that apply to that type (an HTTP
API's endpoint, key source, timeouts and headers, or a command's preset or argv), and its models.
`settings.py` reads the rest of the `llm` section (default, aliases) and the other sections.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from mcp_sampling_proxy.config.providers import (
    COMMAND_PRESETS,
    KINDS,
    PROVIDER_TYPES,
    REFUSED_CLIS,
    AzureSpec,
    CommandSpec,
    ModelSpec,
    ProviderConfig,
    bypass_flag,
)
from mcp_sampling_proxy.notation.yamlnodes import Node, shown_value

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


def parse_provider(name: str, node: Node) -> ProviderConfig:
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


def _refuse_bypass(name: str, node: Node, argv: tuple[str, ...] | list[str], *, short_yolo: bool) -> None:
    """A provider never runs its CLI with a permission or sandbox bypass: a server's prompt would then
    drive an agent that acts on the user's machine without asking anyone."""
    flag = bypass_flag(argv, short_yolo=short_yolo)
    if flag is not None:
        raise node.error(
            f"provider '{name}': {flag} lets the CLI act without asking; a provider never runs with a "
            "permission or sandbox bypass (the presets run their CLI with its tools off): remove it"
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
        refused = REFUSED_CLIS.get(str(fields["preset"].value()))
        if refused is not None:
            raise fields["preset"].error(f"provider '{name}': preset {fields['preset'].value()} is refused: {refused}")
        spec["preset"] = fields["preset"].choice(COMMAND_PRESETS)
        for key in ("output", "json", "prompt"):
            if key in fields:
                raise fields[key].error(
                    f"provider '{name}': {key} is set by preset {spec['preset']}; use command: for your own"
                )
        if "args" in fields:
            spec["argv"] = tuple(_command_args(fields["args"]))
            _refuse_bypass(name, fields["args"], spec["argv"], short_yolo=spec["preset"] == "gemini")
    else:
        if "args" in fields:
            raise fields["args"].error(f"provider '{name}': args: goes with preset:; put them in command:")
        argv = _command_args(fields["command"])
        if not argv or not argv[0]:
            raise fields["command"].error(f"provider '{name}': command needs a program: [PROGRAM, ARGS...]")
        refused = REFUSED_CLIS.get(os.path.basename(argv[0]))
        if refused is not None:
            raise fields["command"].error(f"provider '{name}': {os.path.basename(argv[0])} is refused: {refused}")
        _refuse_bypass(name, fields["command"], argv, short_yolo=os.path.basename(argv[0]) == "gemini")
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

"""MkDocs hook.

- SECURITY.md lives at the repository's root (where GitHub shows it) and is included in the site as
  docs/security.md; its links into docs/ are written from the root, so they are made relative to docs/ here.
- The command-line reference (docs/reference/cli.md) is generated at build time where a page holds a
  `<!-- generated: WHAT -->` line: every command's `--help` from its real parser, the environment
  variables and the exit statuses from `mcp_sampling_proxy.commands.reference`, so it cannot drift
  from the code. A marker this hook does not know fails the build.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mcp_sampling_proxy.commands import reference

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _anchor(command: reference.Command) -> str:
    """The id MkDocs' toc gives the command's heading (lowercase words joined by '-')."""
    return "-".join(command.line.split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _commands_table() -> str:
    rows = [
        f"| [`{command.line}`](#{_anchor(command)}) | {_cell(command.summary)} |" for command in reference.commands()
    ]
    return "\n".join(["| command | what it does |", "|---|---|", *rows])


def _help_sections() -> str:
    sections = []
    for command in reference.commands():
        level = "#" * (2 + max(0, len(command.words) - 1))
        text = reference.help_text(command.parser).rstrip()
        sections.append(f"{level} {command.line}\n\n```text\n{text}\n```\n")
    return "\n".join(sections)


def _environment() -> str:
    rows = [f"| `{var.name}` | {_cell(var.meaning)} |" for var in reference.ENVIRONMENT]
    named = "".join(f"\n- {text}" for text in reference.NAMED_VARIABLES)
    return "\n".join(["| variable | what it does |", "|---|---|", *rows]) + (
        "\n\nAnd the variables whose names you give:\n" + named
    )


def _exit_statuses() -> str:
    def table(statuses: tuple[reference.ExitStatus, ...]) -> str:
        rows = [f"| {status.status} | {_cell(status.meaning)} |" for status in statuses]
        return "\n".join(["| status | when |", "|---|---|", *rows])

    return (
        "The proxy (`mcp-sampling-proxy [OPTIONS] -- COMMAND` or `--url URL`):\n\n"
        + table(reference.PROXY_EXIT_STATUSES)
        + "\n\nThe subcommands:\n\n"
        + table(reference.SUBCOMMAND_EXIT_STATUSES)
    )


GENERATORS: dict[str, Callable[[], str]] = {
    "commands": _commands_table,
    "help": _help_sections,
    "environment": _environment,
    "exit-statuses": _exit_statuses,
}


def _generate(match: re.Match[str]) -> str:
    what = match.group(1)
    if what not in GENERATORS:
        raise ValueError(f"docs/hooks.py: no generator for <!-- generated: {what} -->; known: {', '.join(GENERATORS)}")
    return GENERATORS[what]()


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "security.md":
        markdown = re.sub(r"\]\(docs/", "](", markdown)
    return MARKER.sub(_generate, markdown)

"""Who a server is: the operator's name for it, never the name the server gives itself.

The upstream is untrusted (issue #10), so its `serverInfo.name` cannot pick the `server:` rule
or the remembered approval that applies to it. The operator names a server with `--name`
(`wrap` writes it from the host config's entry key); without it the name is derived from the
upstream command or URL. Names are compared after `normalise` (NFKC, casefold, trim) in rules
and at run time alike, and names holding control or invisible characters are refused, so a
leading space, a zero-width space or a fullwidth letter cannot make one name look like another.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Sequence
from urllib.parse import urlsplit

# Cc control, Cf format (zero-width, bidi), Cs/Co/Cn surrogate, private, unassigned,
# Zl/Zp line and paragraph separators: nothing a reader can see, so nothing a name may hold.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_RUNNERS = frozenset(
    {
        "npx",
        "pnpx",
        "bunx",
        "uvx",
        "pipx",
        "uv",
        "pnpm",
        "yarn",
        "bun",
        "deno",
        "node",
        "python",
        "python3",
        "docker",
        "podman",
        "sh",
        "bash",
        "env",
        "npm",
    }
)
_RUNNER_WORDS = frozenset({"run", "exec", "dlx", "x", "tool"})  # `uv run`, `pnpm dlx`, `pipx run`, `docker run`
_SCRIPT_SUFFIX = re.compile(r"\.(py|js|mjs|cjs|ts|sh|exe)$", re.IGNORECASE)


def bad_character(name: str) -> str | None:
    """A description of the first control or invisible character in `name`, or None.

    Whitespace other than a plain space counts as invisible too (a no-break space reads as one)."""
    for index, char in enumerate(name):
        category = unicodedata.category(char)
        if category in _INVISIBLE or (category == "Zs" and char != " "):
            label = unicodedata.name(char, "unnamed character")
            return f"U+{ord(char):04X} ({label}) at position {index + 1}"
    return None


def normalise(name: str) -> str:
    """The form names are compared in: NFKC, casefolded, trimmed."""
    return unicodedata.normalize("NFKC", name).casefold().strip()


def shown(name: str) -> str:
    """`name` with control and invisible characters made visible as \\uXXXX, for logs."""
    return "".join(f"\\u{ord(c):04x}" if bad_character(c) else c for c in name)


def server_phrase(name: str, reported: str | None = None) -> str:
    """A server as a human is shown it: the operator's name for it in single quotes, then, when it
    reports another name for itself, that claim in double quotes, marked as the server's own. No quote
    nests in another, and the claim holds no double quote of its own, so it cannot seem to end early
    and pass its text for the proxy's: `'notes' (which calls itself "Notes Pro")`."""
    if reported is None:
        return f"'{name}'"
    claim = reported.replace('"', "'")
    return f"'{name}' (which calls itself \"{claim}\")"


def derive_from_command(command: Sequence[str]) -> str:
    """A name from the upstream command line: the script or package it runs.

    `npx -y @acme/foo-server` -> `@acme/foo-server`, `python /srv/summarizer.py` -> `summarizer`,
    `uvx pkg@1.2` -> `pkg`, `/usr/bin/foo-mcp --flag` -> `foo-mcp`. Runners (npx, uvx, python, node,
    docker ...) and their options are skipped; the first remaining word names the server."""
    words = list(command)
    if not words:
        return "upstream"
    runner = _clean(words[0])
    index = 0
    while index < len(words):
        word = words[index]
        base = os.path.basename(word)
        if word in ("-c", "-e", "--eval", "-p", "--print"):  # inline code names nothing: the runner it is
            return runner
        if word == "-m" and index + 1 < len(words):  # python -m package.module
            return _visible(words[index + 1], runner)
        if index == 0 or _is_runner(base) or word.startswith("-") or base in _RUNNER_WORDS:
            if index == 0 and not _is_runner(base):
                return _visible(_clean(word), "upstream")
            index += 1
            continue
        return _visible(_clean(word), runner)
    return runner


def _visible(name: str, fallback: str) -> str:
    """`name` unless it could not be typed into a rule (empty, spaces, invisible characters)."""
    return name if name and not any(c.isspace() for c in name) and bad_character(name) is None else fallback


def derive_from_url(url: str) -> str:
    """A name from a Streamable HTTP URL: host and path (`mcp.example.com/tools/mcp`)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return (host + parts.path.rstrip("/")) or url


def _is_runner(base: str) -> bool:
    stem = base.lower().removesuffix(".exe")
    return stem in _RUNNERS or re.fullmatch(r"python3(\.\d+)?|node\d*", stem) is not None


def _clean(word: str) -> str:
    """A package spec or path as a name: no version suffix, no directory, no script extension."""
    if word.startswith("@"):  # @scope/name[@version]
        scope, _, rest = word.partition("/")
        return f"{scope}/{rest.split('@', 1)[0]}" if rest else word
    if "://" not in word:
        word = os.path.basename(word.rstrip("/")) or word
    word = word.split("@", 1)[0] if not word.startswith("@") else word
    word = re.split(r"==|>=|<=|~=", word, maxsplit=1)[0]
    return _SCRIPT_SUFFIX.sub("", word) or word

"""Which environment variables the upstream and the proxy's helpers get.

The server gets the host's environment without the proxy's own LLM keys (`api_key_env` names, the
well-known key variables, a preset's) and its own settings; the proxy's helpers (a CLI provider,
`api_key_command`, the browser) get the proxy's environment after those keys were taken out of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

# Environment variables the proxy reads as LLM secrets; never passed to the upstream child.
WELL_KNOWN_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
OWN_SETTINGS_PREFIX = "MCP_SAMPLING_PROXY_"


def child_environment(environ: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """The host's environment without the proxy's LLM keys and its own settings."""
    hidden = set(secrets)
    return {k: v for k, v in environ.items() if k not in hidden and not k.startswith(OWN_SETTINGS_PREFIX)}


# The proxy's key variables, once it has read them (commands/cli.py: `withhold`): out of its environment,
# so nothing it starts inherits them (a CLI provider, `api_key_command`, the browser it opens for a URL
# elicitation); a same-user server could read those processes' /proc/PID/environ where no sandbox hides them.
_WITHHELD: dict[str, str] = {}


def withhold(names: Iterable[str]) -> None:
    """Take these variables out of the process environment (their values stay here, for `helper_environment`)."""
    for name in names:
        value = os.environ.pop(name, None)
        if value is not None:
            _WITHHELD[name] = value


def helper_environment(passed: Iterable[str] = ()) -> dict[str, str]:
    """The environment for a process the proxy starts: its own, plus the withheld variables the
    configuration names for that process (a CLI provider's `pass_env`)."""
    env = dict(os.environ)
    env.update({name: _WITHHELD[name] for name in passed if name in _WITHHELD})
    return env


def withheld(name: str) -> str | None:
    return _WITHHELD.get(name)

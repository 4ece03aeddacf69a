"""Which environment variables the upstream must not see, guessed before the policy is parsed.

A host waits for `initialize` while the proxy starts, and parsing the policy costs tens of
milliseconds of imports (yaml, the rule types). The child's environment depends on the policy
only through the `api_key_env` names it hides and the `upstream.pass_env` names it shows, so a
look at the file's text can start the server at once: every name the text mentions is hidden
(a superset of the exact set, never fewer). Once the policy is parsed, `cli` compares the guess
with the exact set and restarts the server in the rare case the guess hid too much.

The guess is only made where a scalar's characters must appear in the text as they are: no
backslash escapes, no `pass_env` (it would show names the guess hides). Otherwise the policy is
parsed before the server starts, as before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from mcp_sampling_proxy.config.providers import preset_key_vars

# Environment variables the proxy reads as LLM secrets; never passed to the upstream child.
WELL_KNOWN_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
OWN_SETTINGS_PREFIX = "MCP_SAMPLING_PROXY_"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def child_environment(environ: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """The host's environment without the proxy's LLM keys and its own settings."""
    hidden = set(secrets)
    return {k: v for k, v in environ.items() if k not in hidden and not k.startswith(OWN_SETTINGS_PREFIX)}


def hidden_names_guess(policy_text: str | None, environ: Mapping[str, str]) -> set[str] | None:
    """Names to hide from the child before the policy is parsed; None when the text is not
    plain enough to be sure the guess covers every `api_key_env` (parse first then)."""
    if policy_text is None:  # keys come from the well-known variables only
        return set(WELL_KNOWN_KEY_VARS)
    if "\\" in policy_text or "pass_env" in policy_text:
        return None
    words = set(_NAME.findall(policy_text))
    presets = {var for preset in words for var in preset_key_vars(preset)}  # `preset: gemini`: GEMINI_API_KEY
    return set(WELL_KNOWN_KEY_VARS) | ((words | presets) & set(environ))


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

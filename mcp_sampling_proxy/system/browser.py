"""The user's browser, for a page the user should see (a URL elicitation they consented to, an OAuth
login): opened, never fetched by the proxy itself."""

from __future__ import annotations

import os
import shlex
import subprocess
import webbrowser

OPENER_ENV = "MCP_SAMPLING_PROXY_URL_OPENER"  # a command run with the URL (tests; custom browsers)


def open_url(url: str) -> bool:
    """Open a URL in the user's browser; False when nothing could."""
    command = os.environ.get(OPENER_ENV)
    if command:
        return subprocess.run([*shlex.split(command), url], check=False).returncode == 0
    return webbrowser.open(url)

"""DNS rebinding against `serve` on loopback: `--allow-host` (a Host a balancer on this machine sends)
takes a Host header's value only, and says so at start. The 421s and 403s themselves are played in process:
tests/unit/front/test_serve_rebinding_played.py."""

from __future__ import annotations

import subprocess

from helpers.serving import KITCHEN_SINK_COMMAND
from helpers.support import PROXY, proxy_env


def test_allow_host_takes_a_host_header_value_only() -> None:
    done = subprocess.run(
        [*PROXY, "serve", "--allow-host", "http://x/", *KITCHEN_SINK_COMMAND],
        env=proxy_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--allow-host 'http://x/': give a Host header's value, HOST:PORT" in done.stderr

"""Where the console script and `python -m mcp_sampling_proxy` begin.

For a server's command line, the process is hardened and, when the record of its last sandboxed start
still holds, the server spawned here, before anything heavy is imported (transport/early_start.py): its
start then overlaps the proxy's. The command line runs as always after that.
"""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    server = bool(argv) and argv[0].startswith("-") and "--" in argv
    if server:
        from mcp_sampling_proxy.system.hardening import (  # start-up: a server's command line only
            become_subreaper,
            harden_process,
            mark_relay,
        )
        from mcp_sampling_proxy.system.stop_signals import hold_stop_signals  # start-up: a server's only
        from mcp_sampling_proxy.transport import early_start  # start-up: a server's command line only

        # as commands/cli.py does them, before any spawn: it does them again, and says what failed
        harden_process()
        hold_stop_signals()
        mark_relay()
        become_subreaper()
        early_start.attempt(argv)
    from mcp_sampling_proxy.commands.cli import main as run_command_line  # start-up: after the early spawn

    try:
        return run_command_line()
    finally:
        if server:
            early_start.discard()  # an early server the command line did not take (it failed first)

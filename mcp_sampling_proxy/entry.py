"""Where the console script and `python -m mcp_sampling_proxy` begin.

For a server's command line, the process is made non-dumpable before the command line's modules load
(msgspec, argparse, the policy's): its environment, keys included, is readable by the user's other
processes only for the interpreter's own start-up and this module's few imports.
"""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0].startswith("-") and "--" in argv:
        from mcp_sampling_proxy.system.hardening import harden_process  # start-up: a server's command line only

        harden_process()  # commands/cli.py does it again, and says what failed
    from mcp_sampling_proxy.commands.cli import main as run_command_line  # start-up: after the hardening

    return run_command_line()

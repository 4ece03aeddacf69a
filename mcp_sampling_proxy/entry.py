"""Where the console script and `python -m mcp_sampling_proxy` begin.

For a server's command line, the process is hardened, and then, in this order: handed to a warm server, when
one runs for launches like this one (system/warm_start.py: a proxy forked with its modules loaded runs it, and
this process stands in for it until it ends), or is starting (another launch of the same host's start began
it: this one waits for it); else a warm server is started for the next launches, and the server spawned
here, when the record of its last sandboxed start still holds, before anything heavy is imported
(transport/early_start.py): its start then overlaps the proxy's. The command line runs as always after that.
"""

from __future__ import annotations

import os
import sys

# (lean: cli.py, which every command runs, loads it)
from mcp_sampling_proxy.system.warm_start import SERVER_FLAG, WARM_COMM

# what a start imports before it answers `initialize`: a warm server loads them once for every proxy it forks
PRELOADED = (
    "mcp_sampling_proxy.commands.cli",
    "mcp_sampling_proxy.runtime",
    "mcp_sampling_proxy.transport.early_start",
    "mcp_sampling_proxy.transport.start_record",
    "mcp_sampling_proxy.transport.sandbox",
    "mcp_sampling_proxy.transport.bwrap_probe",
    "mcp_sampling_proxy.transport.netns",
    "mcp_sampling_proxy.hosts.registry",
    "mcp_sampling_proxy.config.paths",
    "anyio._backends._asyncio",
    "anyio._core._sockets",
    "anyio.streams.memory",
    "anyio.streams.stapled",
    "anyio.streams.tls",
    "anyio.to_thread",
    "concurrent.futures.thread",
    "uvloop",
)
# what a proxy loads at its first request, off the path to `initialize` (runtime.warm_up, the scans): loaded
# once by a warm server when no launch waits for it, so that the forks after find it loaded
PRELOADED_LATER = (
    "mcp_sampling_proxy.providers.openai",
    "mcp_sampling_proxy.providers.anthropic",
    "mcp_sampling_proxy.providers.command",
    "mcp_sampling_proxy.services.secret_scan",
    "mcp_sampling_proxy.approval.forms",
)


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == [SERVER_FLAG]:  # started by a launch, not a person
        return _warm_server(argv[1:])
    if not (argv and argv[0].startswith("-") and "--" in argv):
        return _command_line(server=False)

    from mcp_sampling_proxy.system.hardening import harden_process  # start-up: a server's command line only

    # as commands/cli.py does them, before any spawn: it does them again, and says what failed. The prctl
    # first: until it, this process's environment (its keys) is readable by the user's other processes
    harden_process()
    # start-up: as hardening
    from mcp_sampling_proxy.system.stop_signals import first_held, hold_stop_signals, take_held
    from mcp_sampling_proxy.system.warm_start import launch, where  # start-up: as hardening

    hold_stop_signals()
    found = where(os.environ)
    if found is not None:
        # (before this process becomes a subreaper: a warm server it starts is not below it)
        status = launch(argv, os.environ, take_held, found, first_held)
        if status is not None:
            return status
    return _server_start()


def _server_start(*, warm: bool = False) -> int:
    """A server's command line, in this process: a launch's, or (`warm`) a proxy's a warm server forked."""
    # start-up: a server's command line only
    from mcp_sampling_proxy.system.hardening import become_subreaper, harden_process, mark_relay
    from mcp_sampling_proxy.system.stop_signals import hold_stop_signals
    from mcp_sampling_proxy.transport import early_start

    if warm:  # bubblewrap's check, begun before the early start instead of after it (cli.py's): no module
        # load to hide behind, and the plan waits for it
        from mcp_sampling_proxy.transport.bwrap_probe import start_probe  # loaded by the warm server

        start_probe()
    harden_process()
    hold_stop_signals()
    mark_relay()
    become_subreaper()
    early_start.attempt(sys.argv[1:])
    return _command_line(server=True)


def _command_line(*, server: bool) -> int:
    from mcp_sampling_proxy.commands.cli import main as run_command_line  # start-up: after the early spawn

    try:
        return run_command_line()
    finally:
        if server:
            from mcp_sampling_proxy.transport import early_start  # start-up: loaded by a server's start already

            early_start.discard()  # an early server the command line did not take (it failed first)


def _warm_server(args: list[str]) -> int:
    """The warm server's life (system/warm_start.py): non-dumpable, since it holds each launch's environment
    until it forks; it loads PRELOADED, then forks a proxy that runs `_server_start` for each launch."""
    # the warm server's own: no other command line needs them
    import contextlib
    import importlib

    from mcp_sampling_proxy.system.hardening import harden_process, name_process
    from mcp_sampling_proxy.system.warm_start import serve

    if len(args) != 4:
        sys.stderr.write(f"mcp-sampling-proxy: {SERVER_FLAG} is started by the proxy itself, not by hand\n")
        return 2
    harden_process()
    name_process(WARM_COMM)

    def load(names: tuple[str, ...] = PRELOADED) -> None:
        """What fails to load here (an optional library missing) is what a fork loads as a cold proxy would,
        and fails there the same way, with its own message."""
        for name in names:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    loaded: list[str] = []  # the module files of what was loaded, listed once a load is done

    def load_later() -> None:
        load(PRELOADED_LATER)
        loaded.clear()  # (listed again at the next stamps: what this loads joins them)
        # made from the libraries alone (no setting, no key): a fork finds them made
        from mcp_sampling_proxy.approval.forms import prepare as prepare_forms
        from mcp_sampling_proxy.services.secret_scan import make_detectors

        for prepare in (make_detectors, prepare_forms):
            with contextlib.suppress(Exception):
                prepare()

    def code() -> object:
        from mcp_sampling_proxy.commands.cli import own_code  # loaded by `load` already

        files = own_code()
        found = _stamps_or_none(files)
        return None if found is None else tuple(zip(files, found, strict=True))

    def libraries() -> object:
        """The stamps of the module files `load` loaded (the interpreter's and the libraries' with the proxy's;
        not what the warm server's own work imports later, which would read as a change)."""
        if not loaded:
            found = (getattr(module, "__file__", None) for module in list(sys.modules.values()))
            loaded.extend(sorted({path for path in found if isinstance(path, str)}))
        return _stamps_or_none(loaded)

    return serve(
        args, load=load, load_later=load_later, code=code, libraries=libraries, run=lambda: _server_start(warm=True)
    )


def _stamps_or_none(files: list[str]) -> tuple[tuple[int, int], ...] | None:
    """The files' modification times and sizes; None when one is gone (an upgrade removed it): never the
    stamps a warm server started with."""
    from mcp_sampling_proxy.transport.plan_facts import stamps  # loaded by the warm server's `load` already

    try:
        return stamps(files)
    except OSError:
        return None

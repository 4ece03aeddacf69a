"""Once a session's handlers are gone, the proxy's exit survives one more stop signal of each kind and dies
of the next: a forked proxy gets `pkill -f`'s signal twice (directly, and from its launch), and dying of the
second while it closes its audit log lost its exit status. In process: the signals are this test's own."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from mcp_sampling_proxy.system import stop_signals

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture
def own_handlers() -> Iterator[None]:
    """The stop signals' handlers as they were, and nothing absorbed, after the test."""
    kept = {sig: signal.getsignal(sig) for sig in stop_signals.STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)
        stop_signals._absorbed_already.clear()


def test_the_next_stop_signal_is_absorbed_and_the_one_after_is_not(own_handlers: None) -> None:
    for sig in stop_signals.STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)  # as the session's end leaves them: a signal now would kill
    stop_signals.absorb_one()
    os.kill(os.getpid(), signal.SIGHUP)  # (run at once: a signal to oneself is handled before kill returns)
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # absorbed: the next one takes the default action
    assert signal.getsignal(signal.SIGTERM) is stop_signals._absorb  # each kind absorbs its own
    stop_signals.absorb_one()  # called again (a failed session's end): no second absorption of SIGHUP
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) is stop_signals._absorb

"""Stop signals that arrive while the proxy starts, kept for the session to act on; and one more, once
the session has ended, absorbed.

The server is spawned before the proxy's slower imports, so that both start at once; the session's
own handlers (runtime.run_session) come a few hundred milliseconds later, more on a loaded machine.
A host that gives up in that window (its SIGTERM) would meet Python's default action, and the proxy
would die without stopping the server or saying why. Held here, the signal becomes the same orderly
stop as later. A caught handler is reset by exec, so the server does not inherit it.

The session's handlers go with its event loop, which leaves the default action for the rest of the
proxy's exit: `absorb_one` takes the next stop signal of each kind there.
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_held: list[str] = []


def _note(signum: int, _frame: FrameType | None) -> None:
    _held.append(signal.Signals(signum).name)


def hold_stop_signals() -> None:
    """From now until `take_held`'s caller installs its own handlers, remember stop signals instead of
    dying of them."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _note)


def first_held() -> str | None:
    """The first stop signal received since `hold_stop_signals` (still held), or None: for a wait at start
    (an `api_key_command`) that should end when the host gives up."""
    return _held[0] if _held else None


def take_held() -> list[str]:
    """The stop signals received since `hold_stop_signals`, oldest first, forgotten once taken."""
    held = list(_held)
    _held.clear()
    return held


def absorb_one() -> None:
    """From now on (the session over, its handlers removed), the next stop signal of each kind is absorbed
    and the one after it takes the default action. The proxy is ending already: a forked proxy gets a
    `pkill -f`'s signal twice (directly, and passed on by its launch), and the second may come while it
    closes its audit log and clients; dying of it, the proxy would not say its status (its launch then
    exits 1: a crash, to the host). A stop that hangs from here (a thread that never ends) still ends at the
    next signal. Called again, it arms no signal it already absorbed."""
    for sig in STOP_SIGNALS:
        if sig not in _absorbed_already:
            signal.signal(sig, _absorb)


_absorbed_already: set[int] = set()


def _absorb(signum: int, _frame: FrameType | None) -> None:
    _absorbed_already.add(signum)
    signal.signal(signum, signal.SIG_DFL)

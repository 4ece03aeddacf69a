"""An approval's time limit while its question waits its turn and once it is shown, in process: how far a
channel (the terminal) or a console on the proxy's socket can move it."""

from __future__ import annotations

import json

import anyio
import pytest

from mcp_sampling_proxy.approval.channels import WAIT_CEILING, clock, timed
from mcp_sampling_proxy.approval.console.server import ConsoleServer, _Pending

pytestmark = pytest.mark.anyio


def says(console: ConsoleServer, question: str, kind: str) -> None:
    """What a console sends on the proxy's socket about `question`."""
    console._receive(json.dumps({"type": kind, "id": question}).encode())


async def test_no_time_counts_while_waiting_up_to_a_ceiling_and_the_whole_limit_once_shown() -> None:
    with timed(2.0) as scope:
        timing = clock()
        assert timing is not None
        timing.waiting()  # behind a question nobody answers, or a form left open: not forever
        assert scope.deadline == pytest.approx(anyio.current_time() + 2.0 * WAIT_CEILING, abs=0.5)
        timing.shown()
        assert scope.deadline == pytest.approx(anyio.current_time() + 2.0, abs=0.5)
    assert clock() is None  # outside an approval (an elicitation) there is no clock to move


async def test_a_console_moves_a_questions_limit_once_however_often_it_says_so() -> None:
    """A console on the proxy's socket says when it queues and shows a question; saying it again and again
    (a console that would keep a question open for ever) moves nothing more."""
    console = ConsoleServer(lambda: "server", lambda: "host")
    with timed(2.0) as scope:
        console._pending["1"] = _Pending({"type": "pending", "id": "1"}, clock())
        says(console, "1", "shown")
        shown_until = scope.deadline
        await anyio.sleep(0.05)
        for kind in ("shown", "waiting", "shown"):
            says(console, "1", kind)
        assert scope.deadline == shown_until
    with timed(2.0) as scope:
        console._pending["2"] = _Pending({"type": "pending", "id": "2"}, clock())
        says(console, "2", "waiting")
        waiting_until = scope.deadline
        await anyio.sleep(0.05)
        says(console, "2", "waiting")
        assert scope.deadline == waiting_until  # queued once: no renewal of the ceiling
        assert waiting_until <= anyio.current_time() + 2.0 * WAIT_CEILING

"""Progress keep-alive: a host's `tools/call` stays alive while the proxy waits on a human or an LLM.

Hosts time a tool call out (60 s is common) while the server's sampling or elicitation request
waits for an approval, a typed form or a slow model. When the host's request carries
`_meta.progressToken`, the relay sends `notifications/progress` on that token at a steady
interval; hosts that reset their timeout on progress then keep waiting.

The spec requires each notification on a token to carry a higher `progress` than the one before.
So the relay remembers, per token, the last value the host was sent (the server's own or ours):
a keep-alive carries that value plus a tiny step (`STEP`), so the bar the host shows does not
move, and when a later notification of the server's own would not be above the last keep-alive,
its `progress` is raised to just above it (its `total` and `message` stay); this is the only case
where the relay changes a server message, and only servers stepping by less than a millionth of a
unit meet it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from msgspec import Struct

STEP = 1e-6  # what a keep-alive adds to the last value: invisible in any progress bar


class Waiting(Struct):
    """What a served request is waiting on now (None: nothing the host should be kept alive for)."""

    status: str | None


_WAITING: ContextVar[Waiting | None] = ContextVar("mcp_sampling_proxy_waiting", default=None)


@contextmanager
def waiting_for(status: str) -> Iterator[None]:
    """Name the wait the current request is in ("waiting for approval"); the keep-alive
    notifications carry it as their message. A no-op outside a request the relay serves."""
    holder = _WAITING.get()
    if holder is None:
        yield
        return
    previous, holder.status = holder.status, status
    try:
        yield
    finally:
        holder.status = previous


@contextmanager
def serving(status: str | None) -> Iterator[Waiting]:
    """The holder of one served request's wait, visible to `waiting_for` in the serving task."""
    holder = Waiting(status)
    token = _WAITING.set(holder)
    try:
        yield holder
    finally:
        _WAITING.reset(token)


def above(value: float) -> float:
    """The next keep-alive value: higher than `value` (also where floats are too coarse for STEP)."""
    return max(value + STEP, math.nextafter(value, math.inf))


def usable_token(token: Any) -> bool:
    """Progress tokens are strings or integers (not booleans)."""
    return isinstance(token, str) or (isinstance(token, int) and not isinstance(token, bool))


def same_token(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


class Progress(Struct):
    """The progress the host has been sent on one of its requests' tokens."""

    token: Any
    sent: float | None = None  # the last value on this token, the server's or ours
    ours: float | None = None  # the last value the proxy chose (a keep-alive, or a raised server value)
    total: float | None = None  # the server's last total, repeated so a host's bar stays put

    def keepalive(self, message: str) -> dict[str, Any]:
        """The params of the next keep-alive notification (and remember its value)."""
        value = 0.0 if self.sent is None else above(self.sent)
        self.sent = self.ours = value
        params: dict[str, Any] = {"progressToken": self.token, "progress": value, "message": message}
        if self.total is not None and value <= self.total:
            params["total"] = self.total
        return params

    def from_server(self, params: dict[str, Any]) -> float | None:
        """Note a server notification on this token; the value to send instead when its own would
        not be above our last keep-alive (None: send it as it is)."""
        value = params.get("progress")
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        total = params.get("total")
        if isinstance(total, int | float) and not isinstance(total, bool):
            self.total = float(total)
        if self.ours is not None and value <= self.ours:
            self.sent = self.ours = above(self.sent if self.sent is not None else self.ours)
            return self.sent
        self.sent = float(value)
        return None

"""structlog set-up: everything goes to stderr, never stdout (stdout carries the protocol).

Every event passes `scrub_secrets` before it is rendered: a configured key is masked whole (never
run by run: masking what matched a guess would tell a server that reads the log which guess was
right). Text a provider or CLI wrote is scrubbed of key runs before it becomes an event.

`Throttle` keeps a flood of one warning (a process connecting to the console socket in a loop)
from burying the rest of the log."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any

import orjson
import structlog
from structlog.typing import EventDict

from mcp_sampling_proxy.text.redact import Redactor
from mcp_sampling_proxy.text.sanitize import strip_controls, terminal_line

LEVELS = ("debug", "info", "warning", "error")

_redactor = Redactor()


def set_secrets(secrets: Iterable[str]) -> None:
    """The key values to mask in every log line from now on (call once keys are known)."""
    global _redactor
    _redactor = Redactor(secrets)


def known_secrets() -> tuple[str, ...]:
    """The configured key values every log line is scrubbed of (for error texts that leave the
    proxy some other way, e.g. to the server)."""
    return _redactor.secrets


def add_secret(value: str) -> None:
    """One more value to mask (OAuth tokens, learned and refreshed while the proxy runs)."""
    global _redactor
    if value and value not in _redactor.secrets:
        _redactor = Redactor((*_redactor.secrets, value))


def scrub_secrets(_logger: Any, _method: str, event: EventDict) -> EventDict:
    if not _redactor.secrets:
        return event
    return {
        k: _redactor.scrub_value(v)
        if isinstance(v, str | dict | list | tuple)
        else _redactor.scrub(str(v))
        if isinstance(v, BaseException)
        else v
        for k, v in event.items()
    }


def terminal_safe(_logger: Any, _method: str, event: EventDict) -> EventDict:
    """Every string of the event without escape sequences and control characters, on one line
    (a traceback keeps its lines): fields often carry a server's text (an error it sent, a method name)."""

    def clean(key: str, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return strip_controls(value) if key == "exception" else terminal_line(value)

    return {k: clean(k, v) for k, v in event.items()}


def configure(level: str = "info", fmt: str | None = None, *, cache: bool = True) -> None:
    """Log to stderr as JSON (for hosts that collect it) or as readable lines on a terminal. `cache`: each
    logger keeps this configuration from its first use on (a later `configure` no longer reaches it)."""
    if fmt is None:
        fmt = "console" if sys.stderr.isatty() else "json"
    renderers: list[structlog.typing.Processor]
    if fmt == "json":  # JSON escapes every control character
        renderers = [structlog.processors.JSONRenderer(serializer=_json_line)]
    else:  # the console renderer writes strings as they are: a server's text must not reach a terminal so
        renderers = [terminal_safe, structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            scrub_secrets,  # after format_exc_info: a traceback may quote a key too
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=cache,
    )


class _Stderr:
    """Whatever sys.stderr is when a line is written, not when logging was set up (a caller that swaps
    sys.stderr, such as a test capturing it, must not leave the logger holding a closed file)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _json_line(event: Any, **_: Any) -> str:
    """orjson for the stderr lines: a third of the stdlib's time per line."""
    try:
        return orjson.dumps(event, default=repr).decode()
    except TypeError:  # a lone surrogate or a huge int: the stdlib writes those
        return json.dumps(event, default=repr)


def stderr_until_configured() -> None:
    """JSON lines on stderr, scrubbed, for whatever logs before `configure()` runs: structlog's own
    default prints to stdout, where a stray line would corrupt the stdio protocol. Loggers are not
    cached, so `configure()` later takes over every one of them."""
    configure("info", "json", cache=False)


def get_logger(name: str = "mcp_sampling_proxy") -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger


class Throttle:
    """At most `burst` lines of one kind of event per `window` seconds. `admit()` says whether to log
    this one: None to stay quiet, else how many were left unlogged since the last one logged (0 most
    of the time; say it in the line). `quieted()` is True exactly once per window, on the first one
    held back: the moment to say that the rest are being counted."""

    def __init__(self, burst: int = 5, window: float = 60.0):
        self.burst, self.window = burst, window
        self._start = -window
        self._count = 0
        self._held = 0

    def admit(self) -> int | None:
        now = time.monotonic()
        if now - self._start >= self.window:
            self._start, self._count = now, 0
        self._count += 1
        if self._count > self.burst:
            self._held += 1
            return None
        held, self._held = self._held, 0
        return held

    def quieted(self) -> bool:
        return self._count == self.burst + 1


stderr_until_configured()

"""The record API: `AuditLog` writes one decision record per request, without stalling the relay.

structlog formats: each `AuditLog` has a dedicated structlog logger (its own processor chain,
independent of the stderr logging configuration) whose processors shape the record (every field,
content digests or payload: records.py), mask secrets and scrub the configured API keys. Its
"logger" is the hash-chained file (chain_file.py), then the observers (telemetry).

One record per request, written once. A request is served inside `every_ending`; each stage's
`record(...)` fills in that request's one record (`PendingRecord`, in a context variable; later
fields override earlier ones: a review that rejects the LLM's answer turns a fulfilled record into
a rejected one, keeping its provider, model and tokens), and when the request ends, whatever the
ending, the record is written before the server sees the answer. When the log's locks are free
and the file is as this writer left it (the common case: no other proxy writes to it) the write
happens at once on the event loop: a worker thread's round trip costs more than the write itself
(~0.15 ms against ~0.02 ms). When another writer holds the lock, or wrote since (its tail must be
read back, and a foreign or torn one can be as large as whoever wrote it chose), the write is
done in a worker thread, so the relay does not stall on it (it would on a write into a stalled
network file system).
When it cannot be written, `AuditError` (a JSON-RPC internal error) replaces the answer: an
audited proxy does not answer what it could not record. If a background fsync fails, the log is
marked unusable and later requests get that error. A `record()` outside any request is written
at once; on the event loop, by a thread of its own when the write would have to wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Unpack, cast

import anyio
import orjson
import structlog
from msgspec import Struct
from structlog.typing import EventDict

from mcp_sampling_proxy.audit.chain_file import AuditError, ChainFile
from mcp_sampling_proxy.audit.records import DECISION_FIELDS, TEXT_FIELDS, AuditFields, AuditRecord, content_record
from mcp_sampling_proxy.config.child_env import WELL_KNOWN_KEY_VARS, withheld
from mcp_sampling_proxy.config.settings import AUDIT_CONTENT_MODES as CONTENT_MODES
from mcp_sampling_proxy.config.settings import DEFAULT_AUDIT_MAX_BYTES as DEFAULT_MAX_BYTES
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.text.redact import Redactor
from mcp_sampling_proxy.text.sanitize import one_line

if TYPE_CHECKING:
    from mcp_sampling_proxy.config.settings import Settings

log = get_logger("mcp_sampling_proxy.audit.recorder")

_NOT_GIVEN: Any = object()


class RequestNotes(Struct):
    """What the stages tell the observers (telemetry) of the request being served that the log does
    not keep: when the proxy's LLM call started and ended, the model asked for, the provider's type
    and URL. Never written to the log."""

    llm_call: tuple[int, int] | None = None  # time.time_ns() at its start and end
    request_model: str | None = None
    provider_type: str | None = None
    llm_url: str | None = None


# Records written by the request being served in this task (see `AuditLog.every_ending`).
class PendingRecord:
    """The one record of the request being served, filled in as it moves through the stages."""

    def __init__(self) -> None:
        self.fields: AuditFields | None = None  # None until a stage records an outcome
        self.params: Any = _NOT_GIVEN
        self.result: Any = None
        self.started_ns = time.time_ns()
        self.notes = RequestNotes()  # for observers (telemetry), never written to the log

    def fill(self, params: Any, result: Any, fields: AuditFields) -> None:
        self.fields = {**(self.fields or {}), **fields}
        if params is not _NOT_GIVEN:
            self.params = params
        if result is not _NOT_GIVEN:
            self.result = result


def _say_ending(fields: AuditFields) -> None:
    """One short info line on stderr per request, saying how it ended: a host keeps the proxy's stderr
    (Claude Desktop's mcp-server-NAME.log), often the only place a user looks. The audit record holds
    the rest (the reason, the tokens, the digests): the line names it by method, server and request id."""
    said: dict[str, object] = {}
    for key in ("method", "server", "request_id", "decision", "approver", "rule", "latency_ms"):
        value = fields.get(key)
        if value is not None:  # a string id is the server's to choose, of any length: an excerpt
            said[key] = one_line(value, 40) if isinstance(value, str) else value
    log.info("request ended", **said)


_PENDING: ContextVar[PendingRecord | None] = ContextVar("audit_pending", default=None)
# Set while `AuditLog._write` appends on the event loop: the file must not block on its locks.
_NOWAIT: ContextVar[bool] = ContextVar("audit_nowait", default=False)

# An observer sees each record as written (shaped, masked, scrubbed: content only as the audit's
# content mode allows), with when its request started and the notes its stages made.
Observer = Callable[[AuditRecord, int, RequestNotes], None]


def note(*, llm_call: tuple[int, int], request_model: str, provider_type: str, llm_url: str | None) -> None:
    """Tell the observers how the proxy's LLM call of the request being served went (`RequestNotes`)."""
    pending = _PENDING.get()
    if pending is not None:
        pending.notes = RequestNotes(llm_call, request_model, provider_type, llm_url)


class AuditLog:
    """Writes decision records to `path` (nothing at all when path is None)."""

    def __init__(
        self,
        path: str | None,
        *,
        content: str = "none",
        redact: Iterable[re.Pattern[str] | str] = (),
        fsync: bool | str = True,
        max_bytes: int = DEFAULT_MAX_BYTES,
        secrets: Iterable[str] = (),
        proxy_id: str | None = None,
        stamp: AuditFields | None = None,
    ):
        if content not in CONTENT_MODES:
            raise ValueError(f"content must be one of {', '.join(CONTENT_MODES)}, not {content!r}")
        self.path = path
        self.proxy_id = proxy_id or uuid.uuid4().hex[:12]
        self.content = content
        self.stamp: AuditFields = stamp or {}  # fields every record of this writer carries (serve's `replica`)
        self._redactor = Redactor(secrets, redact)
        self._file: ChainFile | None = None
        if path:
            self._file = ChainFile(path, self.proxy_id, fsync=fsync, max_bytes=max_bytes)
            self._file.start()
        self._sink = _Sink(self._file)
        self._late_writers: list[threading.Thread] = []
        # Reasons repeat (one per rule and outcome): ~15 patterns per text are run once per distinct text
        self._redacted_text = functools.lru_cache(maxsize=512)(lambda text: self._redactor.redact(text)[0])
        # A structlog logger of its own: these processors, whatever `log.configure` set for stderr.
        self._log = structlog.wrap_logger(
            self._sink,
            processors=[self._shape, self._mask, self._scrub],
            wrapper_class=structlog.BoundLogger,
            cache_logger_on_first_use=False,
        ).bind()

    def add_observer(self, observer: Observer) -> None:
        """Call `observer` with every record from now on (also without a log file)."""
        self._sink.observers.append(observer)

    @classmethod
    def from_settings(
        cls, settings: Settings, environ: Mapping[str, str] | None = None, *, stamp: AuditFields | None = None
    ) -> AuditLog:
        """The log `settings.audit` describes, scrubbing the values of the proxy's configured keys;
        `stamp`: fields written into every record (which replica of `serve` wrote it)."""
        environ = os.environ if environ is None else environ
        audit = settings.audit
        return cls(
            audit.path,
            content=audit.content,
            redact=audit.redact,
            fsync=audit.fsync,
            max_bytes=audit.max_bytes,
            secrets=configured_secrets(settings, environ),
            stamp=stamp,
        )

    @property
    def seq(self) -> int:
        """The seq of the last record this writer wrote (0 before any)."""
        return self._file.seq if self._file else 0

    def check_usable(self) -> None:
        """Raise AuditError now when the log could not be opened, before any LLM call is made:
        no tokens are spent on an answer that could not be recorded."""
        if self._file is not None and self._file.unusable:
            raise AuditError(
                f"the proxy's audit log cannot be written ({self._file.unusable}); the request is "
                "not answered without an audit record"
            )

    def record(self, *, params: Any = _NOT_GIVEN, result: Any = _NOT_GIVEN, **fields: Unpack[AuditFields]) -> None:
        """Record the outcome of the request being served (`params`/`result`: the request params
        and the result the server gets, for the content digests or payload). Inside `every_ending`
        it fills the request's one record, written when the request ends; elsewhere it writes at
        once (raising AuditError when it cannot); on the event loop, when the write would have to
        wait (another writer holds the lock, or wrote since), in a thread of its own, so the relay
        never waits for it (a failure is then logged)."""
        pending = _PENDING.get()
        if pending is not None:
            pending.fill(params, result, fields)
            return
        if not self._sink.active:
            return
        result = None if result is _NOT_GIVEN else result
        if not _on_event_loop():  # a command, a test: waiting for the lock stalls nobody
            self._log.append(
                "decision", _params=params, _result=result, _observed=(time.time_ns(), RequestNotes()), **fields
            )
            return
        deferred = self._append_now(params, result, (time.time_ns(), RequestNotes()), fields)
        if deferred is not None:
            writer = threading.Thread(target=self._finish_quietly, args=(deferred,), name="audit-write", daemon=True)
            self._late_writers = [w for w in self._late_writers if w.is_alive()] + [writer]  # close() waits for these
            writer.start()

    def _finish_quietly(self, deferred: _Deferred) -> None:
        with contextlib.suppress(AuditError):  # ChainFile logged it; nobody waits for this record
            self._sink.finish(deferred)

    async def _write(self, pending: PendingRecord) -> None:
        """Append the request's record on the event loop when the locks are free, else in a
        worker thread (see the module docstring)."""
        if not self._sink.active or pending.fields is None:
            return
        observed = (pending.started_ns, pending.notes)
        if not (_is_small(pending.params) and _is_small(pending.result)):
            # shaping the record of a large request (its digests, masks and the key scrub: seconds for
            # 30 MB, and the server chooses the size) is done with the write, in a worker thread
            await anyio.to_thread.run_sync(
                functools.partial(
                    self._log.append,
                    "decision",
                    _params=pending.params,
                    _result=pending.result,
                    _observed=observed,
                    **pending.fields,
                )
            )
            return
        deferred = self._append_now(pending.params, pending.result, observed, pending.fields)
        if deferred is not None:
            await anyio.to_thread.run_sync(self._sink.finish, deferred)

    def _append_now(
        self, params: Any, result: Any, observed: tuple[int, RequestNotes], fields: AuditFields
    ) -> _Deferred | None:
        """Shape and write the record without waiting for the file's locks; the record, finished
        but unwritten, when another writer holds them."""
        token = _NOWAIT.set(True)
        try:
            deferred: _Deferred | None = self._log.append(
                "decision", _params=params, _result=result, _observed=observed, **fields
            )
        finally:
            _NOWAIT.reset(token)
        return deferred

    @asynccontextmanager
    async def every_ending(self, fields: AuditFields, params: Any) -> AsyncIterator[PendingRecord]:
        """Serve one request inside this block; its one record is written when the block ends,
        before the server is answered. If it ends in an exception before any stage recorded an
        outcome (a malformed request that trips a bug, a peer's answer of the wrong type), the
        record says `error`; if it is cancelled (the server's notifications/cancelled, or the proxy
        shutting down while the LLM was answering), `cancelled`: a hostile server cannot make
        requests that leave no trace. `fields` is read when the request ends (the rule may be known
        by then). Unexpected exceptions come out as an RpcError the server can be shown."""
        pending = PendingRecord()
        token = _PENDING.set(pending)
        try:
            yield pending
        except AuditError:
            raise  # the record itself could not be written: nothing more to try
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, RpcError)
                else RpcError(
                    jsonrpc.INTERNAL_ERROR, f"mcp-sampling-proxy failed: {type(exc).__name__}: {one_line(str(exc))}"
                )
            )
            if pending.fields is None:
                log.warning("request ended in an error before it was audited; recording it", error=error.message)
                pending.fill(params, _NOT_GIVEN, {**fields, "decision": "error", "reason": error.message})
            await self._write(pending)
            if error is exc:
                raise
            raise error from exc
        except BaseException as exc:
            if pending.fields is None and isinstance(exc, anyio.get_cancelled_exc_class()):
                pending.fill(
                    params,
                    _NOT_GIVEN,
                    {
                        **fields,
                        "decision": "cancelled",
                        "reason": "cancelled before it ended: the server cancelled the request or the proxy shut down",
                    },
                )
            with anyio.CancelScope(shield=True):
                await self._write(pending)
            raise
        else:
            await self._write(pending)
        finally:
            _PENDING.reset(token)
            if pending.fields is not None:
                _say_ending({**fields, **pending.fields})

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until the records handed to a writer thread (`record` on the event loop while another writer
        held the file) are in the file: what reads the log back in the same process sees every decision."""
        for writer in list(self._late_writers):  # records written outside a request, waiting for the lock
            writer.join(timeout=timeout)

    def close(self) -> None:
        self.settle()
        if self._file is not None:
            self._file.close()

    # -- structlog processors -----------------------------------------------------------------
    def _shape(self, _logger: Any, _method: str, event: EventDict) -> EventDict:
        params = event.pop("_params", _NOT_GIVEN)
        result = event.pop("_result", None)
        observed = event.pop("_observed", None)
        record: dict[str, Any] = {"event": event.pop("event")}
        for key in DECISION_FIELDS:
            record[key] = event.pop(key, None)
        record.update(event)  # extra facts, e.g. `limit`
        for key, value in self.stamp.items():
            record.setdefault(key, value)
        try:
            record["content"] = None if params is _NOT_GIVEN else content_record(params, result, self.content)
        except (RecursionError, ValueError, TypeError) as exc:  # hostile params (too deep to encode): say so
            record["content"] = {"mode": self.content, "unrecordable": f"{type(exc).__name__}: {exc}"}
        if observed is not None:
            record[_OBSERVED] = observed
        return record

    def _mask(self, _logger: Any, _method: str, record: EventDict) -> EventDict:
        for key in TEXT_FIELDS:
            if isinstance(record.get(key), str):
                record[key] = self._redacted_text(record[key])
        if isinstance(record.get("checks"), list):  # an external check's reason is free text too
            record["checks"] = [
                {**c, "reason": self._redacted_text(c["reason"])} if isinstance(c.get("reason"), str) else c
                for c in record["checks"]
            ]
        content = record.get("content")
        if self.content == "redacted" and isinstance(content, dict):
            # Only the payloads: a digest's hex could look like a card number.
            parts = [
                (content.get("system"), "text"),
                (content.get("tools"), "tools"),
                (content.get("response"), "result"),
                *((m, "message") for m in content.get("messages") or []),
            ]
            present = [(part, key) for part, key in parts if isinstance(part, dict) and key in part]
            redacted, count = self._redactor.redact_values([part[key] for part, key in present])
            for (part, key), value in zip(present, redacted, strict=True):
                part[key] = value
            content["redactions"] = count
        return record

    def _scrub(self, _logger: Any, _method: str, record: EventDict) -> EventDict:
        observed = record.pop(_OBSERVED, None)
        try:  # one encoding answers both questions for most records: no lone surrogates, no key in it
            encoded = orjson.dumps(record, default=str)
        except TypeError:  # a lone surrogate, or nesting deeper than orjson writes: the full walk
            scrubbed = self._redactor.scrub_value(_fix_surrogates(record))
        else:
            scrubbed = self._redactor.scrub_value(record) if self._redactor.may_hold_key_json(encoded) else record
        if observed is not None:
            scrubbed[_OBSERVED] = observed
        return cast(EventDict, scrubbed)


_OBSERVED = "\x00observed"  # (started_ns, notes) on their way to the observers; never written


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Deferred(Struct):
    """A finished record that could not be written without waiting for another writer's lock."""

    record: AuditRecord
    started_ns: int
    notes: RequestNotes


class _Sink:
    """Where a finished record goes: the chained file (when there is one), then each observer.
    An observer's failure is logged, never the request's: telemetry is not the record of truth."""

    def __init__(self, file: ChainFile | None):
        self.file = file
        self.observers: list[Observer] = []

    @property
    def active(self) -> bool:
        return self.file is not None or bool(self.observers)

    def append(self, **record: Any) -> _Deferred | None:
        """Write `record` and tell the observers; when called by `AuditLog._write` on the event
        loop and another writer holds the file's lock, return it unwritten for `finish`."""
        started_ns, notes = record.pop(_OBSERVED, (time.time_ns(), RequestNotes()))
        finished = cast(AuditRecord, record)  # shaped by AuditLog's processors
        if self.file is not None:
            if _NOWAIT.get():
                if not self.file.try_append(finished):
                    return _Deferred(finished, started_ns, notes)
            else:
                self.file.append(**finished)
        self._notify(finished, started_ns, notes)
        return None

    def finish(self, deferred: _Deferred) -> None:
        """Write a record `append` handed back, waiting for the lock (in a worker thread)."""
        if self.file is not None:
            self.file.append(**deferred.record)
        self._notify(deferred.record, deferred.started_ns, deferred.notes)

    def _notify(self, record: AuditRecord, started_ns: int, notes: RequestNotes) -> None:
        for observer in self.observers:
            try:
                observer(record, started_ns, notes)
            except Exception as exc:  # see the docstring
                log.warning(
                    "an audit observer failed",
                    observer=getattr(observer, "__qualname__", "?"),
                    error=f"{type(exc).__name__}: {exc}",
                )


SMALL_RECORD_TEXT = 64 * 1024  # bytes of text in a request (and its result) whose record is shaped on the loop
SMALL_RECORD_NODES = 2000


def _is_small(value: Any) -> bool:
    """True when `value` holds under SMALL_RECORD_TEXT bytes of text in under SMALL_RECORD_NODES
    values: its record is cheap to shape on the event loop. A walk that stops at either bound, so the
    decision costs the same for a 60 MB request as for a small one (encoding it whole to measure it
    would take tens of milliseconds of the event loop, at a size the server chooses)."""
    stack, left, nodes = [value], SMALL_RECORD_TEXT, 0
    while stack:
        item = stack.pop()
        nodes += 1
        if isinstance(item, str):
            left -= len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        if left < 0 or nodes > SMALL_RECORD_NODES:
            return False
    return True


def configured_secrets(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The values of the proxy's configured API keys: every provider's `api_key_env`, the
    well-known key variables, the variables `secret_env_vars()` names, and provider header
    values (they may hold tokens). Also those in `upstream.pass_env`: passing a key to the
    server does not make it fit for the audit log."""
    names = set(settings.secret_env_vars()) | set(WELL_KNOWN_KEY_VARS)
    names |= {p.api_key_env for p in settings.providers if p.api_key_env}
    # (out of the environment once read: config/child_env.py `withhold`)
    found = [value for name in sorted(names) if (value := environ.get(name) or withheld(name))]
    found += [p.api_key for p in settings.providers if p.api_key]  # from api_key_file / api_key_command
    for provider in settings.providers:
        for value in provider.headers.values():
            found.append(value)
            if value.lower().startswith("bearer "):
                found.append(value[7:].strip())
    return found


def _fix_surrogates(value: Any) -> Any:
    """Lone surrogates (legal in JSON escapes, not in UTF-8) become U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fix_surrogates(v) for v in value]
    return value

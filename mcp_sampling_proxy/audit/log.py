"""The audit log: one hash-chained JSON line per sampling decision, in a file of its own.

Record format (README "Audit log" has the full reference). Every line is one JSON object:

- decision records (`"event": "decision"`), exactly one per `sampling/createMessage` or
  `elicitation/create` request, whatever its ending (refused, fulfilled, failed, rejected on review,
  cancelled, or an internal error). Every decision record carries every key of
  `DECISION_FIELDS` (null when it does not apply), then any extra facts (`limit`; `prompt_edited_by`
  when a human edited the prompt; `answer_edited_by` and `original_answer_sha256`, the digest of
  the LLM's own result, when a reviewer replaced the answer the server got), then
  `content`: digests of what was sent and answered, and the text itself in `redacted`/`full` mode.
  One record per outcome rather than one per event (received, decided, approved, fulfilled): each
  line tells a request's whole story, readers need no joins, and there is no half-recorded request.
- the first record of every file (whatever its event) has the key `continues`: null and
  `prev_hash` = `GENESIS` in a new log; after a rotation, the rotated file's name as it was then
  (later rotations shift the numbers) and `prev_hash` = that file's last hash. No other record has
  it, so lines deleted from the start of a file show.
- `"event": "seal"`: written when a writer finds bytes after the last good record (a write torn
  by a crash or a full disk, or lines that are not records). It names how many bytes it covers
  (`torn_bytes`, their `torn_sha256`) and links to the last good record, so the chain goes on
  and `verify` can tell a sealed crash from tampering.

Every record has `ts` (UTC ISO 8601, ms), `seq` (per writer, from 1, no gaps), `proxy_id` (the
writer), `prev_hash` and `hash`: SHA-256 (hex) of the record's canonical JSON without `hash`
(`canonical()`: sorted keys, compact separators, UTF-8). `prev_hash` is the previous line's
`hash`, so editing, deleting or reordering lines breaks the chain.

How it is written. structlog formats: each `AuditLog` has a dedicated structlog logger (its own
processor chain, independent of the stderr logging configuration) whose processors shape the
record (every field, content digests or payload), mask secrets and scrub the configured API keys.
Its "logger" is `_ChainFile`, which does what a structlog renderer cannot: under an exclusive
`fcntl.flock` on the sidecar `FILE.lock` (shared by every proxy writing the file, and not moved
by rotation), it reads the current last hash from the file's tail (another proxy may have
appended since), seals a torn tail, rotates when the file would grow past `max_bytes`, sets
`seq`, `prev_hash` and `hash`, and appends the line with a single `os.write` on an `O_APPEND`
descriptor (file created 0600). With `audit.fsync: true` (the default) a thread of its own then
`fsync`s the file while the answer is on its way, at most every 10 ms (records written in a busy
stretch share one fsync); with `before_answer` the write returns only after its fsync; `false`
never fsyncs.
The lock keeps the chain linear across processes and lines from interleaving, whatever their
size; the single write means a crash leaves at most a torn last line, which the next writer (or
the next proxy start) seals.

One record per request, written once, without stalling the relay. A request is served inside
`every_ending`; each stage's `record(...)` fills in that request's one record (later fields
override earlier ones: a review that rejects the LLM's answer turns a fulfilled record into a
rejected one, keeping its provider, model and tokens), and when the request ends, whatever the
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
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import anyio
import orjson
import structlog
from structlog.typing import EventDict

from mcp_sampling_proxy.config.child_env import WELL_KNOWN_KEY_VARS
from mcp_sampling_proxy.config.settings import AUDIT_CONTENT_MODES as CONTENT_MODES
from mcp_sampling_proxy.config.settings import DEFAULT_AUDIT_MAX_BYTES as DEFAULT_MAX_BYTES
from mcp_sampling_proxy.config.settings import FSYNC_BEFORE_ANSWER
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.redact import Redactor
from mcp_sampling_proxy.sanitize import one_line
from mcp_sampling_proxy.shared_files import lock_within
from mcp_sampling_proxy.vocabulary import OUTCOMES

if TYPE_CHECKING:
    from mcp_sampling_proxy.config.settings import Settings

log = get_logger("mcp_sampling_proxy.audit.log")

GENESIS = "0" * 64  # the prev_hash of the first record of a new log
DECISIONS = OUTCOMES

# The keys of every decision record, in the order they are written.
DECISION_FIELDS = (
    "server",
    "host",
    "method",
    "request_id",
    "tool",
    "protocol_version",
    "decision",
    "rule",
    "reason",
    "approver",
    "provider",
    "model",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "stop_reason",
    "error",
)
_TEXT_FIELDS = ("reason", "error")  # free text: secret shapes are masked in every content mode
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RECORD_END = re.compile(rb'"hash"\s*:\s*"[0-9a-f]{64}"\s*\}\s*\Z')  # the writer puts `hash` last
_NOT_GIVEN: Any = object()
_READ_CHUNK = 64 * 1024
LOCK_WAIT = 30.0  # s a write waits for another writer's lock (sealing a large foreign tail takes seconds)
SYNC_INTERVAL = 0.01  # s; audit.fsync: true fsyncs at most this often, a record at most this long after its write


# Records written by the request being served in this task (see `AuditLog.every_ending`).
class PendingRecord:
    """The one record of the request being served, filled in as it moves through the stages."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] | None = None  # None until a stage records an outcome
        self.params: Any = _NOT_GIVEN
        self.result: Any = None
        self.started_ns = time.time_ns()
        self.notes: dict[str, Any] = {}  # for observers (telemetry), never written to the log

    def fill(self, params: Any, result: Any, fields: dict[str, Any]) -> None:
        self.fields = {**(self.fields or {}), **fields}
        if params is not _NOT_GIVEN:
            self.params = params
        if result is not _NOT_GIVEN:
            self.result = result


_PENDING: ContextVar[PendingRecord | None] = ContextVar("audit_pending", default=None)
# Set while `AuditLog._write` appends on the event loop: the file must not block on its locks.
_NOWAIT: ContextVar[bool] = ContextVar("audit_nowait", default=False)

# An observer sees each record as written (shaped, masked, scrubbed: content only as the audit's
# content mode allows), with when its request started and the notes its stages made.
Observer = Callable[[dict[str, Any], int, dict[str, Any]], None]


def note(**facts: Any) -> None:
    """Tell the observers a fact about the request being served that the log does not keep
    (e.g. when the LLM call started and ended, and the model asked for)."""
    pending = _PENDING.get()
    if pending is not None:
        pending.notes.update(facts)


class AuditError(RpcError):
    """The audit record could not be written; the request is answered with this instead."""

    def __init__(self, message: str):
        super().__init__(jsonrpc.INTERNAL_ERROR, message)


# -- canonical form and digests ------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """The bytes hashed for the chain and for content digests: sorted keys, compact, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.encode("utf-8", "surrogatepass")


def record_hash(record: Mapping[str, Any]) -> str:
    """SHA-256 of the record without its `hash` key (it does include `prev_hash`)."""
    return hashlib.sha256(canonical({k: v for k, v in record.items() if k != "hash"})).hexdigest()


def digest(value: Any) -> dict[str, Any]:
    """Size and SHA-256 of a JSON value's canonical form (of the UTF-8 text for a string)."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else canonical(value)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def parse_object(line: bytes) -> dict[str, Any] | None:
    """A line of the log as a JSON object, or None: anyone running as the user can append to the
    log, so a line may be garbage, torn, not an object, or nested past what the parser recurses
    into (RecursionError, which is not a ValueError: 2 KB of '[' stopped proxies from starting)."""
    try:
        value = json.loads(line, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):  # ValueError includes UnicodeDecodeError, DuplicateKey
        return None
    return value if isinstance(value, dict) else None


class DuplicateKey(ValueError):
    """An object naming one key twice: parsers disagree on which value counts (Python's json the last,
    others the first), and the hash covers only the one Python keeps, so an edited line could show a
    reader `"decision": "allow"` while the chain checks out."""

    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook that refuses an object naming a key twice (DuplicateKey)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


def parse_record(line: bytes) -> dict[str, Any] | None:
    """A chained record (a JSON object with a well-formed `hash`), or None."""
    value = parse_object(line)
    if value is not None and isinstance(value.get("hash"), str) and _HEX64.fullmatch(value["hash"]):
        return value
    return None


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def request_fields(session: Any, message: dict[str, Any], tool: str | None, **extra: Any) -> dict[str, Any]:
    """The fields every record of one server request shares (who asked, in which tool call, which era)."""
    return {
        "server": session.server_name,
        "host": session.host_name or None,
        "method": message.get("method"),
        "request_id": message.get("id"),
        "tool": tool,
        "protocol_version": session.protocol_version,
        **extra,
    }


def elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def rotated_name(path: str, index: int) -> str:
    return f"{path}.{index}"


# -- the log ----------------------------------------------------------------------------------------


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
    ):
        if content not in CONTENT_MODES:
            raise ValueError(f"content must be one of {', '.join(CONTENT_MODES)}, not {content!r}")
        self.path = path
        self.proxy_id = proxy_id or uuid.uuid4().hex[:12]
        self.content = content
        self._redactor = Redactor(secrets, redact)
        self._file: _ChainFile | None = None
        if path:
            self._file = _ChainFile(path, self.proxy_id, fsync=fsync, max_bytes=max_bytes)
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
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> AuditLog:
        """The log `settings.audit` describes, scrubbing the values of the proxy's configured keys."""
        environ = os.environ if environ is None else environ
        audit = settings.audit
        return cls(
            audit.path,
            content=audit.content,
            redact=audit.redact,
            fsync=audit.fsync,
            max_bytes=audit.max_bytes,
            secrets=configured_secrets(settings, environ),
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

    def record(self, *, params: Any = _NOT_GIVEN, result: Any = _NOT_GIVEN, **fields: Any) -> None:
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
            self._log.append("decision", _params=params, _result=result, _observed=(time.time_ns(), {}), **fields)
            return
        deferred = self._append_now(params, result, (time.time_ns(), {}), fields)
        if deferred is not None:
            writer = threading.Thread(target=self._finish_quietly, args=(deferred,), name="audit-write", daemon=True)
            self._late_writers = [w for w in self._late_writers if w.is_alive()] + [writer]  # close() waits for these
            writer.start()

    def _finish_quietly(self, deferred: _Deferred) -> None:
        with contextlib.suppress(AuditError):  # _ChainFile logged it; nobody waits for this record
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
        self, params: Any, result: Any, observed: tuple[int, dict[str, Any]], fields: dict[str, Any]
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
    async def every_ending(self, fields: dict[str, Any], params: Any) -> AsyncIterator[PendingRecord]:
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

    def close(self) -> None:
        for writer in self._late_writers:  # records written outside a request, waiting for the lock
            writer.join(timeout=10)
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
        try:
            record["content"] = None if params is _NOT_GIVEN else content_record(params, result, self.content)
        except (RecursionError, ValueError, TypeError) as exc:  # hostile params (too deep to encode): say so
            record["content"] = {"mode": self.content, "unrecordable": f"{type(exc).__name__}: {exc}"}
        if observed is not None:
            record[_OBSERVED] = observed
        return record

    def _mask(self, _logger: Any, _method: str, record: EventDict) -> EventDict:
        for key in _TEXT_FIELDS:
            if isinstance(record.get(key), str):
                record[key] = self._redacted_text(record[key])
        content = record.get("content")
        if self.content == "redacted" and isinstance(content, dict):
            count = 0
            # Only the payloads: a digest's hex could look like a card number.
            parts = [
                (content.get("system"), "text"),
                (content.get("tools"), "tools"),
                (content.get("response"), "result"),
                *((m, "message") for m in content.get("messages") or []),
            ]
            for part, key in parts:
                if isinstance(part, dict) and key in part:
                    part[key], n = self._redactor.redact_value(part[key])
                    count += n
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


@dataclass
class _Deferred:
    """A finished record that could not be written without waiting for another writer's lock."""

    record: dict[str, Any]
    started_ns: int
    notes: dict[str, Any]


class _Sink:
    """Where a finished record goes: the chained file (when there is one), then each observer.
    An observer's failure is logged, never the request's: telemetry is not the record of truth."""

    def __init__(self, file: _ChainFile | None):
        self.file = file
        self.observers: list[Observer] = []

    @property
    def active(self) -> bool:
        return self.file is not None or bool(self.observers)

    def append(self, **record: Any) -> _Deferred | None:
        """Write `record` and tell the observers; when called by `AuditLog._write` on the event
        loop and another writer holds the file's lock, return it unwritten for `finish`."""
        started_ns, notes = record.pop(_OBSERVED, (time.time_ns(), {}))
        if self.file is not None:
            if _NOWAIT.get():
                if not self.file.try_append(record):
                    return _Deferred(record, started_ns, notes)
            else:
                self.file.append(**record)
        self._notify(record, started_ns, notes)
        return None

    def finish(self, deferred: _Deferred) -> None:
        """Write a record `append` handed back, waiting for the lock (in a worker thread)."""
        if self.file is not None:
            self.file.append(**deferred.record)
        self._notify(deferred.record, deferred.started_ns, deferred.notes)

    def _notify(self, record: dict[str, Any], started_ns: int, notes: dict[str, Any]) -> None:
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
    values: its record is cheap to shape on the event loop. A walk that stops at either bound."""
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
    from mcp_sampling_proxy.config.child_env import withheld

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


def content_record(params: Any, result: Any, mode: str) -> dict[str, Any]:
    """What the `content` key holds: digests always; the content itself in redacted/full mode.

    `request` is the digest of the whole params object; `system` of the system prompt's text;
    each of `messages` of one message object (role and content); `tools` of the tools list;
    `response` of the result object the server was given (null when there was none)."""
    keep = mode != "none"
    messages_out: list[dict[str, Any]] = []
    out: dict[str, Any] = {
        "mode": mode,
        "request": digest(params),
        "system": None,
        "messages": messages_out,
        "tools": None,
        "response": None,
    }
    if isinstance(params, dict):
        system = params.get("systemPrompt")
        if isinstance(system, str):
            out["system"] = {**digest(system), **({"text": system} if keep else {})}
        messages = params.get("messages")
        for message in messages if isinstance(messages, list) else []:
            role = message.get("role") if isinstance(message, dict) else None
            messages_out.append({"role": role, **digest(message), **({"message": message} if keep else {})})
        tools = params.get("tools")
        if tools is not None:
            out["tools"] = {**digest(tools), **({"tools": tools} if keep else {})}
    if result is not None:
        out["response"] = {**digest(result), **({"result": result} if keep else {})}
    return out


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


# -- the file ---------------------------------------------------------------------------------------

# Reading back what another writer left. Anyone running as the user (a governed server too) can
# append to the log, so a tail is read within bounds: memory stays within one record, and the search
# for the last record gives up rather than read gigabytes.
# The longest line taken for a record (a longer one is never read whole): twice the default message
# limit, so a record holding a whole request in `audit.content: full` fits; it is also the most a
# foreign line can make a writer hold (plus its parse).
MAX_RECORD_BYTES = 128 * 1024 * 1024
TAIL_SEARCH_BYTES = 4 * MAX_RECORD_BYTES  # how far from the end the last record is looked for
TAIL_SEARCH_LINES = 1000  # lines that start like a record but are not one, tried before giving up
_LINE_CHUNK = 1024 * 1024


@dataclass
class Tail:
    """What the end of an audit file holds."""

    last_hash: str | None  # hash of the last good record (None: no good record in the file)
    good_end: int  # offset just after that record's line (0 when none)
    size: int
    needs_newline: bool = False  # the last record is complete but its newline is missing
    searched_all: bool = True  # False: no record within the search's bounds (the file's start not reached)


def read_tail(fd: int, size: int) -> Tail:
    """Find the last good record of the file open at `fd` (`size` bytes), searching backwards.

    Only lines that start with "{" can be records (every record does), and only lines up to
    MAX_RECORD_BYTES are read, so a foreign tail costs at most one record's memory. The search gives
    up after TAIL_SEARCH_LINES lines that look like records but are not, or past TAIL_SEARCH_BYTES
    from the end: then `searched_all` is False (and `good_end` is where it stopped)."""
    if size == 0:
        return Tail(None, 0, 0)
    floor = max(0, size - TAIL_SEARCH_BYTES)
    before = size  # the next candidate line starts before this offset
    tried = 0
    while before > 0:
        newline = _rfind(fd, b"\n{", floor, before)
        if newline >= 0:
            start = newline + 1
        elif floor == 0 and os.pread(fd, 1, 0) == b"{":
            start = 0
        else:
            return Tail(None, floor, size, searched_all=floor == 0)
        if tried >= TAIL_SEARCH_LINES:
            return Tail(None, start, size, searched_all=False)
        line, end = _line_at(fd, start, size)
        record = parse_record(line) if line is not None else None
        if record is not None:
            if end == size:  # a complete last record whose newline is missing
                return Tail(record["hash"], size, size, needs_newline=True)
            return Tail(record["hash"], end + 1, size)
        tried += 1
        before = max(start - 1, 0)
    return Tail(None, 0, size)


def _rfind(fd: int, pattern: bytes, start: int, end: int) -> int:
    """The offset of the last `pattern` wholly inside file[start:end], or -1 (read backwards in chunks)."""
    high = end
    while high > start:
        low = max(start, high - _READ_CHUNK)
        chunk = os.pread(fd, min(end, high + len(pattern) - 1) - low, low)
        found = chunk.rfind(pattern)
        if found >= 0:
            return low + found
        high = low
    return -1


def _chunks(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of file[start:end], a chunk at a time (fewer when the file is shorter)."""
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(_LINE_CHUNK, end - pos), pos)
        if not chunk:
            return
        yield pos, chunk
        pos += len(chunk)


def _line_at(fd: int, start: int, size: int) -> tuple[bytes | None, int]:
    """(the line at `start` without its newline, the newline's offset or `size` when it runs to the end).
    The line is None when it is longer than MAX_RECORD_BYTES: it is then not read whole. Its end is
    found first, so a line is held once (not as chunks and their join)."""
    end = _find_newline(fd, start, min(size, start + MAX_RECORD_BYTES + 1))
    if end - start > MAX_RECORD_BYTES:
        return None, _find_newline(fd, end, size)
    if end - start > _READ_CHUNK and not _RECORD_END.search(os.pread(fd, 160, max(start, end - 160))):
        return None, end  # a long line that does not end as every record does: not read whole
    return os.pread(fd, end - start, start), end


def _find_newline(fd: int, pos: int, size: int) -> int:
    """The offset of the next newline at or after `pos`, or `size`."""
    for at, chunk in _chunks(fd, pos, size):
        found = chunk.find(b"\n")
        if found >= 0:
            return at + found
    return size


def _digest_range(fd: int, start: int, end: int) -> tuple[Any, int]:
    """(a sha256 of file[start:end], the offset of its first newline or -1), read in chunks."""
    sha = hashlib.sha256()
    first_newline = -1
    for pos, chunk in _chunks(fd, start, end):
        sha.update(chunk)
        if first_newline < 0 and (found := chunk.find(b"\n")) >= 0:
            first_newline = pos + found
    return sha, first_newline


def _file_hash(path: str) -> str | None:
    """The last good hash in the file at `path` (None when missing or without records)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return read_tail(fd, os.fstat(fd).st_size).last_hash
    finally:
        os.close(fd)


class _ChainFile:
    """The structlog "logger" of an AuditLog: appends chained lines to one file, safely shared."""

    def __init__(self, path: str, proxy_id: str, *, fsync: bool | str, max_bytes: int):
        self.path = os.path.abspath(path)
        self.proxy_id = proxy_id
        self.fsync = bool(fsync)
        self._sync_inline = fsync == FSYNC_BEFORE_ANSWER
        self._syncer = _Syncer(self) if fsync is True else None
        self.max_bytes = max_bytes
        self.seq = 0
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._known: tuple[int, int, str | None] | None = None  # (inode, size, last hash) as this writer left it
        self._thread_lock = threading.Lock()  # flock does not exclude threads sharing the descriptor
        self._problem: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Open (creating 0600) and seal a torn tail left by a crash. Problems are logged, and every
        record then raises AuditError: the proxy still relays, but answers no sampling it cannot audit."""
        try:
            directory = os.path.dirname(self.path)
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=0o700, exist_ok=True)
            self._lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with self._locked():
                fd = self._open()
                st = os.fstat(fd)
                fd, head = self._repair(fd, st.st_size, st.st_ino)
                st = os.fstat(fd)
                self._known = (st.st_ino, st.st_size, head)  # as this writer leaves it (see _as_left)
        except TimeoutError as exc:  # the first record takes the lock (and seals) instead
            log.warning(
                "another process holds the audit log's lock; the first record will check its end",
                path=self.path,
                error=str(exc),
            )
        except OSError as exc:
            self._problem = _describe(exc)
            log.error(
                "audit log unusable: sampling requests will be refused until it is fixed",
                path=self.path,
                error=self._problem,
            )

    def close(self) -> None:
        if self._syncer is not None:
            self._syncer.stop()  # what was written is on disk before the proxy exits
        with self._thread_lock:
            for fd in (self._fd, self._lock_fd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._lock_fd = None

    @property
    def unusable(self) -> str | None:
        """Why the file could not be opened at start (or a background fsync failed), or None."""
        if self._lock_fd is None:
            return self._problem or "closed"
        return self._syncer.problem if self._syncer is not None else None

    # -- the structlog logger method ----------------------------------------------------------
    def append(self, **record: Any) -> None:
        with self._thread_lock:
            self._append_locked(record, blocking=True)

    def try_append(self, record: dict[str, Any]) -> bool:
        """Append without waiting: False (nothing written) when another thread or process holds the lock."""
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            return self._append_locked(record, blocking=False)
        finally:
            self._thread_lock.release()

    def _append_locked(self, record: dict[str, Any], *, blocking: bool) -> bool:
        problem, lock_fd = self.unusable, self._lock_fd  # not opened, closed, or an fsync failed
        if problem is not None or lock_fd is None:
            raise AuditError(
                f"the proxy's audit log cannot be written ({problem or 'closed'}); "
                "the request is not answered without an audit record"
            )
        try:
            if not _flock(lock_fd, blocking, self.path + ".lock"):
                return False
            try:
                left = self._as_left() if not blocking else None
                if not blocking and left is None:
                    return False  # someone else wrote: reading their tail back is the worker thread's job
                if not self._append(record, left):
                    return False
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        except OSError as exc:
            problem = _describe(exc)
            log.error("audit record not written; the request gets an error", path=self.path, error=problem)
            raise AuditError(
                f"the proxy's audit log cannot be written ({problem}); the request is not "
                "answered without an audit record"
            ) from None
        return True

    def _as_left(self) -> os.stat_result | None:
        """The file's stat when it is as this writer left it (no other proxy wrote, nobody rotated or
        appended foreign bytes): then the append needs no tail to be read back, and may run on the
        event loop. Anything else (a torn or foreign tail can be as large as whoever wrote it chose)
        is done by the blocking path in a worker thread: None."""
        if self._fd is None or self._known is None:
            return None
        try:
            st = os.fstat(self._fd)
            same = self._known[:2] == (st.st_ino, st.st_size) and os.stat(self.path).st_ino == st.st_ino
        except OSError:
            return None
        return st if same else None

    def dup_fd(self) -> int | None:
        """A duplicate of the current descriptor, for the fsync thread (the writer may swap the original)."""
        with self._thread_lock:
            return os.dup(self._fd) if self._fd is not None else None

    def _append(self, record: dict[str, Any], left: os.stat_result | None = None) -> bool:
        """`left`: the file's stat, when `_as_left` just found it as this writer left it (on the event
        loop). False, with nothing written, when the record would start a rotation there: renames, an
        fsync and reading the rotated file's tail are the worker thread's job."""
        if left is not None and self._fd is not None:
            fd, st = self._fd, left
        else:
            fd = self._open()
            st = os.fstat(fd)
        fd, head = self._repair(fd, st.st_size, st.st_ino)
        unchanged = self._known is not None and self._known[:2] == (st.st_ino, st.st_size)
        size = st.st_size if unchanged else os.fstat(fd).st_size  # sealed, or a new file: look again
        line, last_hash = self._finish(record, head or GENESIS, self.seq + 1)
        if self.max_bytes and size > 0 and size + len(line) > self.max_bytes:
            if left is not None:
                return False
            fd = self._rotate()
            size = 0
        if size > 0:
            self._write(fd, line, self.seq + 1, last_hash)
            return True
        if left is not None:  # a new file's first record links to the rotated one: its tail is read
            return False
        line, last_hash = self._finish(record, *self._start_of_file())
        self._write(fd, line, self.seq + 1, last_hash)
        return True

    def _start_of_file(self) -> tuple[str, int, str | None]:
        """(prev_hash, seq, continues) of the first record of a new file: it links to the rotated file."""
        previous = rotated_name(self.path, 1)
        link = _file_hash(previous)
        return link or GENESIS, self.seq + 1, os.path.basename(previous) if link else None

    def _finish(
        self, record: dict[str, Any], prev_hash: str, seq: int, continues: Any = _NOT_GIVEN
    ) -> tuple[bytes, str]:
        chain = {"ts": utc_now(), "seq": seq, "proxy_id": self.proxy_id}
        entry = {**chain, **record, **chain}  # the chain's keys first, and never a caller's value for them
        for key in ("continues", "prev_hash", "hash"):
            entry.pop(key, None)
        if continues is not _NOT_GIVEN:  # the first record of a file
            entry = {**{k: v for k, v in entry.items() if k in chain or k == "event"}, "continues": continues, **entry}
        entry["prev_hash"] = prev_hash
        entry["hash"] = record_hash(entry)
        try:  # the line is only parsed back (verify re-hashes the values), so orjson's spelling is as good
            line = orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # what orjson does not write (a lone surrogate, nesting past 254, a huge int)
            text = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, default=str)
            line = text.encode("utf-8", "surrogatepass") + b"\n"
        if len(line) > MAX_RECORD_BYTES:  # it could not be read back as a record
            raise AuditError(
                f"the audit record would be {len(line):,} bytes, over the audit log's limit of "
                f"{MAX_RECORD_BYTES:,} (set audit.content to none, or lower the size caps); the "
                "request is not answered without an audit record"
            )
        return line, entry["hash"]

    def _write(self, fd: int, data: bytes, seq: int, last_hash: str) -> None:
        written = os.write(fd, data)
        while written < len(data):  # a short write (e.g. a full disk): finish it or raise, under the lock
            written += os.write(fd, data[written:])
        self._synced(fd)
        self.seq = seq
        st = os.fstat(fd)
        self._known = (st.st_ino, st.st_size, last_hash)

    def _repair(self, fd: int, size: int, ino: int) -> tuple[int, str | None]:
        """(the descriptor to write to, the hash to chain from); first seals bytes after the last good
        record (a torn write), or moves the file aside when no record is within reach (`_move_aside`).
        `size` and `ino`: the file's, from the caller's fstat."""
        if self._known is not None and self._known[:2] == (ino, size):
            return fd, self._known[2]
        tail = read_tail(fd, size)
        if not tail.searched_all:
            return self._move_aside(), None
        if tail.needs_newline:
            self._write_raw(fd, b"\n")
            return fd, tail.last_hash
        if tail.good_end == size:
            return fd, tail.last_hash
        # what is sealed is the bytes after the last record plus the newline added, hashed as read
        sha, first_newline = _digest_range(fd, tail.good_end, size)
        newline = b"" if os.pread(fd, 1, size - 1) == b"\n" else b"\n"
        sha.update(newline)
        torn_bytes = size - tail.good_end + len(newline)
        reason = (
            "the last line was incomplete: a write was cut short (crash or full disk)"
            if first_newline in (-1, size - 1)
            else "the bytes after the last record are not chained records"
        )
        seal = {
            "event": "seal",
            "torn_offset": tail.good_end,
            "torn_bytes": torn_bytes,
            "torn_sha256": sha.hexdigest(),
            "newline_added": bool(newline),
            "reason": reason,
        }
        if tail.last_hash is None:  # nothing good in the file: the seal is its first record
            line, seal_hash = self._finish(seal, *self._start_of_file())
        else:
            line, seal_hash = self._finish(seal, tail.last_hash, self.seq + 1)
        self._write(fd, newline + line, self.seq + 1, seal_hash)
        log.warning(
            "audit log had a torn or foreign tail; sealed it",
            path=self.path,
            torn_bytes=torn_bytes,
            offset=tail.good_end,
        )
        return fd, seal_hash

    def _move_aside(self) -> int:
        """The file's tail held no record within read_tail's bounds (bytes some other program appended):
        it cannot be sealed without knowing the hash to link to, so the file is rotated away as it is
        (nothing is deleted; `audit verify` on it shows where the foreign bytes start) and a new chain
        begins. Returns the new file's descriptor."""
        log.error(
            "the audit log's end holds no record this proxy can link to (bytes written by another "
            "program running as this user?); moved it aside and started a new chain",
            path=self.path,
            moved_to=rotated_name(self.path, 1),
            searched_bytes=TAIL_SEARCH_BYTES,
            searched_lines=TAIL_SEARCH_LINES,
        )
        return self._rotate()

    def _write_raw(self, fd: int, data: bytes) -> None:
        os.write(fd, data)
        self._synced(fd)

    def _synced(self, fd: int) -> None:
        """fsync what was just written now (`before_answer`), or soon in the fsync thread (true)."""
        if self._sync_inline:
            os.fsync(fd)
        elif self._syncer is not None:
            self._syncer.request()

    def _rotate(self) -> int:
        """FILE.N -> FILE.N+1 ..., FILE -> FILE.1; a new FILE. Nothing is ever deleted."""
        count = 1
        while os.path.exists(rotated_name(self.path, count)):
            count += 1
        for index in range(count - 1, 0, -1):
            os.rename(rotated_name(self.path, index), rotated_name(self.path, index + 1))
        if self._syncer is not None and self._fd is not None:
            os.fsync(self._fd)  # the rotated file is complete on disk before a new one starts
        os.rename(self.path, rotated_name(self.path, 1))
        self._sync_directory()
        log.info("audit log rotated", path=self.path, rotated_to=rotated_name(self.path, 1))
        return self._open()

    def _open(self) -> int:
        """The descriptor of the file now at `path` (reopened after another proxy rotated it)."""
        if self._fd is not None:
            try:
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    return self._fd
            except FileNotFoundError:
                pass
            if self._syncer is not None:
                os.fsync(self._fd)  # another proxy rotated the file: what we wrote to it is on disk
            os.close(self._fd)
            self._fd = None
        created = not os.path.exists(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if created:
            self._sync_directory()
        return self._fd

    def _sync_directory(self) -> None:
        if not self.fsync:
            return
        dir_fd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        except OSError as exc:  # some file systems cannot fsync a directory
            if exc.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(dir_fd)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        assert self._lock_fd is not None
        _flock(self._lock_fd, True, self.path + ".lock")
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)


def _flock(fd: int, blocking: bool, path: str) -> bool:
    """Take the exclusive lock; without `blocking`, False when another process holds it. Blocking,
    it waits at most LOCK_WAIT (TimeoutError): anyone running as the user can hold it."""
    if blocking:
        lock_within(fd, LOCK_WAIT, path)
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class _Syncer:
    """fsyncs the audit file soon after each write, in a thread of its own, so the answer does not
    wait for the disk. At most one fsync per `SYNC_INTERVAL`: a lone record is fsync'd at once,
    and records written in a busy stretch share an fsync (an fsync costs ~0.15 ms here, ~60 us of
    it CPU, more than the proxy's own work for a request). A failed fsync makes the log unusable
    (`problem`): later requests are refused, as for a failed write."""

    def __init__(self, file: _ChainFile):
        self._file = file
        self._wake = threading.Condition()
        self._dirty = False
        self._stopping = False
        self._last = 0.0  # time.monotonic() of the last fsync
        self._thread: threading.Thread | None = None
        self.problem: str | None = None

    def request(self) -> None:
        with self._wake:
            if self._dirty:  # an fsync is already due: it will cover this write too (no wake-up, no GIL hand-over)
                return
            self._dirty = True
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="audit-fsync", daemon=True)
                self._thread.start()
            self._wake.notify()

    def stop(self) -> None:
        """Finish: the last writes are fsync'd before this returns."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        if self._dirty:  # no thread ran (or it gave up waiting): sync here
            self._dirty = False
            self._sync()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._dirty and not self._stopping:
                    self._wake.wait()
                if not self._dirty:
                    return
                while not self._stopping and (delay := self._last + SYNC_INTERVAL - time.monotonic()) > 0:
                    self._wake.wait(delay)  # gather the records of a busy stretch into one fsync
                self._dirty = False
            self._sync()
            self._last = time.monotonic()

    def _sync(self) -> None:
        fd = self._file.dup_fd()
        if fd is None:
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            self.problem = f"fsync failed: {_describe(exc)}"
            log.error(
                "audit log could not be flushed to disk: the last records may be lost on a power failure; "
                "sampling requests will be refused until the proxy is restarted",
                path=self._file.path,
                error=self.problem,
            )
        finally:
            os.close(fd)


def _describe(exc: OSError) -> str:
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"

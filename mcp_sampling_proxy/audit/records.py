"""The audit record's format: its fields, its canonical form and hash, and reading a line back.

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
  `AuditFields` names every field a caller can give, with its type.
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

This module is the format only: `chain_file.py` writes lines, `tail.py` finds the last one,
`recorder.py` is the API the proxy records through, `commands/audit.py` verifies and reads.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NotRequired, Protocol, Required, TypedDict

import orjson

from mcp_sampling_proxy.notation.vocabulary import OUTCOMES, Outcome

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
TEXT_FIELDS = ("reason", "error")  # free text: secret shapes are masked in every content mode
_HEX64 = re.compile(r"[0-9a-f]{64}")


class CheckRecord(TypedDict, total=False):
    """One external check a request went through (`checks:` in the policy), in the order they ran."""

    name: str  # the check's name in `checks:`
    stage: str  # request | answer
    verdict: str  # allow | deny | modify, or error (timed out, crashed, unreachable, a garbage verdict)
    reason: str | None  # the validator's reason, or what went wrong (one line, capped)
    duration_ms: int
    on_error: str  # with verdict error only: what the policy made of it (deny | allow)


class ToolChangeRecord(TypedDict):
    """A pinned tool that changed, appeared or went (`tool_change`, services/tools.py)."""

    kind: str  # changed | new | removed
    fields: list[str]  # which pinned fields differ
    old_sha256: str | None
    new_sha256: str | None
    old: NotRequired[dict[str, str]]  # the changed fields' text as pinned, when a copy was kept
    new: NotRequired[dict[str, str]]  # ... and as the server lists them now


class AuditFields(TypedDict, total=False):
    """Every field a caller can give a decision record (`AuditLog.record`). The first group is
    `DECISION_FIELDS` (written in every decision record, null when not given); the rest are written
    only when given. The writer adds `event`, `content` and the chain's keys."""

    server: str  # the server's name, as the operator knows it
    host: str | None  # the host's name (clientInfo)
    method: str | None  # sampling/createMessage | elicitation/create
    request_id: str | int | None  # the server's JSON-RPC id
    tool: str | None  # the tool call the request belongs to
    protocol_version: str | None
    decision: Outcome
    rule: str | None  # the policy rule that matched
    reason: str | None  # why (masked for secret shapes)
    approver: str | None  # who let it through: a channel (terminal, console, host) or None for the policy
    provider: str | None  # the LLM provider that answered ("host": the host's own LLM)
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    latency_ms: int | None
    stop_reason: str | None
    error: str | None  # what went wrong (masked for secret shapes)
    # written only when given
    server_reported: str  # the name the server reports, when it differs from `server`
    tool_candidates: list[str]  # every tool call that could own the request, when more than one could
    limit: str  # the limit that refused it: rate_limit | concurrent | budget | max_per_call
    mode: str | None  # elicitation: form | url
    action: str | None  # elicitation: the answer's action (accept, decline, cancel); tools: the rule's action
    prompt_edited_by: str | None  # the channel of a human who edited the prompt
    answer_edited_by: str  # the channel of a reviewer who replaced the LLM's answer
    original_answer_sha256: str  # the digest of the LLM's own answer, when a reviewer or a secret scan changed it
    unsolicited: bool  # true: no host request was in flight, and the policy allows that (sampling.allow_unsolicited)
    answer_secrets: list[str]  # the credential types found in the LLM's answer (sampling.on_secret), never the values
    prompt_secrets: list[str]  # ... in the server's request (sampling.scan_requests)
    cost_usd: float | None  # what the proxy's own LLM call cost, in USD (null: unpriced, or no usage reported)
    price_as_of: str  # the price's date (the shipped table's), "policy" (prices:), or "unpriced"
    tool_change: ToolChangeRecord  # tools/list: a pinned tool changed, appeared or went (services/tools.py)
    approved_by: list[str]  # who approved, by name (terminal, host, console:NAME, webhook:NAME); all of a quorum
    checks: list[CheckRecord]  # the external checks run, when the matched rule has any
    client: str  # who called the served endpoint (`serve`): the name of the bearer token it presented
    session: str  # which session (or 2026 caller's server) of `serve`: its own random id, not the Mcp-Session-Id
    replica: str  # which `serve` replica wrote it (`serve --replica`): one of several behind a balancer


class Digest(TypedDict):
    """Size and SHA-256 of a JSON value's canonical form."""

    bytes: int
    sha256: str


class TextPart(Digest):
    text: NotRequired[str]  # the system prompt, in redacted/full mode


class MessagePart(Digest):
    role: object  # as the server gave it
    message: NotRequired[object]  # the message, in redacted/full mode


class ToolsPart(Digest):
    tools: NotRequired[object]


class ResultPart(Digest):
    result: NotRequired[object]


class ContentRecord(TypedDict, total=False):
    """What a record's `content` holds: digests always, the content itself in redacted/full mode."""

    mode: Required[str]
    request: Digest
    system: TextPart | None
    messages: list[MessagePart]
    tools: ToolsPart | None
    response: ResultPart | None
    unrecordable: str  # the params could not be encoded (too deep): why
    redactions: int  # redacted mode: how many secret shapes were masked


class AuditRecord(AuditFields, total=False):
    """A record as the writer finishes it: the caller's fields, the event, the content, and the
    chain's keys (`ts`, `seq`, `proxy_id`, `prev_hash`, `hash`, `continues` on a file's first line)."""

    event: Required[str]  # decision | seal | ...
    content: ContentRecord | None
    ts: str
    seq: int
    proxy_id: str
    prev_hash: str
    hash: str
    continues: str | None
    torn_offset: int  # seal: where the bytes after the last good record start
    torn_bytes: int  # ... how many bytes it covers
    torn_sha256: str
    newline_added: bool


class RequestSession(Protocol):
    """What `request_fields` reads of the relay's session (relay/core.py `Session`)."""

    @property
    def server_name(self) -> str: ...
    @property
    def host_name(self) -> str: ...
    @property
    def server_reported_if_different(self) -> str | None: ...

    protocol_version: str | None
    client: str | None
    served: str | None


# -- canonical form and digests ------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """The bytes hashed for the chain and for content digests: sorted keys, compact, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.encode("utf-8", "surrogatepass")


def record_hash(record: Mapping[str, Any]) -> str:
    """SHA-256 of the record's `canonical` bytes without its `hash` key (it does include `prev_hash`)."""
    return hashlib.sha256(_canonical_quickly({k: v for k, v in record.items() if k != "hash"})).hexdigest()


def digest(value: Any) -> Digest:
    """Size and SHA-256 of a JSON value's canonical form (of the UTF-8 text for a string)."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else _canonical_quickly(value)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


_FAST = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
_FLOAT_WRITTEN_OTHERWISE = re.compile(rb"e-\d(?!\d)|0\.0000")


def _canonical_quickly(value: Any) -> bytes:
    """`canonical(value)`, by orjson where its bytes are the same (a third to a tenth of the time): a
    record's hash and its content's digests. They differ only for what JSON from the wire cannot hold
    (non-string keys, integers past 64 bits, lone surrogates: orjson refuses those, and `canonical`
    writes them) and for floats under 1e-4 (orjson `0.00001` and `1e-9` for `1e-05` and `1e-09`): output
    where such a float may be is written again by `canonical`. A NaN, which the relay's strict parser
    never lets in, is `null` here, as in the line `ChainFile` writes (so the chain verifies)."""
    try:
        data = orjson.dumps(value, default=str, option=_FAST)
    except (TypeError, orjson.JSONEncodeError):
        return canonical(value)
    if (b"e-" in data or b"0.0000" in data) and _FLOAT_WRITTEN_OTHERWISE.search(data):
        return canonical(value)
    return data


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


def request_fields(
    session: RequestSession, message: Mapping[str, Any], tool: str | None, candidates: tuple[str, ...]
) -> AuditFields:
    """The fields every record of one server request shares (who asked, in which tool call, which
    era), with `rule` still unknown; `candidates`: every tool call that could own the request.
    Who asked: the reported name when it differs from the operator's, and every candidate when
    more than one could own it."""
    fields: AuditFields = {
        "server": session.server_name,
        "host": session.host_name or None,
        "method": message.get("method"),
        "request_id": message.get("id"),
        "tool": tool,
        "protocol_version": session.protocol_version,
        "rule": None,
    }
    if session.server_reported_if_different is not None:
        fields["server_reported"] = session.server_reported_if_different
    if len(candidates) > 1:
        fields["tool_candidates"] = list(candidates)
    if session.client is not None:
        fields["client"] = session.client
    if session.served is not None:
        fields["session"] = session.served
    return fields


def elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def rotated_name(path: str, index: int) -> str:
    return f"{path}.{index}"


def content_record(params: Any, result: Any, mode: str) -> ContentRecord:
    """What the `content` key holds: digests always; the content itself in redacted/full mode.

    `request` is the digest of the whole params object; `system` of the system prompt's text;
    each of `messages` of one message object (role and content); `tools` of the tools list;
    `response` of the result object the server was given (null when there was none)."""
    keep = mode != "none"
    messages_out: list[MessagePart] = []
    out: ContentRecord = {
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
            size = digest(system)
            text: TextPart = {"bytes": size["bytes"], "sha256": size["sha256"]}
            if keep:
                text["text"] = system
            out["system"] = text
        messages = params.get("messages")
        for message in messages if isinstance(messages, list) else []:
            size = digest(message)
            role = message.get("role") if isinstance(message, dict) else None
            part: MessagePart = {"role": role, "bytes": size["bytes"], "sha256": size["sha256"]}
            if keep:
                part["message"] = message
            messages_out.append(part)
        tools = params.get("tools")
        if tools is not None:
            size = digest(tools)
            listed: ToolsPart = {"bytes": size["bytes"], "sha256": size["sha256"]}
            if keep:
                listed["tools"] = tools
            out["tools"] = listed
    if result is not None:
        size = digest(result)
        response: ResultPart = {"bytes": size["bytes"], "sha256": size["sha256"]}
        if keep:
            response["result"] = result
        out["response"] = response
    return out


def is_decision(record: dict[str, Any]) -> bool:
    """A decision record (a seal or another event is not one)."""
    return record.get("event", "decision") == "decision" and "decision" in record

"""Run a rule's external checks (`check:` naming the policy's `checks:`) and act on their verdicts.

A check is a validator the operator trusts and the server cannot reach: a local command or an HTTP
endpoint. It is given one JSON document (`CHECK_PROTOCOL_VERSION`; docs/reference/policy.md has the
shapes) and answers one verdict: allow, deny (with a reason the server is told), or modify (the text
that replaces the last user message at the request stage, the answer's text at the answer stage).

Fail-closed: a validator that times out, exits with an error, answers anything but a valid verdict, or
cannot be reached is an error, and an error denies unless the check says `on_error: allow`. A
modification is validated and capped again, like a prompt a human edited; one that cannot apply is an
error too. A command runs in a session of its own, without the proxy's key variables (they are
withheld from every helper: config/child_env.py), and its whole process group is killed at the deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteReceiveStream, Process
from msgspec import Struct

from mcp_sampling_proxy.approval.edits import with_prompt, with_text
from mcp_sampling_proxy.audit.records import AuditFields, CheckRecord, digest, unique_keys
from mcp_sampling_proxy.config.checks import VARIABLE, CheckSpec
from mcp_sampling_proxy.config.child_env import helper_environment, withheld
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.notation.vocabulary import MiB
from mcp_sampling_proxy.policy.engine import Decision
from mcp_sampling_proxy.policy.rules import SizeLimits, effective_limits
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.sampling_request import SamplingRequest
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services.assess import checked_edit
from mcp_sampling_proxy.services.sampling.ended import Ended
from mcp_sampling_proxy.system.addresses import is_loopback
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.services.sampling.checks")

CHECK_PROTOCOL_VERSION = 1
MAX_VERDICT_BYTES = 4 * MiB  # what a validator may answer (a modified text included)
STDERR_KEPT = 2048  # the end of a failed command's stderr, for the audit reason
REASON_CHARS = 300  # a validator's reason, as the server and the audit see it
VERDICTS = ("allow", "deny", "modify")
_VERDICT_KEYS = ("version", "verdict", "reason", "text")
# the LLM's part of a fulfilled record: kept when an answer-stage check refuses the answer
_ANSWER_FIELDS = ("provider", "model", "input_tokens", "output_tokens", "stop_reason", "latency_ms")

Stage = Literal["request", "answer"]
T = TypeVar("T")


class CheckFailed(Exception):
    """A validator gave no usable verdict; the message says why, for the audit and the server."""


class Verdict(Struct, frozen=True):
    verdict: Literal["allow", "deny", "modify"]
    reason: str | None
    text: str | None  # modify only


class Checks:
    """The policy's checks, run for the rules that name them."""

    def __init__(self, specs: Mapping[str, CheckSpec], limits: SizeLimits):
        self._specs = specs
        self._limits = limits  # a modification is capped like the request was: these, under the rule's

    def named(self, decision: Decision, stage: Stage) -> list[CheckSpec]:
        """The checks the matched rule runs at `stage`, in the rule's order."""
        rule = decision.matched
        names = rule.checks if rule is not None else ()
        return [self._specs[name] for name in names if self._specs[name].runs_at(stage)]

    def _caps(self, decision: Decision) -> SizeLimits:
        rule = decision.matched
        return effective_limits(self._limits, rule.limits if rule is not None else None)

    async def on_request(
        self, request: SamplingRequest, decision: Decision, server: str, audit: AuditFields
    ) -> SamplingRequest:
        """The request after the rule's request-stage checks (modified, or as it was); Ended
        when one of them denies it."""
        caps = self._caps(decision)
        for spec in self.named(decision, "request"):
            document = self._document("request", server, decision, audit, request.wire)

            def modified(text: str, current: SamplingRequest = request) -> SamplingRequest:
                try:
                    return checked_edit(with_prompt(current.wire, text), caps)
                except ValueError as exc:  # with_prompt: no user message to replace, tool results in it
                    raise CheckFailed(f"its modify verdict cannot apply: {exc}") from None
                except RpcError as exc:
                    raise CheckFailed(f"its modified prompt is refused: {exc.message}") from None

            changed = await self._run(spec, "request", document, modified, audit, {})
            if changed is not None:
                request = changed
                audit["prompt_edited_by"] = f"check {spec.name}"
        return request

    async def on_answer(
        self,
        request: SamplingRequest,
        result: dict[str, Any],
        decision: Decision,
        server: str,
        audit: AuditFields,
    ) -> dict[str, Any]:
        """The answer after the rule's answer-stage checks; Ended when one of them denies it
        (its fields keep the LLM's provider, model and tokens, and a digest of the answer)."""
        caps = self._caps(decision)
        original = result
        for spec in self.named(decision, "answer"):
            document = self._document("answer", server, decision, audit, request.wire, result)

            def modified(text: str, current: dict[str, Any] = result) -> dict[str, Any]:
                if len(text.encode("utf-8", "surrogatepass")) > caps.max_text_bytes:
                    raise CheckFailed(f"its modified answer is over max_text_bytes ({caps.max_text_bytes} bytes)")
                return with_text(current, text)

            kept = cast(AuditFields, {k: v for k, v in audit.items() if k in _ANSWER_FIELDS})
            kept["original_answer_sha256"] = digest(original)["sha256"]
            changed = await self._run(spec, "answer", document, modified, audit, kept)
            if changed is not None:
                result = changed
                audit["answer_edited_by"] = f"check {spec.name}"
                audit["original_answer_sha256"] = digest(original)["sha256"]
        return result

    @staticmethod
    def _document(
        stage: Stage,
        server: str,
        decision: Decision,
        audit: AuditFields,
        params: CreateMessageParams,
        answer: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """What a validator is given (version 1 of the documented shape)."""
        document: dict[str, Any] = {
            "version": CHECK_PROTOCOL_VERSION,
            "stage": stage,
            "server": server,
            "tool": audit.get("tool"),
            "rule": decision.rule,
            "request": params,
        }
        if answer is not None:
            document["answer"] = answer
        return document

    async def _run(
        self,
        spec: CheckSpec,
        stage: Stage,
        document: dict[str, Any],
        modified: Callable[[str], T],
        audit: AuditFields,
        refused_fields: AuditFields,
    ) -> T | None:
        """Ask one validator; the modified value for a modify, None for an allow (or an error under
        `on_error: allow`); Ended for a deny or an error under `on_error: deny`. Each check
        run is added to the audit's `checks`."""
        started = time.monotonic()
        entry: CheckRecord = {"name": spec.name, "stage": stage}
        audit["checks"] = [*audit.get("checks", []), entry]
        changed: T | None = None
        try:
            # progress keep-alive to the host's tool call (relay/keepalive.py) while the validator works
            with anyio.fail_after(spec.timeout), waiting_for(f"waiting for check {spec.name}"):
                verdict = await self._ask(spec, document)
            if verdict.verdict == "modify":
                assert verdict.text is not None  # parse_verdict: a modify has its text
                changed = modified(verdict.text)
        except (CheckFailed, TimeoutError) as exc:
            why = f"did not answer within {spec.timeout:g}s and was stopped" if isinstance(exc, TimeoutError) else exc
            failure = one_line(str(why), REASON_CHARS)
            entry.update(
                {"verdict": "error", "reason": failure, "on_error": spec.on_error, "duration_ms": _ms(started)}
            )
            log.warning("check failed", check=spec.name, stage=stage, reason=failure, on_error=spec.on_error)
            if spec.on_error == "allow":
                return None
            raise Ended(
                "deny",
                RpcError(
                    jsonrpc.USER_REJECTED,
                    f"sampling denied: check '{spec.name}' failed ({failure}), and a failed check denies "
                    "(on_error: deny)",
                ),
                **_with_checks(refused_fields, audit),
            ) from None
        reason = one_line(verdict.reason, REASON_CHARS) if verdict.reason else None
        entry.update({"verdict": verdict.verdict, "reason": reason, "duration_ms": _ms(started)})
        if verdict.verdict == "deny":
            told = f"sampling denied by check '{spec.name}'" + (f": {reason}" if reason else "")
            raise Ended("deny", RpcError(jsonrpc.USER_REJECTED, told), **_with_checks(refused_fields, audit))
        return changed

    async def _ask(self, spec: CheckSpec, document: dict[str, Any]) -> Verdict:
        # ASCII JSON: a lone surrogate in a server's prompt is sent escaped, never as broken UTF-8
        body = json.dumps(document, separators=(",", ":")).encode()
        if spec.command is not None:
            raw = await run_command(spec.command, body + b"\n")
        else:
            assert spec.url is not None  # config/checks.py: exactly one of command and url
            raw = await post(spec.url, body, spec.headers, spec.timeout)
        return parse_verdict(raw)


def parse_verdict(raw: bytes) -> Verdict:
    """The validator's answer, strictly: one JSON object with known keys only, a known verdict,
    a string reason when given, and a text exactly when the verdict is modify."""
    try:
        data = json.loads(raw, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):
        shown = one_line(raw[:80].decode("utf-8", "replace"), 80) or "nothing"
        raise CheckFailed(f"answered something that is not one JSON verdict: {shown!r}") from None
    if not isinstance(data, dict):
        raise CheckFailed(f"answered a JSON {type(data).__name__}, not a verdict object")
    unknown = [key for key in data if key not in _VERDICT_KEYS]
    if unknown:
        raise CheckFailed(f"its verdict has unknown keys ({', '.join(map(repr, unknown[:5]))})")
    if "version" in data and (isinstance(data["version"], bool) or data["version"] != CHECK_PROTOCOL_VERSION):
        raise CheckFailed(f"its verdict is version {data['version']!r}; this proxy speaks {CHECK_PROTOCOL_VERSION}")
    verdict = data.get("verdict")
    if verdict not in VERDICTS:
        raise CheckFailed(f"its verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    reason = data.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise CheckFailed("its reason is not a string")
    text = data.get("text")
    if verdict == "modify" and not isinstance(text, str):
        raise CheckFailed("its modify verdict has no text (a string)")
    if verdict != "modify" and "text" in data:
        raise CheckFailed(f"its {verdict} verdict has a text, which only a modify verdict takes")
    return Verdict(verdict, reason, text)


# -- a command ---------------------------------------------------------------------------------------


async def run_command(argv: tuple[str, ...], body: bytes) -> bytes:
    """Run the validator with `body` on stdin; its stdout. Cancelled (the deadline), the whole
    process group is killed."""
    env = helper_environment()  # without the proxy's key variables (withheld once read)
    executable = shutil.which(argv[0], path=env.get("PATH"))
    if executable is None:
        raise CheckFailed(f"command '{one_line(argv[0], 120)}' not found (give its absolute path)")
    try:
        process = await anyio.open_process(
            [executable, *argv[1:]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group, killed whole at the deadline
        )
    except OSError as exc:
        raise CheckFailed(f"cannot run '{one_line(argv[0], 120)}': {exc.strerror or exc}") from None
    stdout, stderr = bytearray(), bytearray()
    finished = False
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_feed, process, body)
            group.start_soon(_drain, process.stdout, stdout, MAX_VERDICT_BYTES + 1)
            group.start_soon(_drain, process.stderr, stderr, None)
        if len(stdout) > MAX_VERDICT_BYTES:
            raise CheckFailed(f"printed more than {MAX_VERDICT_BYTES // MiB} MiB")
        code = await process.wait()
        finished = True
    finally:
        if not finished:
            with anyio.CancelScope(shield=True):
                await _kill_group(process)
    if code != 0:
        tail = one_line(bytes(stderr[-STDERR_KEPT:]).decode("utf-8", "replace"), 200)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        raise CheckFailed(how + (f": {tail}" if tail else ""))
    return bytes(stdout)


async def _feed(process: Process, body: bytes) -> None:
    assert process.stdin is not None
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):  # it need not read it all
        await process.stdin.send(body)
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()


async def _drain(stream: ByteReceiveStream | None, into: bytearray, bound: int | None) -> None:
    """Read `stream` to its end; past `bound` bytes stop reading (a verdict that big is refused),
    and of an unbounded stream keep only the last STDERR_KEPT bytes."""
    if stream is None:
        return
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for chunk in stream:
            into.extend(chunk)
            if bound is not None and len(into) >= bound:
                return
            if bound is None and len(into) > STDERR_KEPT:
                del into[:-STDERR_KEPT]


async def _kill_group(process: Process) -> None:
    with suppress(ProcessLookupError, PermissionError):  # gone already
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(5.0):
        await process.wait()


# -- an HTTP endpoint ------------------------------------------------------------------------------


async def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> bytes:
    """POST `body` to `url` (no redirects followed) and return the answer's body, bounded."""
    import httpx  # here: ~100 ms of start-up that a proxy without HTTP checks never needs

    sent = {"content-type": "application/json", "accept": "application/json"}
    for name, value in headers.items():
        sent[name] = _expanded(name, value)
    host = urlsplit(url).hostname or ""
    try:
        async with (
            httpx.AsyncClient(follow_redirects=False, timeout=timeout, trust_env=not is_loopback(host)) as client,
            client.stream("POST", url, content=body, headers=sent) as response,
        ):
            if response.is_redirect:
                raise CheckFailed(f"answered HTTP {response.status_code}, a redirect, which is not followed")
            if not response.is_success:
                raise CheckFailed(f"answered HTTP {response.status_code}")
            received = bytearray()
            async for chunk in response.aiter_bytes():
                received.extend(chunk)
                if len(received) > MAX_VERDICT_BYTES:
                    raise CheckFailed(f"answered more than {MAX_VERDICT_BYTES // MiB} MiB")
            return bytes(received)
    except httpx.HTTPError as exc:
        raise CheckFailed(f"cannot be reached: {type(exc).__name__}: {one_line(str(exc), 120)}") from None


def _expanded(name: str, value: str) -> str:
    """A header value with each ${VAR} read from the proxy's environment (a withheld key variable too)."""

    def variable(found: Any) -> str:
        got = os.environ.get(found[1]) or withheld(found[1])
        if got is None:
            raise CheckFailed(f"its header {name} names ${{{found[1]}}}, which is not set in the proxy's environment")
        return got

    return VARIABLE.sub(variable, value)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _with_checks(fields: AuditFields, audit: AuditFields) -> AuditFields:
    """The refusal's record fields with every check's verdict so far."""
    return {**fields, "checks": audit["checks"]}

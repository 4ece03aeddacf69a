"""Decisions and LLM calls as OpenTelemetry spans and metrics, for a team's dashboards.

The JSONL audit log stays the record of truth: telemetry is built from the very records it
writes (an audit observer), so it never says something the log does not, and content reaches a
span only when the audit's content mode keeps it (`redacted` or `full`), already redacted.

One span per sampling or elicitation request (`sampling/createMessage`, `elicitation/create`),
with the OpenTelemetry GenAI semantic conventions' attributes (`gen_ai.operation.name`,
`gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.*`,
`gen_ai.response.finish_reasons`) and the proxy's own (`mcp_sampling_proxy.*`: server, tool, rule,
decision, approver), and a child span `chat MODEL` for the LLM HTTP call (with `server.address`).
Metrics: requests by server, method and decision; token usage (`gen_ai.client.token.usage`); LLM
call duration (`gen_ai.client.operation.duration`) and request duration; what the proxy's LLM calls
cost (`mcp_sampling_proxy.cost`, USD; the span has `mcp_sampling_proxy.cost_usd` and `.price_as_of`).

The SDK is imported only when telemetry is on (`pip install 'mcp-sampling-proxy[otel]'`); this
module uses its own tracer and meter providers, never the process-global ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias
from urllib.parse import urlsplit

from mcp_sampling_proxy.config.providers import KINDS
from mcp_sampling_proxy.config.settings import TelemetrySettings, installed, telemetry_wanted
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol.names import SAMPLING_CREATE

log = get_logger("mcp_sampling_proxy.telemetry")

EXPORT_TIMEOUT = 5.0  # seconds an export may take; shutdown waits at most about this long
PROXY = "mcp_sampling_proxy"

# What telemetry reads of a record: any audit record's fields, each checked before use (an observer
# must not fail on a field it did not expect).
Record: TypeAlias = Mapping[str, object]
# A span's or metric's attributes, in the value types OpenTelemetry takes.
Attributes: TypeAlias = dict[str, str | bool | int | float | list[str]]


class Notes(Protocol):
    """What the audit recorder's `RequestNotes` tell of the request's LLM call."""

    @property
    def llm_call(self) -> tuple[int, int] | None: ...
    @property
    def request_model(self) -> str | None: ...
    @property
    def provider_type(self) -> str | None: ...
    @property
    def llm_url(self) -> str | None: ...


class Telemetry:
    """Spans and metrics from audit records; `observe` is an `audit.recorder.Observer`."""

    def __init__(self, settings: TelemetrySettings, version: str):
        # start-up: OpenTelemetry costs ~150 ms, only when telemetry is on
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        endpoint = settings.otlp_endpoint  # None: the exporters read the OTEL_EXPORTER_OTLP_* variables
        resource = Resource.create({"service.name": settings.service_name, "service.version": version})
        self._tracer_provider = TracerProvider(resource=resource)
        self._tracer_provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces" if endpoint else None, timeout=EXPORT_TIMEOUT)
            )
        )
        self._meter_provider = MeterProvider(
            resource=resource,
            metric_readers=[
                PeriodicExportingMetricReader(
                    OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics" if endpoint else None, timeout=EXPORT_TIMEOUT),
                    export_interval_millis=30_000,
                )
            ],
        )
        self._tracer = self._tracer_provider.get_tracer(PROXY, version)
        meter = self._meter_provider.get_meter(PROXY, version)
        self._requests = meter.create_counter(
            f"{PROXY}.requests", unit="{request}", description="sampling and elicitation requests by decision"
        )
        self._request_duration = meter.create_histogram(
            f"{PROXY}.request.duration", unit="s", description="from the server's request to its answer"
        )
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="tokens per LLM call, by type"
        )
        self._llm_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="LLM call duration"
        )
        self._cost = meter.create_counter(
            f"{PROXY}.cost", unit="USD", description="what the proxy's own LLM calls cost, by model (priced ones)"
        )
        self.where = endpoint or "the OTEL_EXPORTER_OTLP_* endpoint"

    def observe(self, record: Record, started_ns: int, notes: Notes) -> None:
        """One span (and its LLM child span) and the metrics of one finished request."""
        # start-up: OpenTelemetry, only when telemetry is on
        from opentelemetry.trace import SpanKind, Status, StatusCode

        method = str(record.get("method") or "")
        decision = str(record.get("decision") or "")
        attributes = _request_attributes(record, notes)
        ended_ns = max(started_ns, _now_ns())
        span = self._tracer.start_span(
            method or "request", kind=SpanKind.INTERNAL, start_time=started_ns, attributes=attributes
        )
        if record.get("error") or decision in ("error", "timeout"):
            span.set_status(Status(StatusCode.ERROR, str(record.get("error") or record.get("reason") or decision)))
            span.set_attribute("error.type", decision if decision != "allow" else "llm_error")
        llm_call = notes.llm_call
        if llm_call is not None:
            self._llm_span(span, record, notes, llm_call)
        span.end(end_time=ended_ns)
        labels = {
            "mcp.method.name": method,
            f"{PROXY}.server": str(record.get("server") or ""),
            f"{PROXY}.decision": decision,
        }
        self._requests.add(1, labels)
        self._request_duration.record((ended_ns - started_ns) / 1e9, labels)
        model = {
            "gen_ai.request.model": str(notes.request_model or record.get("model") or ""),
            "gen_ai.provider.name": _provider_name(notes, record),
            "gen_ai.operation.name": "chat",
        }
        for kind, field in (("input", "input_tokens"), ("output", "output_tokens")):
            if isinstance(tokens := record.get(field), int):
                self._tokens.record(tokens, {**model, "gen_ai.token.type": kind})
        if llm_call is not None:
            self._llm_duration.record((llm_call[1] - llm_call[0]) / 1e9, model)
        cost = record.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            self._cost.add(cost, {**model, f"{PROXY}.server": str(record.get("server") or "")})

    def _llm_span(self, parent: Any, record: Record, notes: Notes, call: tuple[int, int]) -> None:
        # start-up: OpenTelemetry, only when telemetry is on
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        request_model = notes.request_model or ""
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": _provider_name(notes, record),
            "gen_ai.request.model": request_model,
        }
        attributes.update(_response_attributes(record))
        attributes.update(_server_address(notes.llm_url))
        span = self._tracer.start_span(
            f"chat {request_model}".strip(),
            kind=SpanKind.CLIENT,
            start_time=call[0],
            attributes=attributes,
            context=set_span_in_context(parent),
        )
        if record.get("error"):
            span.set_status(Status(StatusCode.ERROR, str(record["error"])))
            span.set_attribute("error.type", "llm_error")
        span.end(end_time=max(call[0], call[1]))

    def shutdown(self) -> None:
        """Export what is pending, then stop (blocking: call it from a thread)."""
        try:
            self._tracer_provider.shutdown()
            self._meter_provider.shutdown(timeout_millis=EXPORT_TIMEOUT * 1000)
        except Exception as exc:  # the proxy is exiting: say so, do not fail the exit
            log.warning("telemetry could not be flushed", endpoint=self.where, error=f"{type(exc).__name__}: {exc}")


def start_telemetry(settings: TelemetrySettings, environ: Mapping[str, str], version: str) -> Telemetry | None:
    """The exporter the policy or the environment asks for, or None."""
    if not telemetry_wanted(settings, environ):
        return None
    if not installed("opentelemetry.exporter.otlp.proto.http"):  # only the environment asked (check_telemetry)
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry packages are not installed; "
            "decisions are not exported (pip install 'mcp-sampling-proxy[otel]')"
        )
        return None
    telemetry = Telemetry(settings, version)
    log.info("exporting decisions to OpenTelemetry", endpoint=telemetry.where)
    return telemetry


def _request_attributes(record: Record, notes: Notes) -> Attributes:
    attributes: Attributes = {"mcp.method.name": str(record.get("method") or "")}
    for field in (
        "server",
        "host",
        "tool",
        "rule",
        "decision",
        "approver",
        "reason",
        "limit",
        "prompt_edited_by",
        "answer_edited_by",
        "price_as_of",
        "replica",
    ):
        value = record.get(field)
        if value is not None and value != "":
            attributes[f"{PROXY}.{field}"] = str(value)
    cost = record.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        attributes[f"{PROXY}.cost_usd"] = float(cost)
    candidates = record.get("tool_candidates")
    if isinstance(candidates, list) and candidates:
        attributes[f"{PROXY}.tool_candidates"] = [str(c) for c in candidates]
    if record.get("method") == SAMPLING_CREATE:
        attributes["gen_ai.operation.name"] = "chat"
        if record.get("provider"):
            attributes["gen_ai.provider.name"] = _provider_name(notes, record)
        if notes.request_model:
            attributes["gen_ai.request.model"] = notes.request_model
        attributes.update(_response_attributes(record))
        attributes.update(_server_address(notes.llm_url))
        attributes.update(_content_attributes(record.get("content")))
    return attributes


def _response_attributes(record: Record) -> Attributes:
    attributes: Attributes = {}
    if record.get("model"):
        attributes["gen_ai.response.model"] = str(record["model"])
    for field, name in (("input_tokens", "gen_ai.usage.input_tokens"), ("output_tokens", "gen_ai.usage.output_tokens")):
        if isinstance(tokens := record.get(field), int):
            attributes[name] = tokens
    if record.get("stop_reason"):
        attributes["gen_ai.response.finish_reasons"] = [str(record["stop_reason"])]
    return attributes


def _provider_name(notes: Notes, record: Record) -> str:
    """The GenAI convention's provider name: the API spoken (openai, anthropic), else ours."""
    kind = notes.provider_type
    api = KINDS[kind].api if kind in KINDS else None
    return api or str(record.get("provider") or kind or "")


def _server_address(url: str | None) -> Attributes:
    if not url:
        return {}
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"server.address": parts.hostname, "server.port": port}


def _content_attributes(content: object) -> Attributes:
    """The prompt and answer, only when the audit record holds them (content mode redacted or full),
    as the audit log wrote them (redacted in `redacted` mode)."""
    if not isinstance(content, dict) or content.get("mode") not in ("redacted", "full"):
        return {}
    attributes: Attributes = {}
    messages = [m["message"] for m in content.get("messages") or [] if isinstance(m, dict) and "message" in m]
    if messages:
        attributes["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False)
    system = content.get("system")
    if isinstance(system, dict) and "text" in system:
        attributes["gen_ai.system_instructions"] = json.dumps(
            [{"type": "text", "content": system["text"]}], ensure_ascii=False
        )
    response = content.get("response")
    if isinstance(response, dict) and "result" in response:
        attributes["gen_ai.output.messages"] = json.dumps([response["result"]], ensure_ascii=False)
    return attributes


def _now_ns() -> int:
    return time.time_ns()

"""Decisions in OpenTelemetry: the real proxy with the real OTLP/HTTP exporter, a receiver on 127.0.0.1
that decodes the protobuf, the loopback fake LLM and the small server that samples."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.llm_server import FakeLLMServer
from fakes.otlp_receiver import OTLPReceiver
from helpers.support import openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy

KEY = "sk-test-key-never-exported-0123456789"
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the [otel] extra is not installed")


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as server:
        yield server


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer("openai") as server:
        yield server


async def sample(tmp_path: Path, policy_text: str, prompt: str, **env: str) -> Any:
    """One sampling request through the proxy; returns after the proxy has exited (and flushed)."""
    policy = write_policy(tmp_path, policy_text)
    async with sdk_host(proxy_command(policy), proxy_env(TEST_LLM_KEY=KEY, **env), tmp_path / "stderr.log") as client:
        return await client.call_tool("sample", {"prompt": prompt, "max_tokens": 42, "hints": ["gpt"]})


def telemetry(endpoint: str) -> str:
    return f"telemetry:\n  otlp_endpoint: {endpoint}\n  service_name: team-proxy\n"


def spans_named(receiver: OTLPReceiver, name: str) -> list[dict[str, Any]]:
    return [s for s in receiver.spans if s["name"] == name]


@pytest.mark.anyio
async def test_an_allowed_request_is_one_span_with_genai_attributes_and_an_llm_child_span(
    tmp_path: Path, receiver: OTLPReceiver, llm: FakeLLMServer
) -> None:
    llm.reply_text("Paris.", model="gpt-test-2026-01", finish="stop", usage=(12, 3))
    result = await sample(tmp_path, openai_policy(llm.base_url, extra=telemetry(receiver.endpoint)), "Capital?")
    assert tool_json(result)["content"]["text"] == "Paris."
    (request,) = spans_named(receiver, "sampling/createMessage")
    attrs = request["attributes"]
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-test"
    assert attrs["gen_ai.response.model"] == "gpt-test-2026-01"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (12, 3)
    assert attrs["gen_ai.response.finish_reasons"] == ["endTurn"]
    assert attrs["mcp_sampling_proxy.decision"] == "allow"
    assert attrs["mcp_sampling_proxy.rule"] == "allow-all"
    assert attrs["mcp_sampling_proxy.tool"] == "sample"
    assert attrs["mcp_sampling_proxy.server"]
    assert attrs["server.address"] == "127.0.0.1"
    assert "gen_ai.input.messages" not in attrs  # audit content is `none`: no content leaves the proxy
    (call,) = spans_named(receiver, "chat gpt-test")
    assert call["parent_span_id"] == request["span_id"] and call["trace_id"] == request["trace_id"]
    assert call["attributes"]["server.port"] == int(llm.base_url.rsplit(":", 1)[1].split("/")[0])
    assert request["start"] <= call["start"] <= call["end"] <= request["end"]
    assert {"service.name": "team-proxy"}.items() <= receiver.resources[0].items()
    assert receiver.metrics["gen_ai.client.token.usage"]
    points = receiver.metrics["mcp_sampling_proxy.requests"]
    assert any(p["attributes"]["mcp_sampling_proxy.decision"] == "allow" and p["value"] == 1 for p in points)
    assert "gen_ai.client.operation.duration" in receiver.metrics
    everything = json.dumps(receiver.spans) + json.dumps(receiver.metrics)
    assert KEY not in everything


@pytest.mark.anyio
async def test_a_denied_request_is_a_span_without_an_llm_call_and_the_standard_otel_variables_turn_it_on(
    tmp_path: Path, receiver: OTLPReceiver, llm: FakeLLMServer
) -> None:
    """No telemetry section in the policy: OTEL_EXPORTER_OTLP_ENDPOINT alone turns the export on."""
    rules = "rules:\n  - name: refuse\n    action: deny\n"
    policy = openai_policy(llm.base_url, rules=rules)
    assert "telemetry" not in policy
    await sample(tmp_path, policy, "hi", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    (request,) = spans_named(receiver, "sampling/createMessage")
    assert request["attributes"]["mcp_sampling_proxy.decision"] == "deny"
    assert request["attributes"]["mcp_sampling_proxy.rule"] == "refuse"
    assert [s for s in receiver.spans if s["name"].startswith("chat")] == []
    assert llm.requests == []


@pytest.mark.anyio
async def test_content_is_exported_only_as_the_audit_keeps_it_redacted(
    tmp_path: Path, receiver: OTLPReceiver, llm: FakeLLMServer
) -> None:
    audit = tmp_path / "audit.jsonl"
    extra = (
        telemetry(receiver.endpoint) + f"audit:\n  path: {audit}\n  content: redacted\n  redact: ['ACME-\\d{{6}}']\n"
    )
    await sample(tmp_path, openai_policy(llm.base_url, extra=extra), "ticket ACME-123456 please")
    (request,) = spans_named(receiver, "sampling/createMessage")
    sent = request["attributes"]["gen_ai.input.messages"]
    assert "ticket" in sent and "ACME-123456" not in sent
    assert "ACME-123456" not in request["attributes"]["gen_ai.output.messages"]  # the echo is redacted too
    (record,) = [json.loads(line) for line in audit.read_text().splitlines()]
    assert record["decision"] == "allow"  # the audit log is still written, and is the record of truth


@pytest.mark.anyio
async def test_an_unreachable_collector_does_not_break_requests(tmp_path: Path, llm: FakeLLMServer) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    result = await sample(tmp_path, openai_policy(llm.base_url, extra=telemetry(f"http://127.0.0.1:{port}")), "hi")
    assert tool_json(result)["content"]["text"].startswith("echo:")

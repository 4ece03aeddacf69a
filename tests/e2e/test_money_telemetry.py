"""The cost of a request in OpenTelemetry: the real proxy and OTLP/HTTP exporter, a receiver on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from fakes.otlp_receiver import OTLPReceiver
from helpers.support import openai_policy, proxy_command, proxy_env, sdk_host, tool_json, write_policy

from mcp_sampling_proxy.config.prices import AS_OF

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the [otel] extra is not installed")


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as server:
        yield server


@pytest.mark.anyio
async def test_the_request_span_carries_its_cost_and_the_price_date(
    tmp_path: Path, receiver: OTLPReceiver, llm: FakeLLMServer
) -> None:
    llm.reply_text("Paris.", usage=(2000, 1000))  # gpt-4o: 2,000 x $2.50 + 1,000 x $10 per million = $0.015
    extra = f"telemetry:\n  otlp_endpoint: {receiver.endpoint}\n"
    policy = write_policy(tmp_path, openai_policy(llm.base_url, model="gpt-4o", extra=extra))
    async with sdk_host(proxy_command(policy), proxy_env(TEST_LLM_KEY="k"), tmp_path / "stderr.log") as client:
        result = await client.call_tool("sample", {"prompt": "Capital?"})
    assert tool_json(result)["content"]["text"] == "Paris."
    (span,) = [s for s in receiver.spans if s["name"] == "sampling/createMessage"]
    assert span["attributes"]["mcp_sampling_proxy.cost_usd"] == 0.015
    assert span["attributes"]["mcp_sampling_proxy.price_as_of"] == AS_OF
    (point,) = receiver.metrics["mcp_sampling_proxy.cost"]  # (the test receiver decodes integer values only)
    assert point["attributes"]["gen_ai.request.model"] == "gpt-4o"

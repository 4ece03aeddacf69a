"""What every HTTP adapter shares: one client per provider, the key kept inside it, one endpoint.

Subclasses say where the endpoint is, how the key is sent, and how to map a request and a
response; connection reuse, timeouts, retries and errors are the same for all of them.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Mapping
from typing import ClassVar, Literal
from urllib.parse import urlsplit

import anyio
from msgspec import Struct

from mcp_sampling_proxy.config.keys import provider_key
from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.protocol.wire_types import CreateMessageParams, JsonObject, Tool
from mcp_sampling_proxy.providers.base import Completion, LLMError
from mcp_sampling_proxy.providers.errors import unsupported
from mcp_sampling_proxy.providers.llm_http import LlmHttp, Reply, Timeouts
from mcp_sampling_proxy.providers.retry import post_json

# Connections per provider. The sampling gate (`sampling.max_concurrent`) already bounds the calls
# in flight; this bound keeps a flood from opening sockets without limit when it is set high (a call
# waiting for a connection still counts against its deadline).
MAX_CONNECTIONS = 16


def tls_context(base_url: str) -> ssl.SSLContext | Literal[True]:
    """How the client checks TLS: the CA store (True: llm_http.verified_tls), except for an endpoint over plain HTTP (a
    model server on this machine) reached without a proxy, which never makes a TLS connection (the client
    follows no redirects): it gets a context that trusts no certificate, so it would refuse one, and the
    ~65 ms of CPU that loading the CA store costs at every start is not spent."""
    if urlsplit(base_url).scheme != "http" or urllib.request.getproxies():
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names, and trusts none


class Options(Struct, frozen=True):
    """The request's options every provider takes (`HttpAdapter.options`), checked."""

    temperature: float | None
    stop: list[str] | None  # stopSequences
    tools: list[Tool] | None  # only when the provider takes tools
    tool_choice: str | None  # the MCP mode, one of the adapter's `tool_choices`


class HttpAdapter:
    default_base_url = ""
    tool_choices: ClassVar[Mapping[str, object]] = {}  # MCP toolChoice mode -> the provider's value

    def __init__(self, config: ProviderConfig):
        self.config = config
        self.base_url = self.normalise_base_url((config.base_url or self.default_base_url).rstrip("/"))
        headers = {"content-type": "application/json", **self.fixed_headers(), **config.headers}
        key = provider_key(config)
        if key:  # kept only inside the client
            headers.update({config.api_key_header: key} if config.api_key_header else self.auth_headers(key))
        self.http = LlmHttp(
            headers,
            Timeouts(connect=config.connect_timeout, read=config.read_timeout),
            tls=tls_context(self.base_url),
            proxy_for=self.base_url,
            max_connections=MAX_CONNECTIONS,
        )

    # -- what a provider defines ---------------------------------------------------------------
    def normalise_base_url(self, base_url: str) -> str:
        return base_url

    def fixed_headers(self) -> dict[str, str]:
        return {}

    def auth_headers(self, key: str) -> dict[str, str]:
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    def models_url(self) -> str:
        """The provider's list of models (what `doctor` asks to check the URL and the key)."""
        raise NotImplementedError

    async def list_models(self) -> Reply:
        """GET the models list with this adapter's headers (key, api-version, extra headers)."""
        return await self.http.get(self.models_url())

    def endpoint_for(self, model: str) -> str:
        """Where a request for `model` goes; the same endpoint for every model unless a provider
        puts the model in the URL (Azure OpenAI deployments)."""
        return self.endpoint

    def build_request(self, params: CreateMessageParams, model: str) -> Mapping[str, object]:
        """The provider's request body (a TypedDict of its wire format)."""
        raise NotImplementedError

    def parse_response(self, data: JsonObject, model: str) -> Completion:
        """A Completion from the provider's answer (JSON it has not checked yet)."""
        raise NotImplementedError

    def options(self, params: CreateMessageParams) -> Options:
        """temperature, stop sequences, tools and tool choice: the same MCP fields for every
        provider, checked here; each adapter puts them in its body under its own names."""
        stop = params.get("stopSequences")
        tools = params.get("tools")
        mode = None
        if tools:
            if not self.config.supports_tools:
                raise unsupported(self.config, "tools", "the request", "tool use is disabled for this provider")
            mode = (params.get("toolChoice") or {}).get("mode")
            if mode and mode not in self.tool_choices:
                raise unsupported(self.config, f"toolChoice mode '{mode}'", "the request")
        return Options(params.get("temperature"), list(stop) if stop else None, tools or None, mode or None)

    # -- shared --------------------------------------------------------------------------------
    @property
    def supports_tools(self) -> bool:
        return self.config.supports_tools

    async def aclose(self) -> None:
        await self.http.aclose()

    async def complete(self, params: CreateMessageParams, model: str) -> Completion:
        payload = self.build_request(params, model)
        # the read timeout is per read: an LLM that sends one byte a second never trips it.
        # The deadline covers the whole call, retries and their backoff included.
        with anyio.move_on_after(self.config.total_timeout) as deadline:
            data = await post_json(self.http, self.endpoint_for(model), payload, self.config, model=model)
        if deadline.cancelled_caught:
            raise deadline_error(self.config)
        return self.parse_response(data, model)


def deadline_error(config: ProviderConfig) -> LLMError:
    """The call ran past `timeout.total`; says which provider and which setting to change."""
    return LLMError(
        f"provider '{config.name}' did not answer within its {config.total_timeout:g} s deadline "
        f"(retries included); raise llm.providers.{config.name}.timeout.total or use a faster model",
        provider=config.name,
    )

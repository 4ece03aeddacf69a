"""What every HTTP adapter shares: one client per provider, the key kept inside it, one endpoint.

Subclasses say where the endpoint is, how the key is sent, and how to map a request and a
response; connection reuse, timeouts, retries and errors are the same for all of them.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from .base import Completion, ProviderConfig
from .retry import post_json


class HttpAdapter:
    default_base_url = ""

    def __init__(self, config: ProviderConfig, *, transport: httpx.AsyncBaseTransport | None = None):
        self.config = config
        self.base_url = self.normalise_base_url((config.base_url or self.default_base_url).rstrip("/"))
        headers = {"content-type": "application/json", **self.fixed_headers(), **config.headers}
        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if key:
            headers.update(self.auth_headers(key))  # kept only inside the client
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(config.read_timeout, connect=config.connect_timeout),
            transport=transport,
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

    def build_request(self, params: dict[str, Any], model: str) -> dict[str, Any]:
        raise NotImplementedError

    def parse_response(self, data: dict[str, Any], model: str) -> Completion:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    @property
    def supports_tools(self) -> bool:
        return self.config.supports_tools

    async def aclose(self) -> None:
        await self._client.aclose()

    async def complete(self, params: dict[str, Any], model: str) -> Completion:
        payload = self.build_request(params, model)
        data = await post_json(self._client, self.endpoint, payload, self.config, model=model)
        return self.parse_response(data, model)

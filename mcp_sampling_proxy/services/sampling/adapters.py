"""The LLM adapters a proxy has made, by provider name: made on first use (aiohttp is imported only
then), closed together when the proxy ends."""

from __future__ import annotations

import threading
from typing import Any

import anyio

from mcp_sampling_proxy.config.providers import ProviderConfig
from mcp_sampling_proxy.providers.base import Adapter
from mcp_sampling_proxy.providers.registry import make_adapter
from mcp_sampling_proxy.quotas.limiters import SamplingGate
from mcp_sampling_proxy.services.assess import usable_providers


class AdapterPool:
    """Adapters by provider name, created on first use; and the gate every LLM call of the process passes
    (`sampling.max_concurrent`, `max_queued`), one for all of a `serve`'s sessions as for a proxy's one."""

    def __init__(self, providers: list[ProviderConfig], terminal: Any = None):
        self._gate: SamplingGate | None = None
        self._configs = {p.name: p for p in providers}
        self._terminal = terminal
        self._adapters: dict[str, Adapter] = {}
        self._making = threading.Lock()  # the start-up warm-up (runtime.warm_up) makes them in a thread
        self._closed = False

    @property
    def configs(self) -> list[ProviderConfig]:
        return list(self._configs.values())

    @property
    def configs_by_name(self) -> dict[str, ProviderConfig]:
        return self._configs

    @property
    def can_use_tools(self) -> bool:
        return bool(usable_providers(self.configs, tools=True))

    def gate(self, max_concurrent: int, max_queued: int) -> SamplingGate:
        """The gate every LLM call made with these adapters passes, made at the first ask with the policy's
        sizes (a process runs one policy: every session asks with the same)."""
        if self._gate is None:
            self._gate = SamplingGate(max_concurrent, max_queued)
        return self._gate

    async def ready(self, name: str) -> Adapter:
        """`get`, from the event loop: an adapter not made yet is made, or waited for while the start-up's
        warm-up makes it, on a worker thread (making an HTTP one imports aiohttp and loads CA stores: ~200 ms
        of CPU), so the loop goes on relaying every session's messages meanwhile."""
        adapter = self._adapters.get(name)
        if adapter is not None:
            return adapter
        return await anyio.to_thread.run_sync(self.get, name)

    def get(self, name: str) -> Adapter:
        adapter = self._adapters.get(name)
        if adapter is None:
            with self._making:
                if self._closed:
                    raise RuntimeError("the proxy is shutting down: no new LLM adapters")
                adapter = self._adapters.get(name)
                if adapter is None:
                    adapter = self._adapters[name] = make_adapter(self._configs[name], self._terminal)
        return adapter

    async def aclose(self) -> None:
        """Close every adapter made, one the warm-up thread is making included (its lock is waited
        for in a thread), and make no more: one made after the snapshot was never closed."""

        def take_all() -> list[Adapter]:
            with self._making:
                self._closed = True
                adapters, self._adapters = list(self._adapters.values()), {}
            return adapters

        for adapter in await anyio.to_thread.run_sync(take_all):
            await adapter.aclose()

"""Serve `sampling/createMessage`: validate, decide, approve, route, fulfil, audit.

One request flows through: SDK-model validation (-32602 naming the field), the pure policy
engine, human approval for `prompt`, then routing (the host when it can sample, else our own
adapter), and an audit record for every outcome.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mcp_sampling_proxy import jsonrpc
from mcp_sampling_proxy.approval import ApprovalRequest, Approver
from mcp_sampling_proxy.audit import AuditLog, elapsed_ms
from mcp_sampling_proxy.config import Settings
from mcp_sampling_proxy.jsonrpc import RpcError
from mcp_sampling_proxy.llm.base import Adapter, LLMError, ProviderConfig
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.model_choice import choose_model
from mcp_sampling_proxy.policy import Facts, decide
from mcp_sampling_proxy.sampling_request import REQUEST_ORIGIN, describe, validate

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay import Relay, Session

log = get_logger("mcp_sampling_proxy.sampling")

NO_PROVIDER_HINT = (
    "no LLM provider is configured and the proxy has no terminal to type a reply: set OPENAI_API_KEY "
    "(and OPENAI_BASE_URL for a local server such as Ollama) or ANTHROPIC_API_KEY in the proxy's "
    "environment, or add llm.providers to the policy file (--policy)"
)


class SamplingService:
    def __init__(self, settings: Settings, adapters: AdapterPool, approver: Approver, audit: AuditLog):
        self._settings = settings
        self._adapters = adapters
        self._approver = approver
        self._audit = audit

    async def serve(self, message: dict[str, Any], relay: Relay) -> dict[str, Any]:
        started = time.monotonic()
        session = relay.session
        in_flight = session.tools_in_flight()
        tool = in_flight[-1] if in_flight else None
        base = {
            "server": session.server_name,
            "host": session.host_name or None,
            "method": "sampling/createMessage",
            "request_id": message.get("id"),
            "tool": tool,
            "protocol_version": session.protocol_version,
        }
        try:
            params = validate(message.get("params"))
        except RpcError as exc:
            self._audit.record(**base, decision="error", rule=None, reason=exc.message)
            raise
        decision = decide(self._settings.rules,
                          Facts("sampling", session.server_name, session.host_name, in_flight))
        log.info("sampling request", server=session.server_name, tool=tool, rule=decision.rule,
                 action=decision.action)
        audit = {**base, "rule": decision.rule}
        approver_channel = None
        if decision.action == "deny":
            reason = decision.message or f"sampling denied by policy rule '{decision.rule}'"
            self._audit.record(**audit, decision="deny", reason=reason, approver=None)
            raise RpcError(jsonrpc.USER_REJECTED, reason)
        approval_request = ApprovalRequest(session.server_name, session.host_name, tool, decision.rule, params,
                                           describe(params, server=session.server_name, tool=tool))
        if decision.action == "prompt":
            approval = await self._approver.ask(approval_request, relay)
            if not approval.approved:
                kind = "timeout" if approval.outcome == "timeout" else "rejected"
                self._audit.record(**audit, decision=kind, reason=approval.reason, approver=approval.channel)
                log.warning("sampling not approved", reason=approval.reason)
                raise RpcError(jsonrpc.USER_REJECTED, approval.reason)
            approver_channel = approval.channel
            if approval.params is not None:  # the operator edited the prompt: check it like the original
                params = validate(approval.params)
                message = {**message, "params": params}
        outcome = "approved" if approver_channel else "allow"
        audit.update(decision=outcome, reason=decision.reason, approver=approver_channel)

        if self._route(params, session) == "host":
            response = await relay.forward_to_host(message)
            error = response.get("error")
            if error is None:
                result = response.get("result") or {}
                self._audit.record(**audit, provider="host", model=result.get("model"),
                                   stop_reason=result.get("stopReason"), latency_ms=elapsed_ms(started))
                return result
            if not self._settings.sampling.fallback_on_host_error:
                self._audit.record(**audit, provider="host", error=str(error.get("message")),
                                   latency_ms=elapsed_ms(started))
                raise RpcError(error.get("code", jsonrpc.INTERNAL_ERROR), str(error.get("message", "")),
                               error.get("data"))
            log.info("host refused sampling; fulfilling locally (fallback_on_host_error)",
                     host_error=error.get("message"))
        return await self._fulfil(params, session, tool, audit, started)

    def _route(self, params: dict[str, Any], session: Session) -> str:
        route = self._settings.sampling.route
        if route != "auto":
            return "host" if route == "host" else "proxy"
        host_sampling = session.host_capabilities.get("sampling")
        if not isinstance(host_sampling, dict):
            return "proxy"
        if (params.get("tools") or params.get("toolChoice")) and "tools" not in host_sampling:
            return "proxy"
        return "host"

    async def _fulfil(
        self, params: dict[str, Any], session: Session, tool: str | None, audit: dict[str, Any], started: float
    ) -> dict[str, Any]:
        wants_tools = bool(params.get("tools"))
        providers = self._adapters.usable(tools=wants_tools)
        if not providers:
            reason = NO_PROVIDER_HINT if not self._adapters.any_configured else (
                "the request offers tools, and no configured provider can use tools (tools: false)"
            )
            self._audit.record(**audit, error=reason)
            raise RpcError(jsonrpc.INTERNAL_ERROR if not wants_tools else jsonrpc.INVALID_PARAMS, reason)
        choice = choose_model(providers, params.get("modelPreferences"), aliases=self._settings.aliases,
                              default_provider=self._settings.default_provider)
        log.info("model chosen", provider=choice.provider, model=choice.model, why=choice.reason)
        adapter = self._adapters.get(choice.provider)
        token = REQUEST_ORIGIN.set((session.server_name, tool))
        try:
            completion = await adapter.complete(params, choice.model)
        except LLMError as exc:
            self._audit.record(**audit, provider=choice.provider, model=choice.model, error=exc.message,
                               latency_ms=elapsed_ms(started))
            log.warning("sampling failed", provider=choice.provider, error=exc.message)
            raise RpcError(exc.code, exc.message) from None
        finally:
            REQUEST_ORIGIN.reset(token)
        content: Any = completion.content
        if not wants_tools and len(content) == 1:
            content = content[0]
        self._audit.record(**audit, provider=choice.provider, model=completion.model,
                           input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
                           stop_reason=completion.stop_reason, latency_ms=elapsed_ms(started))
        log.info("sampling fulfilled", provider=choice.provider, model=completion.model,
                 stop_reason=completion.stop_reason, latency_ms=elapsed_ms(started))
        return {"role": "assistant", "content": content, "model": completion.model,
                "stopReason": completion.stop_reason}


class AdapterPool:
    """Adapters by provider name, created on first use (httpx is imported only then)."""

    def __init__(self, providers: list[ProviderConfig], terminal: Any = None):
        self._configs = {p.name: p for p in providers}
        self._terminal = terminal
        self._adapters: dict[str, Adapter] = {}

    @property
    def any_configured(self) -> bool:
        return bool(self._configs)

    def usable(self, *, tools: bool) -> list[ProviderConfig]:
        configs = list(self._configs.values())
        if tools:
            configs = [c for c in configs if c.supports_tools and c.type != "console"]
        return configs

    @property
    def can_use_tools(self) -> bool:
        return bool(self.usable(tools=True))

    def get(self, name: str) -> Adapter:
        adapter = self._adapters.get(name)
        if adapter is None:
            adapter = self._adapters[name] = make_adapter(self._configs[name], self._terminal)
        return adapter

    async def aclose(self) -> None:
        for adapter in self._adapters.values():
            await adapter.aclose()


def make_adapter(config: ProviderConfig, terminal: Any = None) -> Adapter:
    if config.type == "openai":
        from mcp_sampling_proxy.llm.openai import OpenAIAdapter

        return OpenAIAdapter(config)
    if config.type == "anthropic":
        from mcp_sampling_proxy.llm.anthropic import AnthropicAdapter

        return AnthropicAdapter(config)
    from mcp_sampling_proxy.llm.console import ConsoleAdapter

    return ConsoleAdapter(config, terminal)

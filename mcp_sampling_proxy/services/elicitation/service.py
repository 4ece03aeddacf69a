"""Runs an `elicitation/create` request through its stages, in the order the package's docstring gives,
and writes the request's one audit record however it ends."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol import jsonrpc
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams, JsonRpcNotification
from mcp_sampling_proxy.quotas.limiters import limit_key
from mcp_sampling_proxy.services.elicitation.ended import Answered, Ending
from mcp_sampling_proxy.services.elicitation.request import request_mode, validate_elicitation
from mcp_sampling_proxy.services.elicitation.route import Route, route
from mcp_sampling_proxy.services.opening import Opened, opened

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.form_prompts import ElicitationConsoles
    from mcp_sampling_proxy.quotas.limiters import Limiters
    from mcp_sampling_proxy.relay.ports import ServerRequest
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.elicitation")


class ElicitationService:
    def __init__(
        self,
        settings: Settings,
        consoles: ElicitationConsoles,
        audit: AuditLog,
        limiters: Limiters,
        opener: Callable[[str], bool] | None = None,  # None: the user's browser (system/browser.py)
    ):
        self._settings = settings.elicitation
        self._policy = settings
        self._consoles = consoles
        self._audit = audit
        self._limiters = limiters
        self._opener = opener
        self._at_host: set[str] = set()  # URL elicitation ids the host saw (their completions go there)

    def forward_notification(self, message: JsonRpcNotification) -> bool:
        """`notifications/elicitation/complete` goes to whoever saw the elicitation."""
        params = jsonrpc.as_object(message.get("params"))
        elicitation_id = params.get("elicitationId")
        if isinstance(elicitation_id, str) and elicitation_id in self._at_host:
            self._at_host.discard(elicitation_id)
            return True
        log.info("elicitation completed", elicitation_id=elicitation_id)
        return False

    async def answer(self, incoming: ServerRequest) -> dict[str, Any]:
        """Answer one elicitation/create (the `answers` port, relay/ports.py)."""
        raw = incoming.params
        mode = request_mode(raw) if isinstance(raw, dict) else None
        async with opened(incoming, self._audit, self._limiters, raw, mode=mode) as request:
            params = validate_elicitation(request.incoming.params)
            try:
                ending = await self._serve(request, params)
            except Answered as answered:
                ending = answered.ending
                log.info("elicitation answered", action=ending.fields.get("action"), why=ending.fields.get("reason"))
            self._audit.record(params=params, result=ending.result, **request.ended(**ending.fields))
            if ending.error is not None:
                raise ending.error
            result: dict[str, Any] = ending.result
            return result

    async def _serve(self, request: Opened, params: ElicitRequestParams) -> Ending:
        """The stages in order; a stage that answers for the proxy raises `Answered`."""
        # start-up: the stages' modules (forms, auto-answers, the browser) load at the first elicitation,
        # not at every start of a proxy, most of which never see one
        from mcp_sampling_proxy.services.elicitation import auto
        from mcp_sampling_proxy.services.elicitation.ask import at_host, nobody_to_ask, on_console
        from mcp_sampling_proxy.services.elicitation.form import checked_form
        from mcp_sampling_proxy.services.elicitation.judge import judge
        from mcp_sampling_proxy.system.browser import open_url

        session = request.incoming.session
        mode = request_mode(params)
        if request.busy is not None:  # the proxy holds too many requests already (Limiters.holding)
            raise Answered("decline", request.busy.message, "deny", limit=request.busy.limit)
        decision = judge(self._policy, request, params)
        async with self._limiters.hold(decision.matched, limit_key(decision.rule, session.server_name)) as refusal:
            if refusal is not None:
                raise Answered("decline", refusal.message, "deny", limit=refusal.limit)
            to = route(self._settings, mode, session)
            matched = auto.match(self._settings, session.server_name, request.in_flight, params)
            await auto.answer_if(matched, "always", params, mode)
            if to == "host":
                return await at_host(request, params, mode, self._at_host)
            form = checked_form(self._settings, params, session, matched) if mode == "form" else None
            console = self._consoles.available() if to == "console" else None
            if console is None:
                await auto.answer_if(matched, "headless", params, mode)
                await nobody_to_ask(self._settings, params, mode, to, matched.withheld)
            opener = open_url if self._opener is None else self._opener
            return await on_console(console, request, params, mode, form, opener, matched.withheld)

    def route_for(self, params: Mapping[str, Any], session: Session) -> Route:
        """host | console | decline for this request."""
        return route(self._settings, request_mode(params), session)

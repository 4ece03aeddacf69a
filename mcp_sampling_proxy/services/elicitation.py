"""Serve `elicitation/create` for hosts that can't, and govern it for hosts that can.

Routing (`elicitation.route`): `auto` forwards to the host when it declared the requested mode,
else asks on a console (the terminal, else the companion console), else answers by policy
(`non_interactive`: decline, cancel or accept_defaults). Rules with `method: elicitation` apply:
deny answers `{"action": "decline"}` (never an error), rate limits refuse the same way. Forms
that ask for secrets (which the spec forbids in form mode) get the `sensitive_form` action.
URLs are never fetched: they are shown with their host highlighted and warnings, and opened in
the user's browser only after consent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Unpack, cast

import anyio

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import AuditFields
from mcp_sampling_proxy.config.auto_answers import AutoAnswer
from mcp_sampling_proxy.config.settings import Settings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.notation.vocabulary import Outcome
from mcp_sampling_proxy.protocol import jsonrpc, wire_checks
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.protocol.names import ELICITATION_COMPLETE, ELICITATION_CREATE
from mcp_sampling_proxy.protocol.sampling_request import check_params
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams, JsonRpcNotification
from mcp_sampling_proxy.quotas.limiters import limit_key
from mcp_sampling_proxy.relay.keepalive import waiting_for
from mcp_sampling_proxy.services import auto_answers
from mcp_sampling_proxy.services.assess import Origin, judge_elicitation
from mcp_sampling_proxy.services.opening import Opened, opened
from mcp_sampling_proxy.system.browser import open_url
from mcp_sampling_proxy.text.sanitize import one_line, quote

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.form_prompts import ElicitationConsoles
    from mcp_sampling_proxy.quotas.limiters import Limiters
    from mcp_sampling_proxy.relay.ports import ServerRequest
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.services.elicitation")

METHOD = ELICITATION_CREATE
COMPLETE = ELICITATION_COMPLETE


def marked(params: ElicitRequestParams, session: Session) -> ElicitRequestParams:
    """A server's form as the host shows it: its message quoted under a line that names the server, so a
    look-alike of the proxy's own approval form ("mcp-sampling-proxy: ... approve?") cannot pass for one."""
    message = params.get("message")
    text = message if isinstance(message, str) else ""
    reported = session.server_reported_if_different
    calls_itself = f" (it calls itself '{one_line(reported, 80)}')" if reported else ""
    shown = params.copy()  # (as `{**params, "message": ...}`: a shallow copy, the message in its place)
    shown["message"] = (
        f"The server '{one_line(session.server_name, 120)}'{calls_itself} asks (its words, "
        f"quoted; this is not a question of mcp-sampling-proxy):\n\n{quote(text)}"
    )
    return shown


def request_mode(params: Mapping[str, Any]) -> str:
    return "url" if params.get("mode") == "url" or ("url" in params and "requestedSchema" not in params) else "form"


class ElicitationService:
    def __init__(
        self,
        settings: Settings,
        consoles: ElicitationConsoles,
        audit: AuditLog,
        limiters: Limiters,
        opener: Callable[[str], bool] = open_url,
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
            return await self._serve(request)

    async def _serve(self, request: Opened) -> dict[str, Any]:
        """The stages in order: validate, judge (the policy), limits, route; then an auto-answer, the
        host's form, a console, or the policy's answer when nobody can be asked. Every ending writes the
        request's one record (`_recorded`)."""
        session = request.incoming.session
        params = validate_elicitation(request.incoming.params)
        mode = request_mode(params)
        answer = functools.partial(self._answer, request, params)
        if request.busy is not None:  # the proxy holds too many requests already (Limiters.holding)
            return answer("decline", request.busy.message, "deny", limit=request.busy.limit)
        decision = judge_elicitation(
            self._policy,
            params,
            Origin(session.server_name, session.host_name, request.in_flight, session.server_reported, session.client),
        ).decision
        request.audit["tool"] = decision.tool or request.audit.get("tool")  # the candidate judged strictest
        request.audit["rule"] = decision.rule
        if decision.action == "deny":
            return answer("decline", decision.message or f"declined by policy rule '{decision.rule}'", "deny")
        async with self._limiters.hold(decision.matched, limit_key(decision.rule, session.server_name)) as refusal:
            if refusal is not None:
                return answer("decline", refusal.message, "deny", limit=refusal.limit)
            route = self._route(mode, params, session)
            entry = auto_answers.first_match(
                self._settings.auto_answers, session.server_name, request.in_flight, params
            )
            withheld = ""  # why a matching auto-answer was not used, for the audit reason
            if entry is not None and entry.applies == "always":
                verdict = await self._auto_verdict(entry, params, mode)
                if verdict.kind != "withheld":
                    return self._auto_answer(verdict, answer)
                withheld = f"; {verdict.why}"
            if route == "host":
                return await self._forward_to_host(request, params, mode)
            form = None
            if mode == "form":
                # start-up: forms costs ~30 ms, only form requests need it
                from mcp_sampling_proxy.approval.forms import FormError, parse_form, secret_reasons

                try:
                    form = parse_form(params.get("requestedSchema") or {})
                except FormError as exc:
                    return answer("decline", f"unsupported form: {exc}", "error")
                secrets = secret_reasons(form, str(params.get("message", "")))
                if secrets and entry is not None and not withheld:
                    withheld = f"; {auto_answers.sensitive_note(entry, secrets)}"
                    log.warning("auto-answer not used", auto_answer=entry.name, why=withheld[2:])
                if secrets and self._settings.sensitive_form != "allow":
                    log.warning(
                        "form asks for secrets, which MCP forbids in form mode",
                        triggered_by=secrets,
                        server=session.server_name,
                    )
                    return answer(
                        self._settings.sensitive_form,
                        f"the form asks for secrets ({'; '.join(secrets)}); elicitation.sensitive_form{withheld}",
                        "deny",
                    )
            console = self._consoles.available() if route == "console" else None
            if console is None:
                if entry is not None and entry.applies == "headless" and not withheld:
                    verdict = await self._auto_verdict(entry, params, mode)
                    if verdict.kind != "withheld":
                        return self._auto_answer(verdict, answer)
                    withheld = f"; {verdict.why}"
                if self._settings.non_interactive == "accept_defaults" and mode == "form":
                    # start-up: forms costs ~30 ms, only form requests need it
                    from mcp_sampling_proxy.approval.forms import prepare

                    await anyio.to_thread.run_sync(prepare)  # the defaults are checked: load that off the loop
                return self._non_interactive(params, mode, answer, route, withheld)
            origin = (session.server_label, request.audit.get("tool"))
            with waiting_for(f"waiting for your answer on the {console.name}"):
                if mode == "url":
                    result = await console.ask_url(params, origin, self._opener)
                else:
                    result = await console.ask_form(params, form, origin)
            self._recorded(
                request,
                params,
                result,
                decision="approved" if result["action"] == "accept" else "rejected",
                reason=f"answered on the {console.name}{withheld}",
                approver=console.name,
                action=result["action"],
            )
            return result

    async def _forward_to_host(self, request: Opened, params: ElicitRequestParams, mode: str) -> dict[str, Any]:
        """The host's own form (or URL), with the server's message marked as the server's."""
        session = request.incoming.session
        elicitation_id = params.get("elicitationId")  # (a string or None: the check passed)
        if mode == "url" and isinstance(elicitation_id, str) and elicitation_id:
            self._at_host.add(elicitation_id)
        with waiting_for("waiting for your answer in the host's form"):
            response = await request.incoming.host.forward_to_host(
                {**request.incoming.message, "params": dict(marked(params, session))}, as_received=False
            )
        result = response.get("result")
        self._recorded(
            request,
            params,
            result,
            decision="allow",
            reason="forwarded to the host",
            approver="host",
            action=result.get("action") if isinstance(result, dict) else None,
            error=None if isinstance(result, dict) or "error" in response else "the host's result is not an object",
        )
        if "error" in response:
            raise RpcError.from_error(response["error"])
        if not isinstance(result, dict):
            raise RpcError(
                jsonrpc.INTERNAL_ERROR, "the host answered elicitation/create with a result that is not an object"
            )
        return result

    def _answer(
        self,
        request: Opened,
        params: ElicitRequestParams,
        action: str,
        why: str,
        decision: Outcome,
        content: dict[str, Any] | None = None,
        /,
        **extra: Unpack[AuditFields],  # e.g. the limit that refused it
    ) -> dict[str, Any]:
        """The proxy's own answer (the policy's, a limit's, an auto-answer's), recorded."""
        reply = {"action": action, "content": content} if content is not None else {"action": action}
        fields: AuditFields = {"decision": decision, "reason": why, "action": action, **extra}
        self._recorded(request, params, reply, **fields)
        log.info("elicitation answered", action=action, why=why)
        return reply

    def _recorded(
        self, request: Opened, params: ElicitRequestParams, result: Any, **fields: Unpack[AuditFields]
    ) -> None:
        """The request's one record: how it ended, with the answer the server gets."""
        self._audit.record(params=params, result=result, **request.ended(**fields))

    async def _auto_verdict(
        self, entry: AutoAnswer, params: ElicitRequestParams, mode: str
    ) -> auto_answers.AutoVerdict:
        if entry.action == "accept" and mode == "form":
            # start-up: forms costs ~30 ms, only form requests need it
            from mcp_sampling_proxy.approval.forms import prepare

            await anyio.to_thread.run_sync(prepare)  # the content is checked: load that off the loop
        verdict = auto_answers.judge(entry, params, mode)
        if verdict.kind == "withheld":
            log.warning("auto-answer not used", auto_answer=entry.name, why=verdict.why)
        return verdict

    @staticmethod
    def _auto_answer(verdict: auto_answers.AutoVerdict, answer: Callable[..., dict[str, Any]]) -> dict[str, Any]:
        """Answer by an auto-answer entry, or refuse (decline, an `error` record) when its content does
        not fit the form: a policy mistake the operator must see, never an answer the form did not ask for."""
        name = verdict.entry.name
        if verdict.kind == "misfit" or verdict.result is None:
            log.warning("auto-answer refused: its content does not fit the form", auto_answer=name, why=verdict.why)
            return answer("decline", verdict.why, "error", None, rule=name)
        result = verdict.result
        return answer(result["action"], verdict.why, "auto_answered", result.get("content"), rule=name)

    def route_for(self, params: Mapping[str, Any], session: Session) -> str:
        """host | console | decline for this request."""
        return self._route(request_mode(params), params, session)

    def _route(self, mode: str, params: Mapping[str, Any], session: Session) -> str:
        route = self._settings.route
        if route == "decline":
            return "decline"
        host = session.host_capabilities.get("elicitation")
        host_modes = set(host) if isinstance(host, dict) and host else ({"form"} if isinstance(host, dict) else set())
        if route == "host" or (route == "auto" and mode in host_modes):
            return "host"
        if mode == "url" and not self._settings.url_mode:
            return "decline"
        return "console"

    def _non_interactive(
        self, params: ElicitRequestParams, mode: str, answer: Callable[..., dict[str, Any]], route: str, note: str = ""
    ) -> dict[str, Any]:
        action = self._settings.non_interactive
        why = (
            "nobody can be asked (no terminal or companion console)"
            if route == "console"
            else f"elicitation route is {self._settings.route}"
            if route == "decline"
            else "URL mode is not enabled"
        ) + note
        if action == "accept_defaults" and mode == "form":
            # start-up: forms costs ~30 ms, only form requests need it
            from mcp_sampling_proxy.approval.forms import apply_defaults, parse_form

            content = apply_defaults(parse_form(params.get("requestedSchema") or {}))
            if content is not None:
                return answer("accept", f"{why}; accepted the defaults", "allow", content)
            action = "decline"
        return answer("cancel" if action == "cancel" else "decline", why, "deny")


def validate_elicitation(params: Any) -> ElicitRequestParams:
    """The params of a valid `elicitation/create` (form or URL mode); RpcError(-32602) otherwise."""
    url = isinstance(params, dict) and request_mode(params) == "url"
    checked = dict(check_params(wire_checks.ELICIT_URL if url else wire_checks.ELICIT_FORM, params, METHOD))
    # the one place the server's JSON becomes typed elicitation params: ELICIT_URL or ELICIT_FORM accepted it
    return cast(ElicitRequestParams, checked)

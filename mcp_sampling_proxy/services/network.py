"""Where a sandboxed server may connect: its `network:` grant, a human's answer, and an audit record each.

The relay (transport/egress.py) asks `NetworkGate.judge` before every connection the server opens. A
server granted the network without a list (`network: true`, the default) reaches any public host; one
with a list reaches those hosts, and for any other the gate asks a human on the approval channels (once,
for this session, or always: remembered per server and host like a tool approval), or refuses when
nobody can be asked. Every decision is an audit record (`method: network/connect`, `tool: HOST:PORT`);
a refusal is also a warning on stderr that names the grant that would allow it, so a server that
stops because of one leaves its user the fix.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

import anyio

from mcp_sampling_proxy.approval.approver import Approver
from mcp_sampling_proxy.approval.channels import ApprovalRequest
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import request_fields
from mcp_sampling_proxy.config.sandbox_settings import SandboxSettings
from mcp_sampling_proxy.log import Throttle, get_logger
from mcp_sampling_proxy.notation.vocabulary import NETWORK_APPROVAL, Outcome
from mcp_sampling_proxy.protocol.jsonrpc import RpcError
from mcp_sampling_proxy.text.sanitize import one_line
from mcp_sampling_proxy.transport.egress import Connect, Verdict
from mcp_sampling_proxy.transport.sandbox_notes import SandboxNotes

if TYPE_CHECKING:
    from mcp_sampling_proxy.relay.ports import HostLine
    from mcp_sampling_proxy.relay.session import Session

log = get_logger("mcp_sampling_proxy.network")

METHOD = "network/connect"  # how audit records name a connection decision
RULE = "network"  # the rule a grant's decision names in the audit (the grant is in `sandbox:`)


class NetworkGate:
    """The decisions on one sandboxed server's connections."""

    def __init__(
        self,
        settings: SandboxSettings,
        approver: Approver | None,
        audit: AuditLog,
        session: Session,
        notes: SandboxNotes | None = None,
    ):
        self._settings = settings
        self._notes = notes
        self._approver = approver
        self._audit = audit
        self._session = session
        self.relay: HostLine | None = None  # set once the relay exists: the host's elicitation is a channel
        self._asking = anyio.Lock()  # one question about this server's network at a time
        self._warned = Throttle(5, 60.0)

    @property
    def where(self) -> str:
        return f"{self._settings.place(self._session.server_name)}.network"

    async def judge(self, wanted: Connect) -> Verdict:
        network = self._settings.network
        target = _target(wanted)
        if not network.hosts:
            self._record(target, "allow", "public hosts are granted (network: true)")
            return Verdict(True)
        granted = next((grant for grant in network.hosts if grant.names(wanted.host, wanted.port)), None)
        if granted is not None:
            self._record(target, "allow", f"{granted} is in {self.where}")
            return Verdict(True, internal=_may_be_internal(granted.pattern))
        return await self._ask(wanted, target)

    async def _ask(self, wanted: Connect, target: str) -> Verdict:
        listed = ", ".join(map(str, self._settings.network.hosts))
        refusal = (
            f"{target} is not in this server's network grant ({self.where}: [{listed}]): add it there to allow it, "
            "or approve it when asked (run `mcp-sampling-proxy console`)"
        )
        if self._approver is None or self.relay is None:
            self._record(target, "deny", refusal)
            return Verdict(False, refusal)
        session = self._session
        request = ApprovalRequest(
            session.server_name,
            session.host_name,
            NETWORK_APPROVAL + target,  # remembered per server and host, never mixed with sampling's or tools'
            RULE,
            {"name": NETWORK_APPROVAL + target, "arguments": {"host": wanted.host, "port": wanted.port}},
            f"Server {session.server_label} wants to connect to {one_line(target, 300)}, which its network grant "
            f"({self.where}) does not list.",
        )
        try:
            async with self._asking:  # a server opening many connections asks once at a time, not in a flood
                approval = await self._approver.ask(request, self.relay)
        except RpcError as exc:
            self._record(target, "rejected", f"{refusal} ({exc.message})")
            return Verdict(False, refusal)
        if approval.approved:
            self._record(target, "approved", approval.reason, approver=approval.who)
            return Verdict(True, internal=_may_be_internal(wanted.host))  # as the human saw it
        outcome: Outcome = "timeout" if approval.outcome == "timeout" else "rejected"
        self._record(target, outcome, approval.reason, approver=approval.who)
        if approval.outcome == "unavailable":  # nobody to ask: the grant is the way
            return Verdict(False, f"{refusal}; nobody could be asked now")
        return Verdict(False, f"{target}: {approval.reason}; to allow it without asking: {self.where}: [{target}]")

    def refused(self, wanted: Connect, why: str) -> None:
        """A connection the relay refused: on stderr (at most a few a minute), with the grant that allows it."""
        target = _target(wanted)
        fix = f"{self.where}: [{target}] (or network: host, the user's own network, unfiltered)"
        if self._notes is not None:
            self._notes.refused("connect", target, fix)
            return
        held = self._warned.admit()
        if held is not None:
            log.warning("the server's connection was refused", target=target, why=why, fix=fix, unlogged=held or None)

    def _record(self, target: str, decision: Outcome, reason: str, *, approver: str | None = None) -> None:
        fields = request_fields(self._session, {"method": METHOD}, target, ())
        fields["decision"], fields["rule"], fields["reason"], fields["approver"] = decision, RULE, reason, approver
        try:
            self._audit.record(**fields)
        except Exception as exc:  # the connection's fate is decided; a record that cannot be written is logged
            log.error("cannot write the audit record of a network decision", error=str(exc))


def _target(wanted: Connect) -> str:
    host = f"[{wanted.host}]" if ":" in wanted.host else wanted.host
    return f"{host}:{wanted.port}"


def _may_be_internal(host: str) -> bool:
    """Whether a grant (or an approval) of `host` reaches this machine's loopback and link-local addresses:
    only when it names them itself (an address, a network, `localhost`). A host name granted for what it
    is (`api.example.com`) that resolves to 127.0.0.1 is DNS rebinding, and stays refused."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        ipaddress.ip_network(host.strip("[]"), strict=False)
    except ValueError:
        return False
    return True

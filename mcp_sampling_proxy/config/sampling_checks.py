"""The sampling checks of the `sampling:` section: unsolicited requests, the per-call cap, secrets.

Checks of what a server does with sampling, whatever rule matches: a request while no host request
is in flight (the spec says servers MUST NOT send one), a loop of requests inside one host call,
and credentials in what the LLM answers (and, when asked, in what the server sends). Their grammar
lives here; `config/settings.py` hands it the `sampling:` keys it names (`SAMPLING_CHECK_KEYS`).
"""

from __future__ import annotations

import fnmatch

from msgspec import Struct

from mcp_sampling_proxy.notation.yamlnodes import Node, shown_value
from mcp_sampling_proxy.text.identity import bad_character, normalise

SAMPLING_CHECK_KEYS = ("allow_unsolicited", "max_per_call", "on_secret", "scan_requests")
ON_SECRET = ("redact", "deny", "allow")
DEFAULT_MAX_PER_CALL = 25


class SamplingChecks(Struct, frozen=True):
    """`sampling.allow_unsolicited`, `max_per_call`, `on_secret` and `scan_requests`."""

    # True: every server may sample with no host request in flight; a tuple: the servers (globs over
    # the operator's names for them, never the names they report) that may; False: none may
    allow_unsolicited: bool | tuple[str, ...] = False
    max_per_call: int = DEFAULT_MAX_PER_CALL  # sampling requests one host request may carry
    on_secret: str = "redact"  # redact | deny | allow: a credential in the LLM's answer
    scan_requests: bool = False  # also scan what the server sends, before any LLM sees it

    def unsolicited_allowed(self, server: str) -> bool:
        """True when `server` (the operator's name) may sample with no host request in flight."""
        if isinstance(self.allow_unsolicited, bool):
            return self.allow_unsolicited
        folded = normalise(server)
        return any(fnmatch.fnmatchcase(folded, normalise(glob)) for glob in self.allow_unsolicited)


def parse_sampling_checks(fields: dict[str, Node]) -> SamplingChecks:
    """The checks from the `sampling:` section's keys (the others are settings.py's)."""
    checks = SamplingChecks()
    allow = fields.get("allow_unsolicited")
    return SamplingChecks(
        allow_unsolicited=_unsolicited(allow) if allow is not None else checks.allow_unsolicited,
        max_per_call=fields["max_per_call"].int(minimum=1) if "max_per_call" in fields else checks.max_per_call,
        on_secret=fields["on_secret"].choice(ON_SECRET) if "on_secret" in fields else checks.on_secret,
        scan_requests=fields["scan_requests"].bool() if "scan_requests" in fields else checks.scan_requests,
    )


def _unsolicited(node: Node) -> bool | tuple[str, ...]:
    """true | false | a server glob or a list of them."""
    value = node.value()
    if isinstance(value, bool):
        return value
    items = node.sequence() if node.is_sequence() else [node]
    if not items:
        raise node.error(f"{node.label} needs true, false, or at least one server glob")
    globs = []
    for item in items:
        glob = item.value()
        if not isinstance(glob, str) or not glob:
            raise item.error(
                f"{item.label} must be true, false, or server globs (non-empty strings), got {shown_value(glob)}"
            )
        bad = bad_character(glob)
        if bad is not None:
            raise item.error(
                f"{item.label} holds a control or invisible character, {bad}: "
                "retype the server name with visible characters only"
            )
        globs.append(glob)
    return tuple(globs)

"""The policy's `checks:` section: external validators a rule can call (`check: [NAME, ...]`).

A check is a local command (JSON on stdin, a verdict on stdout) or an HTTP endpoint (the same JSON
POSTed). Everything that can be wrong with one is found here, at load time, with FILE:LINE:COL: an
`http://` URL is taken only on loopback (a verdict read in clear over a network could be forged,
and the prompt would travel in clear), a header's `${VAR}` must name a variable, a command must be
an argv list. Running them is services/sampling/checks.py's job.
"""

from __future__ import annotations

import re
from functools import partial
from urllib.parse import urlsplit

from msgspec import Struct, field
from msgspec.structs import replace

from mcp_sampling_proxy.notation.units import DURATION_FORMS
from mcp_sampling_proxy.notation.yamlnodes import Node, shown_value
from mcp_sampling_proxy.system.addresses import is_loopback

CHECK_STAGES = ("request", "answer", "both")
CHECK_ON_ERROR = ("deny", "allow")
CHECK_KEYS = ("command", "url", "stage", "timeout", "on_error", "headers")
DEFAULT_CHECK_TIMEOUT = 5.0  # seconds
_CHECK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CheckSpec(Struct, frozen=True):
    """One entry of `checks:`: exactly one of `command` and `url`."""

    name: str
    command: tuple[str, ...] | None = None
    url: str | None = None
    stage: str = "request"  # request | answer | both
    timeout: float = DEFAULT_CHECK_TIMEOUT  # seconds, the whole call (start, write, read, answer)
    on_error: str = "deny"  # what a timeout, crash, garbage verdict or unreachable validator means
    headers: dict[str, str] = field(default_factory=dict)  # url only; values may hold ${VAR}

    def runs_at(self, stage: str) -> bool:
        """True when this check runs at `stage` ("request" or "answer")."""
        return self.stage in (stage, "both")

    def variables(self) -> set[str]:
        """The environment variables its headers name (they hold tokens: kept from what the proxy starts)."""
        return {name for value in self.headers.values() for name in VARIABLE.findall(value)}

    def describe(self) -> str:
        """One line for `policy explain`."""
        target = f"command {' '.join(self.command)}" if self.command else f"POST {self.url}"
        return f"{self.name}: {target} (stage: {self.stage}, timeout: {self.timeout:g}s, on_error: {self.on_error})"


def parse_checks(node: Node) -> dict[str, CheckSpec]:
    """The `checks:` mapping, name -> spec; each entry is checked even after a bad one."""
    checks: dict[str, CheckSpec] = {}
    for name, entry in node.mapping().items():
        spec = entry.attempt(partial(_parse_check, name, entry), None)
        if spec is not None:
            checks[name] = spec
    return checks


def _parse_check(name: str, node: Node) -> CheckSpec:
    if not _CHECK_NAME.fullmatch(name):
        raise node.error(
            f"check name {name!r} must be letters, digits, '.', '_' or '-' (at most 64, starting with a letter "
            "or digit): rules and audit records name it"
        )
    given = node.mapping(CHECK_KEYS)
    if ("command" in given) == ("url" in given):
        raise node.error(
            f"{node.label} needs exactly one of command: [PROGRAM, ARG, ...] (a local validator) "
            "or url: https://HOST/PATH (an HTTP validator)"
        )
    spec = CheckSpec(name=name)
    if "command" in given:
        spec = replace(spec, command=_command(given["command"]))
        if "headers" in given:
            raise given["headers"].error(f"{given['headers'].label} applies to url: checks only")
    else:
        spec = replace(spec, url=_url(given["url"]))
    if "stage" in given:
        spec = replace(spec, stage=given["stage"].choice(CHECK_STAGES))
    if "timeout" in given:
        timeout = given["timeout"]
        seconds = timeout.duration()
        if seconds > 600:
            raise timeout.error(f"{timeout.label} must be at most 10m ({DURATION_FORMS}), got {timeout.value()!r}")
        spec = replace(spec, timeout=seconds)
    if "on_error" in given:
        spec = replace(spec, on_error=given["on_error"].choice(CHECK_ON_ERROR))
    if "headers" in given:
        spec = replace(spec, headers=_headers(given["headers"]))
    return spec


def _command(node: Node) -> tuple[str, ...]:
    if not node.is_sequence():
        raise node.error(
            f"{node.label} must be a list, the program and its arguments, e.g. command: "
            '["/usr/local/bin/pii-scan", "--json"] (no shell: nothing is split or expanded)'
        )
    items = node.sequence()
    if not items:
        raise node.error(f"{node.label} needs at least the program to run")
    for item in items[1:]:  # an argument may be empty; the program may not
        if not isinstance(item.value(), str):
            raise item.error(f"{item.label} must be a string (quote numbers), got {shown_value(item.value())}")
    return (items[0].str(), *(str(item.value()) for item in items[1:]))


def _url(node: Node) -> str:
    url = node.str()
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise node.error(f"{node.label} {url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("https", "http") or not host:
        raise node.error(f"{node.label} must be an https://HOST/PATH URL (http:// on loopback only), got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise node.error(
            f"{node.label} holds a user name or password: put a token in headers: "
            '{Authorization: "Bearer ${VARIABLE}"} instead, read from the proxy\'s environment'
        )
    if parts.scheme == "http" and not is_loopback(host):
        raise node.error(
            f"{node.label} {url!r} is http:// to {host}, which is not loopback: the request and the verdict "
            "would travel unencrypted; use https://, or http:// to 127.0.0.1, ::1 or localhost"
        )
    return url


def _headers(node: Node) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in node.mapping().items():
        if not _HEADER_NAME.fullmatch(name):
            raise value.error(f"{value.label}: {name!r} is not a valid HTTP header name")
        text = value.str()
        if any(ch in text for ch in "\r\n\0"):
            raise value.error(f"{value.label} must be one line")
        leftover = VARIABLE.sub("", text)
        if "${" in leftover:
            raise value.error(
                f"{value.label} has a '${{' that is not a ${{VARIABLE}} reference (letters, digits and '_')"
            )
        headers[name] = text
    return headers

"""The grammar of `approval.webhook` and `approval.quorum`: where the signed approval requests go, where
the shared secret comes from, and how many different people must approve.

Checked at start like the rest of the policy: a plain-http URL that is not loopback is refused (the
request carries the exact prompt and the answer decides what runs), and the secret is named, never
written in the policy file.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from msgspec import Struct

from mcp_sampling_proxy.notation.yamlnodes import Node
from mcp_sampling_proxy.system.addresses import is_loopback

WEBHOOK_KEYS = ("url", "secret_env", "secret_file", "timeout")
DEFAULT_WEBHOOK_TIMEOUT = 120.0  # s: a person on the other end has to read and decide
MAX_QUORUM = 10


class WebhookSettings(Struct, frozen=True):
    """`approval.webhook`: the receiver's URL and the shared secret's source (exactly one of the two)."""

    url: str
    secret_env: str | None = None  # the variable holding the secret
    secret_file: str | None = None  # or a file holding it (its first line, stripped)
    timeout: float = DEFAULT_WEBHOOK_TIMEOUT  # s: one POST's wait for the receiver's answer

    @property
    def secret_source(self) -> str:
        """Where the secret is read from, for messages (never the secret)."""
        return f"secret_env {self.secret_env}" if self.secret_env else f"secret_file {self.secret_file}"


def parse_webhook(node: Node, where: str) -> WebhookSettings:
    """`where`: the policy file; a relative secret_file is relative to its directory."""
    given = node.mapping(WEBHOOK_KEYS)
    if "url" not in given:
        raise node.error(f"{node.label} needs url: https://HOST/PATH (the receiver of the signed approval requests)")
    url = given["url"].str()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise given["url"].error(f"{given['url'].label} must be an https:// URL, got {url!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise given["url"].error(
            f"{given['url'].label} is plain http to {parts.hostname}, which is not this machine: the request "
            "shows the prompt and the answer decides what runs, so use https:// (plain http only to "
            "127.0.0.1, ::1 or localhost)"
        )
    if parts.username or parts.password:
        raise given["url"].error(
            f"{given['url'].label} holds a user name or password: the requests are signed with the "
            "shared secret (secret_env or secret_file); remove it from the URL"
        )
    if ("secret_env" in given) == ("secret_file" in given):
        raise node.error(
            f"{node.label} needs exactly one of secret_env: VARIABLE (a variable holding the shared secret) "
            "or secret_file: PATH (a file holding it); the secret itself never goes in the policy file"
        )
    return WebhookSettings(
        url=url,
        secret_env=given["secret_env"].str() if "secret_env" in given else None,
        secret_file=_beside(given["secret_file"].str(), where) if "secret_file" in given else None,
        timeout=given["timeout"].duration() if "timeout" in given else DEFAULT_WEBHOOK_TIMEOUT,
    )


def parse_quorum(node: Node) -> int:
    quorum = node.int(minimum=1)
    if quorum > MAX_QUORUM:
        raise node.error(f"{node.label} must be at most {MAX_QUORUM} different approvers, got {quorum}")
    return quorum


# the channels whose answers can come from several people (named web-console users, webhook approvers)
MANY_APPROVER_CHANNELS = ("console", "webhook")


def check_quorum(node: Node, quorum: int, channels: tuple[str, ...]) -> None:
    """A quorum the listed channels can never meet is a mistake to name now, not a deny at every request."""
    if quorum > len(channels) and not set(MANY_APPROVER_CHANNELS) & set(channels):
        raise node.error(
            f"{node.label} is {quorum}, but the channels {', '.join(channels)} can bring at most {len(channels)} "
            "different approvers: add console (each web-console user by name) or a webhook, or lower the quorum"
        )


def _beside(path: str, where: str) -> str:
    """A path as the policy gives it, relative to the policy file (hosts start proxies anywhere)."""
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(os.path.dirname(os.path.abspath(where)), path)
    return os.path.normpath(path)

"""The client credentials `serve` introspects tokens with (`--oauth-client-file`), read from a private file.

RFC 7662 introspection is a call to the authorization server as a registered client, so the proxy
needs a client id and secret. They come from a file readable by its owner only (the token file's
rule), never from the command line, where every user of the machine can read them in `ps`.

    # the resource server's client at the authorization server
    client_id = mcp-proxy
    client_secret = s3cr3t...

`KEY = VALUE` or `KEY: VALUE`, one a line; blank lines and `#` comments are skipped.
"""

from __future__ import annotations

import dataclasses

from mcp_sampling_proxy.front.tokens import TokenError, read_private

OPTION = "--oauth-client-file"
KEYS = ("client_id", "client_secret")


class OAuthSetupError(Exception):
    """The authorization server cannot be used as configured; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class ClientCredentials:
    client_id: str
    client_secret: str = dataclasses.field(repr=False)


def load_client_file(path: str) -> ClientCredentials:
    """The credentials of `path`; TokenError says what is wrong with the file and how to fix it."""
    text = read_private(path, OPTION)
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:cut].strip(), line[cut + 1 :].strip()) if cut >= 0 else (line, "")
        if key not in KEYS or not value:
            raise TokenError(f"{OPTION} {path}:{number}: expected `client_id = ID` or `client_secret = SECRET`")
        if not value.isprintable():
            raise TokenError(f"{OPTION} {path}:{number}: the {key} holds control characters")
        found[key] = value
    missing = [key for key in KEYS if key not in found]
    if missing:
        raise TokenError(
            f"{OPTION} {path}: no {' and no '.join(missing)} in it (`client_id = ID`, `client_secret = SECRET`)"
        )
    return ClientCredentials(found["client_id"], found["client_secret"])

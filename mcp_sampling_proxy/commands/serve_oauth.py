"""`serve`'s OAuth options: the endpoint as a protected resource of an external authorization server.

Everything is checked before `serve` listens, as the rest of its options are: the issuer's metadata
is fetched (its `issuer` must match), the way tokens are checked is settled (introspection when a
client file is given, else the server's JWT signing keys), and static tokens are refused beside
OAuth: one way in, one kind of caller name in the audit and the rules.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from mcp_sampling_proxy.front.endpoint import ENDPOINT
from mcp_sampling_proxy.front.oauth_settings import OAuthSetupError, load_client_file
from mcp_sampling_proxy.front.tokens import TOKEN_ENV, TokenError
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.system.addresses import is_loopback

if TYPE_CHECKING:
    from mcp_sampling_proxy.front.resource_oauth import ResourceGuard

log = get_logger("mcp_sampling_proxy.commands.serve")

_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 section 3.3 scope-token
HELP = (  # shown as written (serve's help keeps its layout)
    "instead of --token-file: callers bring access tokens of the authorization server\n"
    "--oauth-issuer, issued for this endpoint (--oauth-resource). The audit's and the rules'\n"
    "`client` is `oauth:SUBJECT` (`oauth-client:CLIENT_ID` for a token without a subject).\n"
    "Tokens are checked by introspection when --oauth-client-file is given, else as JWTs\n"
    "against the keys of the server's jwks_uri."
)


def add_oauth_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("OAuth 2.1 protected resource", HELP)
    group.add_argument("--oauth-issuer", metavar="URL", help="the authorization server whose tokens are accepted")
    group.add_argument(
        "--oauth-resource",
        metavar="URL",
        help="this endpoint's URL as clients reach it: tokens must be issued for it "
        f"(default: http://HOST:PORT{ENDPOINT} of --listen)",
    )
    group.add_argument(
        "--oauth-introspection", metavar="URL", help="the RFC 7662 endpoint (default: from the issuer's metadata)"
    )
    group.add_argument(
        "--oauth-client-file",
        metavar="PATH",
        help="client_id and client_secret to introspect with: lines `client_id = ID`, `client_secret = SECRET` "
        "(mode 0600)",
    )
    group.add_argument(
        "--oauth-scope", action="append", default=[], metavar="SCOPE", help="a scope every token must have (repeatable)"
    )


def oauth_guard(
    args: argparse.Namespace, host: str, port: int, name: str, environ: Mapping[str, str]
) -> ResourceGuard | None:
    """The guard the options describe, or None without --oauth-issuer; OAuthSetupError says what is wrong."""
    issuer: str | None = args.oauth_issuer
    if issuer is None:
        extra = [
            flag
            for flag, value in (
                ("--oauth-resource", args.oauth_resource),
                ("--oauth-introspection", args.oauth_introspection),
                ("--oauth-client-file", args.oauth_client_file),
                ("--oauth-scope", args.oauth_scope),
            )
            if value
        ]
        if extra:
            raise OAuthSetupError(f"{', '.join(extra)}: give --oauth-issuer URL too (the authorization server)")
        return None
    if args.token_file is not None or environ.get(TOKEN_ENV, "").strip():
        raise OAuthSetupError(
            f"--oauth-issuer cannot be combined with --token-file or {TOKEN_ENV}: choose one way in "
            "(a program can get its own OAuth token with the client credentials grant)"
        )
    # the `mcp` SDK's OAuth parts, only when they are used: a `serve` without them starts without the SDK
    import httpx
    from mcp.server.auth.routes import validate_issuer_url
    from pydantic import AnyHttpUrl

    from mcp_sampling_proxy.front.resource_oauth import (
        TIMEOUT,
        IntrospectionVerifier,
        JwtVerifier,
        ResourceGuard,
        ResourceSettings,
        Verifier,
        discover,
    )

    try:
        validate_issuer_url(AnyHttpUrl(issuer))
    except ValueError as exc:
        raise OAuthSetupError(f"--oauth-issuer {issuer}: {exc} (http is allowed on loopback only)") from None
    resource = _resource(args.oauth_resource, host, port)
    for scope in args.oauth_scope:
        if not _SCOPE.fullmatch(scope):
            raise OAuthSetupError(f"--oauth-scope {scope!r}: a scope is one word of printable ASCII, without quotes")
    with httpx.Client(timeout=TIMEOUT) as http:
        server = discover(issuer, http)
    verifier: Verifier
    if args.oauth_client_file is not None:
        try:
            credentials = load_client_file(args.oauth_client_file)
        except TokenError as exc:
            raise OAuthSetupError(str(exc)) from None
        endpoint = args.oauth_introspection or server.introspection_endpoint
        if endpoint is None:
            raise OAuthSetupError(
                f"--oauth-issuer {issuer}: its metadata names no introspection_endpoint; give --oauth-introspection URL"
            )
        methods = server.introspection_auth_methods
        basic = not methods or "client_secret_basic" in methods or "client_secret_post" not in methods
        verifier = IntrospectionVerifier(endpoint, credentials, server.issuer, resource, basic=basic)
    elif args.oauth_introspection is not None:
        raise OAuthSetupError("--oauth-introspection: give --oauth-client-file PATH too (who the proxy introspects as)")
    elif server.jwks_uri is not None:
        verifier = JwtVerifier(server.jwks_uri, server.issuer, resource)
    else:
        raise OAuthSetupError(
            f"--oauth-issuer {issuer}: its metadata names no jwks_uri to check JWT access tokens with; "
            "give --oauth-client-file PATH to check tokens by introspection"
        )
    if urlsplit(resource).scheme == "http" and not is_loopback(urlsplit(resource).hostname or ""):
        log.warning(
            "the OAuth resource is plain http beyond this machine: tokens cross the network readable; "
            "put a TLS proxy in front and give its https URL as --oauth-resource",
            resource=resource,
        )
    settings = ResourceSettings(server.issuer, resource, tuple(args.oauth_scope), name)
    checked = "introspection" if args.oauth_client_file else "jwt"
    log.info("OAuth protected resource", issuer=server.issuer, resource=resource, tokens_checked_by=checked)
    return ResourceGuard(settings, verifier, ENDPOINT)


def _resource(given: str | None, host: str, port: int) -> str:
    if given is None:
        if host in ("0.0.0.0", "::", ""):
            raise OAuthSetupError(
                f"--listen on {host or 'every address'}: give --oauth-resource URL, the URL clients reach this "
                f"endpoint at (e.g. https://mcp.example.com{ENDPOINT}): tokens are issued for it"
            )
        return f"http://{f'[{host}]' if ':' in host else host}:{port}{ENDPOINT}"
    parts = urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment or parts.query:
        raise OAuthSetupError(
            f"--oauth-resource {given}: give an absolute http(s) URL without a query or fragment (RFC 8707), "
            f"e.g. https://mcp.example.com{ENDPOINT}"
        )
    return given

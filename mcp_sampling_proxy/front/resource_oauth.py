"""`serve` as an OAuth 2.1 protected resource (the MCP authorization spec) of an external authorization server.

Built from the `mcp` SDK's resource-server pieces: its `ProtectedResourceMetadata` document and handler
publish the RFC 9728 metadata (at `/.well-known/oauth-protected-resource` and its path-suffixed form),
`BearerAuthBackend` checks a token with a `TokenVerifier` and refuses one whose audience is not this
resource (RFC 8707), and `RequireAuthMiddleware` answers 401 with `WWW-Authenticate: Bearer
resource_metadata="..."` (the MCP client's discovery starts there) or 403 `insufficient_scope`.
What is ours: the two verifiers and the caller's name.

- `IntrospectionVerifier`: RFC 7662 introspection at the authorization server, as a client with a
  secret; every request asks, so a token revoked at the server stops working at once.
- `JwtVerifier`: RFC 9068 JWT access tokens checked against the server's published keys (`jwks_uri`),
  with PyJWT (which the `mcp` SDK itself depends on): no call per request, but a revoked token is
  taken until it expires.

A caller is named by the token's subject, `oauth:SUB`, or by its client when it has none (a client
credentials grant), `oauth-client:CLIENT_ID`: the two never collide, and a policy's `client:` rule
tells a person from a program. When the authorization server cannot be reached the caller gets 503,
not 401: a 401 would send its client to log in again for nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import anyio
import httpx
import jwt
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from msgspec import Struct, field
from pydantic import AnyHttpUrl
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send

from mcp_sampling_proxy.front.oauth_settings import ClientCredentials, OAuthSetupError

WELL_KNOWN = "/.well-known/oauth-protected-resource"
SUBJECT_PREFIX = "oauth:"
CLIENT_PREFIX = "oauth-client:"
TIMEOUT = 10.0  # s for one call to the authorization server
# signatures by a key pair only: never "none", never a shared secret (HS256) a resource server would hold too
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
JWT_TYPES = ("at+jwt", "application/at+jwt", "jwt")  # RFC 9068's, and the plain one many servers still write


class AuthServerUnavailable(Exception):
    """The authorization server could not answer a token check (not the token's fault)."""


class AuthServer(Struct, frozen=True):
    """What a resource server needs of the authorization server's metadata (RFC 8414)."""

    issuer: str
    introspection_endpoint: str | None = None
    introspection_auth_methods: tuple[str, ...] = ()
    jwks_uri: str | None = None


def metadata_urls(issuer: str) -> list[str]:
    """Where RFC 8414 (and OpenID Connect Discovery, which many servers only offer) put the document."""
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    urls = [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
    ]
    if path:
        urls.append(f"{origin}{path}/.well-known/openid-configuration")
    return urls


def discover(issuer: str, http: httpx.Client) -> AuthServer:
    """The authorization server's metadata, whose `issuer` must be the one configured (RFC 8414 section 3.3)."""
    tried: list[str] = []
    for url in metadata_urls(issuer):
        try:
            response = http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise OAuthSetupError(f"--oauth-issuer {issuer}: cannot reach its metadata at {url} ({exc})") from None
        if response.status_code != 200:
            tried.append(f"{url}: HTTP {response.status_code}")
            continue
        try:
            document = response.json()
        except ValueError:
            tried.append(f"{url}: not JSON")
            continue
        if not isinstance(document, dict):
            tried.append(f"{url}: not a JSON object")
            continue
        if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
            raise OAuthSetupError(
                f"--oauth-issuer {issuer}: its metadata ({url}) names issuer {document.get('issuer')!r}; "
                "give --oauth-issuer exactly as the server names itself"
            )
        methods = document.get("introspection_endpoint_auth_methods_supported")
        return AuthServer(
            issuer=str(document["issuer"]),  # as the server spells it: tokens' `iss` is compared to it exactly
            introspection_endpoint=_text(document.get("introspection_endpoint")),
            introspection_auth_methods=tuple(m for m in methods if isinstance(m, str))
            if isinstance(methods, list)
            else (),
            jwks_uri=_text(document.get("jwks_uri")),
        )
    raise OAuthSetupError(
        f"--oauth-issuer {issuer}: no authorization server metadata found ({'; '.join(tried)}); "
        "is it the issuer URL of an OAuth authorization server?"
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def same_resource(a: str, b: str) -> bool:
    """URLs equal but for the case of scheme and host and a trailing slash (as the SDK's backend compares)."""
    try:
        return str(AnyHttpUrl(a)).rstrip("/") == str(AnyHttpUrl(b)).rstrip("/")
    except ValueError:
        return False


def _audience(aud: object, resource: str) -> str | None:
    """The entry of a token's `aud` naming this resource, else its first (the backend refuses it then)."""
    entries = [aud] if isinstance(aud, str) else [a for a in aud if isinstance(a, str)] if isinstance(aud, list) else []
    for entry in entries:
        if same_resource(entry, resource):
            return resource
    return entries[0] if entries else None


def _scopes(claims: dict[str, Any]) -> list[str]:
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return value.split()
    return [s for s in value if isinstance(s, str)] if isinstance(value, list) else []


def _token(token: str, claims: dict[str, Any], resource: str) -> AccessToken | None:
    """The SDK's AccessToken from introspection or JWT claims. None for a token that names nobody (or by
    unprintable names), and for a sender-constrained one (`cnf`: DPoP, mTLS): taking it as a plain bearer
    token without the proof it is bound to would undo what binding it was for."""
    if "cnf" in claims:
        return None
    subject = claims.get("sub")
    client_id = claims.get("client_id", claims.get("azp", ""))
    if not isinstance(client_id, str) or not client_id.isprintable():
        return None
    if subject is not None and (not isinstance(subject, str) or not subject or not subject.isprintable()):
        return None
    if not subject and not client_id:
        return None
    exp = claims.get("exp")
    return AccessToken(
        token=token,
        client_id=client_id,
        scopes=_scopes(claims),
        expires_at=int(exp) if isinstance(exp, int | float) else None,
        resource=_audience(claims.get("aud"), resource),
        subject=subject,
        claims={"iss": claims["iss"]} if isinstance(claims.get("iss"), str) else None,
    )


class IntrospectionVerifier(Struct):
    """RFC 7662: the authorization server says whether a token is active, for whom and for what."""

    endpoint: str
    credentials: ClientCredentials
    issuer: str
    resource: str
    basic: bool = True  # client_secret_basic, else client_secret_post (when that is all the server takes)
    http: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=TIMEOUT))

    async def verify_token(self, token: str) -> AccessToken | None:
        form = {"token": token, "token_type_hint": "access_token"}
        headers = {"Accept": "application/json"}
        if self.basic:  # RFC 6749 section 2.3.1: each part form-encoded before Basic
            pair = f"{quote(self.credentials.client_id, safe='')}:{quote(self.credentials.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form |= {"client_id": self.credentials.client_id, "client_secret": self.credentials.client_secret}
        try:
            response = await self.http.post(self.endpoint, data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise AuthServerUnavailable(f"introspection at {self.endpoint} failed: {exc}") from None
        if response.status_code != 200:
            hint = " (check --oauth-client-file)" if response.status_code in (400, 401, 403) else ""
            raise AuthServerUnavailable(f"introspection at {self.endpoint} answered HTTP {response.status_code}{hint}")
        try:
            claims = response.json()
        except ValueError:
            raise AuthServerUnavailable(f"introspection at {self.endpoint} answered with no JSON") from None
        if not isinstance(claims, dict) or claims.get("active") is not True:
            return None
        if "refresh" in str(claims.get("token_type") or claims.get("typ") or "").lower():
            return None  # a refresh token is active too at some servers (Keycloak: "typ": "Refresh")
        issuer = claims.get("iss")
        if issuer is not None and str(issuer).rstrip("/") != self.issuer.rstrip("/"):
            return None
        return _token(token, claims, self.resource)

    async def aclose(self) -> None:
        await self.http.aclose()


class JwtVerifier:
    """RFC 9068: a JWT access token signed by one of the authorization server's keys, for this resource."""

    def __init__(self, jwks_uri: str, issuer: str, resource: str):
        self.issuer, self.resource = issuer, resource
        self._keys = jwt.PyJWKClient(jwks_uri, cache_keys=True, lifespan=300, timeout=TIMEOUT)
        # the spellings a token's `aud` and `iss` may carry (PyJWT compares strings): a trailing slash aside,
        # and for the issuer only at the root (`https://auth.example.com` and `.../` name one server)
        self._audiences = sorted({resource, resource.rstrip("/"), resource.rstrip("/") + "/"})
        root = urlsplit(issuer).path in ("", "/")
        self._issuers = sorted({issuer, issuer.rstrip("/"), issuer.rstrip("/") + "/"} if root else {issuer})

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            return None  # not a JWT at all
        if str(header.get("typ", "jwt")).lower() not in JWT_TYPES or header.get("alg") not in ALGORITHMS:
            return None  # an ID token or a symmetric signature is no access token of ours
        try:  # PyJWKClient fetches with urllib (blocking): the event loop must not wait on it
            key = await anyio.to_thread.run_sync(self._keys.get_signing_key_from_jwt, token)
        except jwt.PyJWKClientConnectionError as exc:
            raise AuthServerUnavailable(f"cannot fetch the signing keys: {exc}") from None
        except jwt.PyJWKClientError:
            return None  # no key of the server's signed it
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self._audiences,
                issuer=self._issuers,
                options={"require": ["exp", "iss", "aud"]},
                leeway=30,
            )
        except jwt.InvalidTokenError:
            return None
        return _token(token, claims, self.resource)

    async def aclose(self) -> None:
        return None


def caller_name(token: AccessToken) -> str:
    """Who the audit and the `client:` rules see: the subject, else the client."""
    return f"{SUBJECT_PREFIX}{token.subject}" if token.subject else f"{CLIENT_PREFIX}{token.client_id}"


class Verifier(TokenVerifier, Protocol):
    """A TokenVerifier holding a connection to close when `serve` stops."""

    async def aclose(self) -> None: ...


class ResourceSettings(Struct, frozen=True):
    issuer: str
    resource: str  # this endpoint's canonical URL: what tokens must be issued for
    scopes: tuple[str, ...] = ()  # every one required of every token
    name: str | None = None  # resource_name in the metadata


class ResourceGuard:
    """The metadata routes and the bearer check of one protected resource."""

    def __init__(self, settings: ResourceSettings, verifier: Verifier, endpoint_path: str):
        self.settings = settings
        self.verifier = verifier
        resource = AnyHttpUrl(settings.resource)
        self.metadata_url = build_resource_metadata_url(resource)
        # what create_protected_resource_routes builds, but from the strings: its AnyHttpUrl arguments would
        # add a slash to a root issuer (https://auth.example.com/), and a client comparing issuers as
        # strings (RFC 8414 section 3.3) would then refuse the server's own metadata
        document = ProtectedResourceMetadata.model_validate(
            {
                "resource": settings.resource,
                "authorization_servers": [settings.issuer],
                "scopes_supported": list(settings.scopes) or None,
                "resource_name": settings.name,
            }
        )
        handler = cors_middleware(ProtectedResourceMetadataHandler(document).handle, ["GET", "OPTIONS"])
        suffixed = urlsplit(str(self.metadata_url)).path
        self.paths = sorted({suffixed, WELL_KNOWN, WELL_KNOWN + endpoint_path})
        self._metadata = Router([Route(path, handler, methods=["GET", "OPTIONS"]) for path in self.paths])
        self._backend = BearerAuthBackend(verifier, resource_server_url=resource)

    def publishes(self, path: str) -> bool:
        return path.rstrip("/") in self.paths

    async def metadata(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope = {**scope, "path": scope["path"].rstrip("/") or "/"}
        await self._metadata(scope, receive, send)

    async def admit(self, scope: Scope, receive: Receive, send: Send, on_refusal: Callable[[str], None]) -> str | None:
        """The caller's name; or None once the refusal (401, 403, 503) has been sent."""
        try:
            found = await self._backend.authenticate(HTTPConnection(scope))
        except AuthServerUnavailable as exc:  # logged through on_refusal: an outage must not flood the log
            on_refusal(f"cannot check a bearer token: {exc}")
            body = {
                "error": "temporarily_unavailable",
                "error_description": "the authorization server cannot check tokens now; try again later",
            }
            await JSONResponse(body, status_code=503, headers={"Retry-After": "5"})(scope, receive, send)
            return None
        if found is not None:
            scope["auth"], scope["user"] = found
        admitted: list[AuthenticatedUser] = []

        async def through(inner: Scope, _receive: Receive, _send: Send) -> None:
            admitted.append(inner["user"])

        challenge = RequireAuthMiddleware(through, list(self.settings.scopes), self.metadata_url)
        await challenge(scope, receive, _naming_scopes(send, self.settings.scopes))
        if not admitted:
            on_refusal("no valid token" if found is None else "a scope is missing")
            return None
        return caller_name(admitted[0].access_token)

    async def aclose(self) -> None:
        await self.verifier.aclose()


def _naming_scopes(send: Send, scopes: tuple[str, ...]) -> Send:
    """`send`, with the required scopes added to a 401's or 403's `WWW-Authenticate` (`scope="a b"`), as
    the 2025-11-25 authorization spec has servers say which scopes to ask for, or to step up to."""
    if not scopes:
        return send
    named = f', scope="{" ".join(scopes)}"'.encode()

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (key, value + named if key.lower() == b"www-authenticate" else value)
                for key, value in message.get("headers", [])
            ]
            message = {**message, "headers": headers}
        await send(message)

    return sending

"""OAuth for `--url` upstreams, on the `mcp` SDK's OAuthClientProvider.

Two uses of the SDK's flow (protected-resource and authorization-server metadata discovery, dynamic
client registration, PKCE, refresh):
- `login` (from a terminal) runs all of it: the browser step goes to the user's browser and comes
  back to a one-shot HTTP listener on 127.0.0.1; the result is stored (see oauth_store).
- the proxy (spawned headless by a host) only uses and refreshes the stored tokens. It never
  registers a client or opens a browser: when there is no usable login, the request that got the
  401 is remembered, so the upstream can answer the host with an error that says to run `login`.
Tokens are secrets: they go in the Authorization header and the store, nowhere else.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import extract_field_from_www_auth, extract_resource_metadata_from_www_auth
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import AnyUrl

from mcp_sampling_proxy.transport import oauth_store
from mcp_sampling_proxy.transport.oauth_store import StoreKind, login_command

CLIENT_NAME = "mcp-sampling-proxy"
PLACEHOLDER_REDIRECT = "http://127.0.0.1/callback"  # the headless proxy never redirects anywhere


# RFC 6749 section 3.3: scope tokens of %x21 / %x23-5B / %x5D-7E, separated by single spaces
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,200}(?: [\x21\x23-\x5b\x5d-\x7e]{1,200}){0,31}")


class RecordStorage:
    """The SDK's TokenStorage over one stored record; `persist` says whether to write changes back."""

    def __init__(self, url: str, record: dict[str, Any] | None, kind: StoreKind | None, persist: bool):
        self.url = url
        self.record: dict[str, Any] = dict(record or {})
        self.kind: StoreKind | None = kind
        self._persist = persist

    async def get_tokens(self) -> OAuthToken | None:
        tokens = self.record.get("tokens")
        return OAuthToken.model_validate(tokens) if tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.record["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        self.record["expires_at"] = time.time() + int(tokens.expires_in) if tokens.expires_in is not None else None
        self._write()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        info = self.record.get("client_info")
        return OAuthClientInformationFull.model_validate(info) if info else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.record["client_info"] = client_info.model_dump(mode="json", exclude_none=True)
        self._write()

    def _write(self) -> None:
        if self._persist and self.kind is not None:
            oauth_store.save(self.url, self.record, self.kind)


class HeadlessOAuth(OAuthClientProvider):
    """Uses and refreshes a stored login; on a 401 it cannot fix, it records why instead of starting a login."""

    def __init__(self, url: str, on_secret: Callable[[str], None] | None = None):
        super().__init__(
            server_url=url,
            client_metadata=_client_metadata(PLACEHOLDER_REDIRECT, None),
            storage=RecordStorage(url, None, None, persist=True),
        )
        self.url = url
        self.refusal: str | None = None  # why the last request was refused, in words for the host
        self.refused_ids: set[Any] = set()  # JSON-RPC ids of requests the server refused for lack of a login
        self._on_secret = on_secret

    async def _initialize(self) -> None:
        """Load (or reload) the stored record, with the expiry and metadata the SDK does not keep."""
        found = oauth_store.load(self.url)
        record, kind = found if found is not None else (None, None)
        self.context.storage = storage = RecordStorage(self.url, record, kind, persist=True)
        self.context.current_tokens = await storage.get_tokens()
        self.context.client_info = await storage.get_client_info()
        expires_at = storage.record.get("expires_at")
        self.context.token_expiry_time = float(expires_at) if expires_at is not None else None
        meta = storage.record.get("as_metadata")
        self.context.oauth_metadata = OAuthMetadata.model_validate(meta) if meta else None
        prm = storage.record.get("resource_metadata")
        self.context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(prm) if prm else None
        self._note_secrets()
        self._initialized = True

    def _note_secrets(self) -> None:
        tokens = self.context.current_tokens
        if self._on_secret is not None and tokens is not None:
            self._on_secret(tokens.access_token)
            if tokens.refresh_token:
                self._on_secret(tokens.refresh_token)

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self.context.lock:
            if not self._initialized:  # first use, or the server refused us: a `login` run since is picked up
                await self._initialize()
            self.context.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
            refreshed = False
            if self.context.current_tokens is not None and not self.context.is_token_valid():
                refreshed = True
                async with oauth_store.refresh_turn(self.url):  # one proxy at a time (rotating refresh tokens)
                    await self._initialize()  # another proxy may have refreshed while this one waited
                    if not self.context.is_token_valid() and self.context.can_refresh_token():
                        ok = await self._handle_refresh_response((yield await self._refresh_token()))
                        self._note_secrets()
                        if not ok:
                            await self._adopt_newer_login()
            if self.context.is_token_valid():
                self._add_auth_header(request)
            response = yield request
            # A token the server no longer takes (revoked, or its clock disagrees): one refresh, one retry,
            # in the same turn as the expiry path (rotating refresh tokens work once: two proxies refreshing
            # at the same moment would leave one with a spent token). Tokens without `expires_in` are
            # only ever refreshed here.
            if response.status_code == 401 and not refreshed and self.context.can_refresh_token():
                refused = self.context.current_tokens
                async with oauth_store.refresh_turn(self.url):
                    await self._initialize()  # another proxy may have refreshed while this one waited
                    stored = self.context.current_tokens
                    renewed = stored is not None and refused is not None and stored.access_token != refused.access_token
                    if not renewed and self.context.can_refresh_token():
                        renewed = await self._handle_refresh_response((yield await self._refresh_token()))
                if renewed:
                    self._note_secrets()
                    self._add_auth_header(request)
                    response = yield request
            had_login = bool(getattr(self.context.storage, "record", {}).get("tokens"))
            if _insufficient_scope(response) or (
                response.status_code == 401 and (had_login or oauth_challenge(response) is not None)
            ):  # a 401 of another kind is not ours
                self._refuse(request, response, had_login=had_login)
            else:
                self.refusal = None

    async def _adopt_newer_login(self) -> None:
        """Another proxy (or `login`) may have rotated the refresh token: use what is stored now."""
        old = getattr(self.context.storage, "record", {}).get("tokens")
        await self._initialize()
        if getattr(self.context.storage, "record", {}).get("tokens") == old:
            self.context.clear_tokens()

    def _refuse(self, request: httpx2.Request, response: httpx2.Response, *, had_login: bool) -> None:
        # Read the store again before the next request (not before every request: for a server that
        # needs no login that was file and keyring I/O on each message).
        self._initialized = False
        if _insufficient_scope(response):
            scope = extract_field_from_www_auth(response, "scope")  # the server's text: a hint only if well-formed
            if scope and _SCOPE.fullmatch(scope):
                why = (
                    f"{self.url} needs OAuth scope {scope!r}, which the stored login lacks: run "
                    f"`{login_command(self.url, scope=scope)}` in a terminal"
                )
            else:
                why = (
                    f"{self.url} needs an OAuth scope the stored login lacks: run "
                    f"`{login_command(self.url)} --scope SCOPE` in a terminal with the scope it needs"
                )
        elif had_login:
            why = (
                f"the OAuth login for {self.url} has expired and could not be refreshed: run "
                f"`{login_command(self.url)}` in a terminal, then restart this server in your host"
            )
        else:
            why = (
                f"{self.url} needs an OAuth login: run `{login_command(self.url)}` in a terminal, "
                "then restart this server in your host"
            )
        self.refusal = why
        try:
            body = json.loads(request.content or b"null")
        except ValueError:
            return
        if isinstance(body, dict) and "id" in body and "method" in body:
            self.refused_ids.add(body["id"])


def _insufficient_scope(response: httpx2.Response) -> bool:
    return response.status_code == 403 and extract_field_from_www_auth(response, "error") == "insufficient_scope"


def _client_metadata(redirect_uri: str, scope: str | None) -> OAuthClientMetadata:
    return OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[AnyUrl(redirect_uri)],
        scope=scope,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )


def oauth_challenge(response: httpx2.Response) -> str | None:
    """The protected-resource metadata URL (or "" when not given) when `response` asks for an OAuth
    bearer token; None when it does not."""
    if response.status_code != 401:
        return None
    header = response.headers.get("www-authenticate", "")
    if not header.lower().startswith("bearer") and "resource_metadata" not in header:
        return None
    return extract_resource_metadata_from_www_auth(response) or ""


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "mcp-sampling-proxy-login",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": CLIENT_NAME, "version": "login"},
    },
}
MCP_POST_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def probe(url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[str, str]:
    """Does the server at `url` want an OAuth login? One unauthenticated initialize. Returns
    ("oauth", resource-metadata URL or ""), ("open", "HTTP status") or ("unreachable", why)."""
    try:
        with httpx2.Client(timeout=timeout, follow_redirects=False) as client:
            response = client.post(url, json=INITIALIZE, headers={**MCP_POST_HEADERS, **(headers or {})})
            session = response.headers.get("mcp-session-id")
            if response.is_success and session:
                client.delete(url, headers={"mcp-session-id": session})
            challenge = oauth_challenge(response)
            if challenge is not None:
                return "oauth", challenge
            return "open", f"HTTP {response.status_code}"
    except (httpx2.HTTPError, OSError, ValueError) as exc:
        return "unreachable", str(exc) or type(exc).__name__


def describe_login(url: str, probe_timeout: float = 5.0) -> tuple[str, str]:
    """(state, sentence) for `wrap` and `doctor`: the stored login, else whether the server wants one.
    state: logged-in | refreshable | expired | needs-login | none-needed | unknown."""
    state, text = oauth_store.login_state(url)
    if state != "none":
        return state, text
    kind, detail = probe(url, timeout=probe_timeout)
    if kind == "oauth":
        return "needs-login", f"needs an OAuth login: run `{login_command(url)}` once in a terminal"
    if kind == "open":
        return "none-needed", "no OAuth login needed (the server answers without one)"
    return "unknown", f"not logged in (server unreachable, cannot tell whether it needs a login: {detail})"


class LoginFailed(Exception):
    """A login that did not end with tokens; the message says why and what to do."""


async def authorize(
    url: str,
    *,
    redirect_uri: str,
    open_url: Callable[[str], Awaitable[None]],
    wait_for_code: Callable[[], Awaitable[AuthorizationCodeResult]],
    client_id: str | None = None,
    client_secret: str | None = None,
    scope: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """The whole flow, driven by one unauthenticated initialize; returns (record to store, server name)."""
    storage = RecordStorage(url, None, None, persist=False)
    if client_id:
        await storage.set_client_info(
            OAuthClientInformationFull(
                client_id=client_id,
                client_secret=client_secret,
                redirect_uris=[AnyUrl(redirect_uri)],
                token_endpoint_auth_method="client_secret_post" if client_secret else "none",
                grant_types=["authorization_code", "refresh_token"],
                client_name=CLIENT_NAME,
            )
        )
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=_client_metadata(redirect_uri, scope),
        storage=storage,
        redirect_handler=open_url,
        callback_handler=wait_for_code,
    )
    provider.context.client_metadata.scope = scope
    try:
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30.0, read=600.0)) as client:
            response = await client.post(url, json=INITIALIZE, headers={**MCP_POST_HEADERS, **(headers or {})})
            server = _server_name(response)
            session = response.headers.get("mcp-session-id")
            if response.is_success and session:
                await client.delete(url, headers={"mcp-session-id": session})
    except httpx2.HTTPError as exc:
        raise LoginFailed(f"could not reach {url}: {exc}") from None
    except Exception as exc:  # the SDK's OAuth errors, and our own callback errors
        raise LoginFailed(str(exc) or type(exc).__name__) from None
    if not storage.record.get("tokens"):
        if response.is_success:
            raise LoginFailed(f"{url} answered without asking for a login: it needs none (nothing stored)")
        raise LoginFailed(f"{url} answered HTTP {response.status_code} and never asked for an OAuth login")
    if not response.is_success:
        raise LoginFailed(f"logged in, but {url} still answers HTTP {response.status_code} with the new token")
    ctx = provider.context
    record = dict(storage.record)
    if ctx.oauth_metadata is not None:
        record["as_metadata"] = ctx.oauth_metadata.model_dump(mode="json", exclude_none=True)
    if ctx.protected_resource_metadata is not None:
        record["resource_metadata"] = ctx.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
    return record, server


def _server_name(response: httpx2.Response) -> str:
    """serverInfo.name from an initialize answer (JSON or one SSE event), best effort."""
    try:
        text = response.text
        if "text/event-stream" in response.headers.get("content-type", ""):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        info = json.loads(text).get("result", {}).get("serverInfo", {})
        return str(info.get("name") or "")
    except (ValueError, StopIteration, AttributeError, httpx2.HTTPError):
        return ""

"""`serve --oauth-issuer`'s refusals and metadata, played in process: the endpoint its options build
(helpers/played_serve.py) in front of the fixture's authorization server in a thread of this process
(helpers/oauth_servers.py `AuthServerThread`), which it reaches over real HTTP for discovery,
introspection and its signing keys. Every answer here is decided before a session or server exists;
the logins that sample, beyond loopback and behind a TLS proxy are in tests/e2e/test_serve_oauth.py.
Tokens are checked two ways, both played: introspection (`--oauth-client-file`) and JWTs (the jwks_uri).
"""

from __future__ import annotations

import base64
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from helpers.oauth_servers import AuthServerThread
from helpers.played_serve import NO_SUCH_SESSION, ORIGIN, URL, played_serve
from helpers.support import PY, SMALL_SERVER, free_port, run_subcommand
from jwt.algorithms import RSAAlgorithm

pytestmark = pytest.mark.anyio

RS_CLIENT, RS_SECRET = "mcp-proxy-rs", "rs-secret-0123456789abcdef"
MODES = ["introspection", "jwt"]
DPOP_KEY = "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"  # RFC 9449's example key thumbprint


@pytest.fixture(scope="module")
def servers() -> Iterator[AuthServerThread]:
    found = AuthServerThread()
    try:
        found.register_confidential(RS_CLIENT, RS_SECRET)
        yield found
    finally:
        found.close()


def client_file(directory: Path, secret: str = RS_SECRET) -> str:
    path = directory / "rs-client"
    path.write_text(f"# introspection credentials\nclient_id = {RS_CLIENT}\nclient_secret: {secret}\n")
    path.chmod(0o600)
    return str(path)


def auth_options(servers: AuthServerThread, tmp_path: Path, mode: str) -> list[str]:
    options = ["--oauth-issuer", servers.issuer, "--oauth-scope", "mcp"]
    return [*options, "--oauth-client-file", client_file(tmp_path)] if mode == "introspection" else options


def assert_admitted(answer: httpx.Response) -> None:
    """The token was taken: the request went on to look for its (unknown) session."""
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["message"] == NO_SUCH_SESSION


def assert_invalid_token(answer: httpx.Response) -> None:
    """RFC 6750's 401 for a bad token, naming where to find how to get a good one."""
    assert answer.status_code == 401, answer.text
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    assert f'resource_metadata="{ORIGIN}/.well-known/oauth-protected-resource/mcp"' in challenge


async def test_without_a_token_the_401_names_the_resource_metadata(servers: AuthServerThread, tmp_path: Path) -> None:
    async with played_serve(*auth_options(servers, tmp_path, "introspection")) as served:
        refused = await served.initialize(None)
        assert served.front.sessions == {}  # nothing was started for it
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{ORIGIN}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert 'scope="mcp"' in challenge  # what to ask the authorization server for (2025-11-25)
    assert refused.json()["error"] == "invalid_token"


async def test_the_protected_resource_metadata_names_this_resource_its_server_and_scopes(
    servers: AuthServerThread, tmp_path: Path
) -> None:
    async with played_serve(*auth_options(servers, tmp_path, "introspection")) as served:
        suffixed = await served.http.get("/.well-known/oauth-protected-resource/mcp")
        root = await served.http.get("/.well-known/oauth-protected-resource")
        other = await served.http.get("/.well-known/oauth-protected-resource/elsewhere")
    assert suffixed.status_code == root.status_code == 200
    document = suffixed.json()
    assert document == root.json()
    assert document["resource"] == URL
    issuer = httpx.get(f"{servers.issuer}/.well-known/oauth-authorization-server").json()["issuer"]
    assert document["authorization_servers"] == [issuer]  # spelled as the server spells itself (RFC 8414 3.3)
    assert document["scopes_supported"] == ["mcp"]
    assert document["bearer_methods_supported"] == ["header"]
    assert other.status_code == 404


@pytest.mark.parametrize("mode", MODES)
async def test_a_token_issued_for_another_resource_is_refused(
    servers: AuthServerThread, tmp_path: Path, mode: str
) -> None:
    form = "jwt" if mode == "jwt" else "opaque"
    ours = servers.mint(subject="alice", resource=URL, format=form)
    elsewhere = servers.mint(subject="alice", resource="http://127.0.0.1:1/mcp", format=form)
    unbound = servers.mint(subject="alice", format=form)  # no audience at all
    async with played_serve(*auth_options(servers, tmp_path, mode)) as served:
        accepted = await served.past_the_guard(ours)
        refused = [await served.initialize(token) for token in (elsewhere, unbound)]
    assert_admitted(accepted)
    for answer in refused:
        assert_invalid_token(answer)


@pytest.mark.parametrize("mode", MODES)
async def test_an_expired_token_is_refused(servers: AuthServerThread, tmp_path: Path, mode: str) -> None:
    form = "jwt" if mode == "jwt" else "opaque"
    expired = servers.mint(subject="alice", resource=URL, format=form, lifetime=-300)
    async with played_serve(*auth_options(servers, tmp_path, mode)) as served:
        refused = await served.initialize(expired)
    assert_invalid_token(refused)


def _compact(header: dict[str, Any], claims: dict[str, Any], sign: Any) -> str:
    """A JWT put together by hand, as a forger would: base64url header and claims, then `sign` of the two."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signed = f"{part(json.dumps(header).encode())}.{part(json.dumps(claims).encode())}"
    return f"{signed}.{part(sign(signed.encode()))}"


@pytest.mark.parametrize("forgery", ["alg-none", "hs256-keyed-with-the-public-key", "another-key-same-kid"])
async def test_a_forged_jwt_is_refused(servers: AuthServerThread, tmp_path: Path, forgery: str) -> None:
    (published,) = httpx.get(f"{servers.issuer}/jwks").json()["keys"]
    issuer = httpx.get(f"{servers.issuer}/.well-known/oauth-authorization-server").json()["issuer"]
    claims = {
        "iss": issuer,
        "aud": URL,
        "sub": "alice",
        "client_id": "forger",
        "scope": "mcp",
        "exp": int(time.time()) + 600,
    }
    header = {"typ": "at+jwt", "kid": published["kid"]}
    if forgery == "alg-none":
        token = _compact({**header, "alg": "none"}, claims, lambda _: b"")
    elif forgery == "hs256-keyed-with-the-public-key":  # the old RS256/HS256 confusion
        public = RSAAlgorithm.from_jwk(published)
        assert isinstance(public, rsa.RSAPublicKey)
        pem = public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        token = _compact({**header, "alg": "HS256"}, claims, lambda data: hmac.digest(pem, data, "sha256"))
    else:
        mine = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        token = jwt.encode(claims, mine, algorithm="RS256", headers=header)
    genuine = servers.mint(subject="alice", resource=URL, format="jwt")
    async with played_serve(*auth_options(servers, tmp_path, "jwt")) as served:
        accepted = await served.past_the_guard(genuine)
        refused = await served.initialize(token)
    assert_admitted(accepted)  # the same claims, signed by the server, pass
    assert_invalid_token(refused)


@pytest.mark.parametrize(
    ("mode", "minted"),
    [
        ("introspection", {"subject": "alice", "claims": {"cnf": {"jkt": DPOP_KEY}}}),
        ("jwt", {"subject": "alice", "claims": {"cnf": {"jkt": DPOP_KEY}}}),
        ("introspection", {"subject": "alice", "claims": {"token_type": "refresh_token"}}),
        ("introspection", {"client_id": ""}),  # names nobody: no subject, no client
    ],
    ids=["dpop-bound", "dpop-bound-jwt", "a-refresh-token", "nobody"],
)
async def test_tokens_it_cannot_take_as_bearer_tokens_are_refused(
    servers: AuthServerThread, tmp_path: Path, mode: str, minted: dict[str, Any]
) -> None:
    token = servers.mint(resource=URL, format="jwt" if mode == "jwt" else "opaque", **minted)
    async with played_serve(*auth_options(servers, tmp_path, mode)) as served:
        refused = await served.initialize(token)
    assert_invalid_token(refused)


async def test_a_revoked_token_is_refused_at_its_next_request(servers: AuthServerThread, tmp_path: Path) -> None:
    token = servers.mint(subject="alice", resource=URL)
    async with played_serve(*auth_options(servers, tmp_path, "introspection")) as served:
        taken = await served.past_the_guard(token)
        servers.control("/test/revoke-access")
        again = await served.past_the_guard(token)
    assert_admitted(taken)
    assert_invalid_token(again)


@pytest.mark.parametrize("mode", MODES)
async def test_a_token_without_the_required_scope_gets_403(
    servers: AuthServerThread, tmp_path: Path, mode: str
) -> None:
    form = "jwt" if mode == "jwt" else "opaque"
    token = servers.mint(subject="alice", resource=URL, scopes=["read"], format=form)
    async with played_serve(*auth_options(servers, tmp_path, mode)) as served:
        refused = await served.initialize(token)
        assert served.front.sessions == {}
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and "resource_metadata=" in challenge
    assert 'scope="mcp"' in challenge  # the scope to step up to


async def test_an_unreachable_authorization_server_gets_503_not_401(
    servers: AuthServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/introspect"
    options = [*auth_options(servers, tmp_path, "introspection"), "--oauth-introspection", dead]
    async with played_serve(*options) as served:
        answer = await served.initialize(servers.mint(subject="alice", resource=URL))
    assert answer.status_code == 503  # a 401 would send the client to log in again, for nothing
    assert answer.headers["retry-after"] == "5"
    assert "www-authenticate" not in answer.headers
    assert "authorization server" in answer.json()["error_description"]
    assert "cannot check a bearer token: introspection at" in capsys.readouterr().err


async def test_wrong_introspection_credentials_are_not_blamed_on_the_caller(
    servers: AuthServerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--oauth-issuer", servers.issuer, "--oauth-client-file", client_file(tmp_path, "wrong-secret-000")]
    async with played_serve(*options) as served:
        answer = await served.initialize(servers.mint(subject="alice", resource=URL))
    assert answer.status_code == 503
    assert "check --oauth-client-file" in capsys.readouterr().err


def serve_refuses(*options: str) -> str:
    """`serve OPTIONS -- server` run in process as the command runs it: it exits 2; what it said."""
    done = run_subcommand(["serve", *options, "--", PY, SMALL_SERVER])
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_oauth_setup_errors_say_what_to_do(servers: AuthServerThread, tmp_path: Path) -> None:
    """Each mistake in serve's OAuth options is refused before anything is bound, saying what to give."""
    assert "give --oauth-issuer URL too" in serve_refuses("--oauth-scope", "mcp")
    unreachable = f"http://127.0.0.1:{free_port()}"
    assert f"--oauth-issuer {unreachable}: cannot reach its metadata" in serve_refuses("--oauth-issuer", unreachable)
    assert "Issuer URL must be HTTPS" in serve_refuses("--oauth-issuer", "http://auth.example.com")
    assert "give --oauth-resource URL" in serve_refuses(
        "--listen", f"0.0.0.0:{free_port()}", "--oauth-issuer", servers.issuer
    )
    shared = tmp_path / "rs-client"
    shared.write_text(f"client_id = {RS_CLIENT}\nclient_secret = {RS_SECRET}\n")
    shared.chmod(0o644)
    assert "chmod 600" in serve_refuses("--oauth-issuer", servers.issuer, "--oauth-client-file", str(shared))

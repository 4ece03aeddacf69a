"""`serve --token-file`'s refusals, played in process: the endpoint its options build
(helpers/played_serve.py), asked without a token, with a wrong one, with a token file's whole line. Every
answer here is decided before a session or server exists; a token that opens a session and samples is in
tests/e2e/test_serve.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from helpers.played_serve import NO_SUCH_SESSION, played_serve
from helpers.serving import ALICE, BOB, token_file

pytestmark = pytest.mark.anyio

REALM = 'Bearer realm="mcp-sampling-proxy"'
SEND_A_TOKEN = "Unauthorized: send 'Authorization: Bearer TOKEN' with a token of --token-file"


def assert_refused(answer: httpx.Response, message: str = SEND_A_TOKEN) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == REALM
    assert answer.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}


async def test_a_missing_or_wrong_token_gets_401_and_starts_nothing(tmp_path: Path) -> None:
    async with played_serve("--token-file", token_file(tmp_path)) as served:
        missing = await served.initialize(None)
        wrong = await served.initialize(f"{BOB}x")
        not_bearer = await served.http.post(
            served.url, json={}, headers={"Authorization": f"Basic {ALICE}", "Content-Type": "application/json"}
        )
        assert served.front.sessions == {} and served.front.lanes == {}  # nothing was started for them
    assert_refused(missing)
    assert_refused(wrong)
    assert_refused(not_bearer)  # the token, but not as a bearer token


async def test_a_whole_token_file_line_is_named_in_the_401(tmp_path: Path) -> None:
    """The usual slip when copying from the token file: the 401 says which part to send."""
    async with played_serve("--token-file", token_file(tmp_path)) as served:
        refused = await served.initialize(f"alice:{ALICE}")
    assert_refused(
        refused,
        "Unauthorized: that is a whole line of --token-file (NAME:TOKEN); send only the part after the colon: "
        "'Authorization: Bearer TOKEN'",
    )


async def test_each_token_of_the_file_gets_past_the_check(tmp_path: Path) -> None:
    async with played_serve("--token-file", token_file(tmp_path)) as served:
        answers = [await served.past_the_guard(token) for token in (ALICE, BOB)]
    for answer in answers:  # taken: the request went on to look for its (unknown) session
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["message"] == NO_SUCH_SESSION


async def test_a_token_from_the_environment_is_checked_too(tmp_path: Path) -> None:
    token = "env-token-0123456789abcdef"
    async with played_serve(environ={"MCP_SAMPLING_PROXY_TOKEN": token}) as served:
        wrong = await served.initialize(ALICE)
        taken = await served.past_the_guard(token)
    assert_refused(wrong)
    assert taken.status_code == 404 and taken.json()["error"]["message"] == NO_SUCH_SESSION


async def test_a_refusal_is_logged_without_the_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with played_serve("--token-file", token_file(tmp_path)) as served:
        await served.initialize(f"{ALICE}-guessed")
    err = capsys.readouterr().err
    warnings = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(w["event"] == "refused an HTTP request: no valid token" for w in warnings), err
    assert ALICE not in err  # neither the guess nor the token it resembles reaches the log


async def test_without_any_token_configured_a_loopback_endpoint_asks_for_none() -> None:
    async with played_serve() as served:
        answer = await served.past_the_guard("anything")
    assert answer.status_code == 404 and answer.json()["error"]["message"] == NO_SUCH_SESSION

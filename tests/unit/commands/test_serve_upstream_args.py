"""`serve`'s command line names its server once: a command after `--`, or `--url` (with its `--header`s).

Run in process through the command's `main`: each mistake is refused before anything starts or binds,
with exit status 2 and a message that says what to give instead.
"""

from __future__ import annotations

import pytest
from helpers.support import KITCHEN_SINK, PY, free_port

from mcp_sampling_proxy.commands import serve


@pytest.mark.parametrize(
    ("upstream", "says"),
    [
        (["--url", "http://127.0.0.1:9/mcp", "--", PY, KITCHEN_SINK], "either as '-- COMMAND [ARGS...]' or with --url"),
        ([], "either as '-- COMMAND [ARGS...]' or with --url"),
        (["--header", "X-A: b", "--", PY, KITCHEN_SINK], "--header is for --url"),
        (["--url", "ftp://example.com/mcp"], "give the server's MCP endpoint as http://"),
        (["--url", "http://127.0.0.1:9/mcp", "--header", "no colon"], "is not 'Name: value'"),
        (["--url", "http://127.0.0.1:9/mcp", "--header", "X-A: ${NOT_SET_ANYWHERE}"], "${NOT_SET_ANYWHERE}"),
    ],
)
def test_a_server_given_twice_not_at_all_or_badly_is_a_usage_error(
    upstream: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve.main(["--listen", f"127.0.0.1:{free_port()}", *upstream]) == 2
    assert says in capsys.readouterr().err

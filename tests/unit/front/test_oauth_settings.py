"""`serve --oauth-client-file`: the introspection credentials, and the files refused before anything listens."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_sampling_proxy.front.oauth_settings import load_client_file
from mcp_sampling_proxy.front.tokens import TokenError


def client_file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "client"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return str(path)


def test_both_spellings_and_a_url_client_id_are_read(tmp_path: Path) -> None:
    path = client_file(tmp_path, "# at the AS\nclient_id: https://proxy.example.com/client\n\nclient_secret = a:b=c\n")
    credentials = load_client_file(path)
    assert credentials.client_id == "https://proxy.example.com/client"
    assert credentials.client_secret == "a:b=c"
    assert "a:b=c" not in repr(credentials)  # a log line of the record shows no secret


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        ("client_id = x\nclient_secret = y\n", 0o644, "chmod 600"),
        ("client_id = x\n", 0o600, "no client_secret"),
        ("", 0o600, "no client_id and no client_secret"),
        ("client_id = x\nsecret = y\n", 0o600, ":2: expected `client_id = ID`"),
        ("client_id =\nclient_secret = y\n", 0o600, ":1: expected"),
    ],
)
def test_unusable_files_are_refused_saying_why(tmp_path: Path, text: str, mode: int, said: str) -> None:
    with pytest.raises(TokenError, match="--oauth-client-file") as refused:
        load_client_file(client_file(tmp_path, text, mode))
    assert said in str(refused.value)

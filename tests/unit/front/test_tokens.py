"""`serve`'s bearer tokens: who each is, and the token files refused before anything listens."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_sampling_proxy.front.tokens import TOKEN_ENV, TokenError, load_tokens

ALICE = "alice-0123456789abcdef"
SHARED = "shared-0123456789abcdef"


def tokens_file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "tokens"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return str(path)


def test_each_token_names_its_caller(tmp_path: Path) -> None:
    path = tokens_file(tmp_path, f"# team\n\nalice:{ALICE}\n{SHARED}\n")
    tokens = load_tokens(path, {TOKEN_ENV: "from-env-0123456789abcdef"})
    assert tokens.required
    assert tokens.identify(ALICE) == "alice"
    assert tokens.identify(SHARED) == "token"
    assert tokens.identify("from-env-0123456789abcdef") == "token"
    assert tokens.identify(ALICE + "x") is None
    assert tokens.identify(ALICE[:-1]) is None
    assert tokens.identify("") is None


def test_a_whole_named_line_is_told_apart_from_a_wrong_token(tmp_path: Path) -> None:
    tokens = load_tokens(tokens_file(tmp_path, f"alice:{ALICE}\n{SHARED}\n"), {})
    assert tokens.identify(f"alice:{ALICE}") is None
    assert tokens.is_whole_line(f"alice:{ALICE}")
    assert not tokens.is_whole_line(f"bob:{ALICE}")  # a name that is not the token's own
    assert not tokens.is_whole_line(ALICE) and not tokens.is_whole_line(f"token:{SHARED}")


def test_no_file_and_no_variable_means_no_token_required() -> None:
    assert not load_tokens(None, {}).required


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        (f"alice:{ALICE}\n", 0o644, "chmod 600"),
        ("alice:short\n", 0o600, "at least 16"),
        (f":{ALICE}\n", 0o600, "client name"),
        ("# nothing here\n", 0o600, "no tokens"),
    ],
)
def test_an_unusable_token_file_is_refused_with_what_to_do(tmp_path: Path, text: str, mode: int, said: str) -> None:
    with pytest.raises(TokenError, match=said):
        load_tokens(tokens_file(tmp_path, text, mode), {})


def test_a_missing_token_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenError, match="cannot open"):
        load_tokens(str(tmp_path / "nope"), {})

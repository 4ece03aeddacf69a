"""Secrets in the audit log: built-in patterns, Luhn, user regexes, configured keys in every mode; the config."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mcp_sampling_proxy.audit.recorder import AuditLog, configured_secrets
from mcp_sampling_proxy.config.settings import AuditSettings, parse_settings
from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.text.redact import Redactor, luhn_ok

# A configured key that matches none of the built-in patterns: only exact-value scrubbing can catch it.
KEY = "unpatterned-Key-value-7f3a9c2e"

SAMPLES = [
    ("openai-key", "sk-proj-abcDEF1234567890abcDEF1234567890xyz"),
    ("openai-key", "sk-abcdefghijklmnopqrstuvwxyz012345"),
    ("anthropic-key", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_aa"),
    ("google-key", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
    ("google-oauth-token", "ya29.a0AfH6SMBx7abcdefghijklmnopqrstuvwxyz"),
    ("aws-access-key-id", "AKIAIOSFODNN7EXAMPLE"),
    ("github-token", "ghp_" + "a1B2c3D4e5" * 4),
    ("github-token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("slack-token", "xoxb-1234567890-0987654321-AbCdEfGhIjKl"),
    ("slack-webhook", "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("stripe-key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe-key", "rk_test_51H8abcdefghijklmnop"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("private-key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc+/=\n-----END RSA PRIVATE KEY-----"),
    ("private-key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"),
    ("private-key", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"),  # cut off: masked to the end
    ("email", "alice.smith+tag@example.co.uk"),
    ("card-number", "4111 1111 1111 1111"),
    ("card-number", "5500-0000-0000-0004"),
    ("card-number", "378282246310005"),
    ("card-number", "6011111111111117"),
]


@pytest.mark.parametrize(("kind", "secret"), SAMPLES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SAMPLES)])
def test_each_builtin_pattern_masks_its_secret(kind: str, secret: str) -> None:
    text, count = Redactor().redact(f"before {secret} after")
    assert secret not in text
    assert f"[REDACTED:{kind}]" in text
    assert text.startswith("before ")
    assert count == 1


def test_bearer_token_keeps_the_word_and_masks_the_token() -> None:
    text, count = Redactor().redact("Authorization: Bearer abc.def-ghi_12345~x")
    assert text == "Authorization: Bearer [REDACTED:bearer-token]"
    assert count == 1


def test_aws_secret_key_is_masked_after_its_name() -> None:
    text, _ = Redactor().redact("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    assert text == "aws_secret_access_key = [REDACTED:aws-secret-key]\n"


def test_a_jwt_in_a_bearer_header_is_masked_as_a_jwt() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    assert Redactor().redact(f"Bearer {jwt}")[0] == "Bearer [REDACTED:jwt]"


@pytest.mark.parametrize(
    ("number", "valid"),
    [
        ("4111111111111111", True),
        ("4111111111111112", False),
        ("79927398713", False),  # too short for a card
        ("4012888888881881", True),
        ("4012888888881882", False),
        ("378282246310005", True),
        ("30569309025904", True),
        ("1234567890123", False),
    ],
)
def test_luhn(number: str, valid: bool) -> None:
    assert luhn_ok(number) is valid


def test_numbers_that_fail_luhn_or_are_not_cards_stay() -> None:
    text = "order 4111 1111 1111 1112, phone +1 555 123 4567, on 2024-05-01 at 10:30, id 12345678901234567890123"
    assert Redactor().redact(text) == (text, 0)


def test_ordinary_text_is_unchanged() -> None:
    text = "Summarize: the skeleton key opened gate AIza; email me later; sk-short; Bearer"
    assert Redactor().redact(text) == (text, 0)


def test_user_regexes_are_masked_too() -> None:
    redactor = Redactor(patterns=[r"ACME-\d{6}", r"password=(?P<secret>\S+)"])
    text, count = redactor.redact("ticket ACME-123456, password=hunter2!")
    assert text == "ticket [REDACTED:custom], password=[REDACTED:custom]"
    assert count == 2


def test_configured_keys_are_scrubbed_whole_and_short_values_are_not_keys() -> None:
    redactor = Redactor(secrets=[KEY, KEY[:12], "ollama"])
    assert redactor.scrub(f"a {KEY} b {KEY[:12]}") == "a [REDACTED:configured-key] b [REDACTED:configured-key]"
    assert redactor.scrub("model: ollama") == "model: ollama"
    assert redactor.scrub_value({KEY: [KEY, 1, None]}) == {
        "[REDACTED:configured-key]": ["[REDACTED:configured-key]", 1, None]
    }


# -- the key in every content mode ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["none", "redacted", "full"])
def test_a_configured_key_never_reaches_the_file(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), content=mode, fsync=False, secrets=[KEY])
    params = {
        "systemPrompt": f"the key is {KEY}",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": f"leak {KEY} please"}},
            {"role": "assistant", "content": {"type": "tool_use", "id": "t", "name": "x", "input": {KEY: KEY}}},
        ],
        "tools": [{"name": "x", "description": KEY, "inputSchema": {"type": "object"}}],
    }
    result = {"role": "assistant", "content": {"type": "text", "text": f"here: {KEY}"}, "model": KEY}
    log.record(
        params=params,
        result=result,
        server=KEY,
        decision="allow",
        reason=f"why {KEY}",
        error=f"failed {KEY}",
        model=KEY,
    )
    text = path.read_text()
    assert KEY not in text
    assert "[REDACTED:configured-key]" in text
    record = json.loads(text.splitlines()[0])
    assert record["reason"] == "why [REDACTED:configured-key]"
    if mode != "none":
        assert record["content"]["messages"][0]["message"]["content"]["text"] == "leak [REDACTED:configured-key] please"
        assert record["content"]["response"]["result"]["content"]["text"] == "here: [REDACTED:configured-key]"
    else:
        assert "leak" not in text


def test_redacted_mode_masks_content_and_counts_but_full_keeps_it(tmp_path: Path) -> None:
    sent = "mail bob@example.com, card 4111-1111-1111-1111, ACME-42"
    params = {"messages": [{"role": "user", "content": {"type": "text", "text": sent}}]}
    for mode in ("redacted", "full"):
        path = tmp_path / f"{mode}.jsonl"
        AuditLog(str(path), content=mode, fsync=False, redact=[r"ACME-\d+"]).record(
            params=params, server="s", decision="allow"
        )
        content = json.loads(path.read_text().splitlines()[0])["content"]
        text = content["messages"][0]["message"]["content"]["text"]
        if mode == "redacted":
            assert text == "mail [REDACTED:email], card [REDACTED:card-number], [REDACTED:custom]"
            assert content["redactions"] == 3
        else:
            assert text == sent
            assert "redactions" not in content


def test_reason_and_error_are_masked_in_every_mode(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    AuditLog(str(path), fsync=False).record(
        server="s", decision="error", reason="token ghp_" + "x" * 36, error="user carol@example.org"
    )
    record = json.loads(path.read_text().splitlines()[0])
    assert record["reason"] == "token [REDACTED:github-token]"
    assert record["error"] == "user [REDACTED:email]"


def test_configured_secrets_come_from_key_variables_and_provider_headers() -> None:
    settings = parse_settings(
        "llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: MY_KEY\n      models: [m]\n"
        "      headers: {Authorization: Bearer tok-abcdefgh, X-Org: org-1}\n"
        "upstream:\n  pass_env: [MY_KEY]\n",
        "policy.yaml",
    )
    found = configured_secrets(settings, {"MY_KEY": KEY, "OPENAI_API_KEY": "sk-env-value-123", "OTHER": "x" * 20})
    assert KEY in found  # even when upstream.pass_env lets the server see it
    assert "sk-env-value-123" in found
    assert "tok-abcdefgh" in found and "Bearer tok-abcdefgh" in found
    assert "x" * 20 not in found


# -- the audit: section -----------------------------------------------------------------------------


def test_audit_section_round_trip(tmp_path: Path) -> None:
    where = str(tmp_path / "conf" / "policy.yaml")
    settings = parse_settings(
        "audit:\n  path: logs/audit.jsonl\n  content: redacted\n  redact: ['ACME-\\d+', 'x(?P<secret>y+)']\n"
        "  fsync: false\n  max_bytes: 16MiB\n",
        where,
    )
    assert settings.audit.path == str(tmp_path / "conf" / "logs" / "audit.jsonl")
    assert settings.audit_path == settings.audit.path
    assert settings.audit.content == "redacted"
    assert [p.pattern for p in settings.audit.redact] == [r"ACME-\d+", "x(?P<secret>y+)"]
    assert settings.audit.fsync is False
    assert settings.audit.max_bytes == 16 * 1024 * 1024


def test_audit_defaults() -> None:
    assert parse_settings("audit:\n  path: ~/a.jsonl\n", "p.yaml").audit == AuditSettings(
        path=os.path.expanduser("~/a.jsonl"), content="none", redact=(), fsync=True, max_bytes=64 * 1024 * 1024
    )
    assert parse_settings("rules: []\n", "p.yaml").audit == AuditSettings()
    assert parse_settings("audit:\n  path: /x/a.jsonl\n  max_bytes: 0\n", "p.yaml").audit.max_bytes == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "audit:\n  path: a\n  content: ful\n",
            "policy.yaml:3:12: audit.content 'ful' is not one of none, redacted, full (did you mean 'full'?)",
        ),
        (
            "audit:\n  path: a\n  max_byte: 1MiB\n",
            "policy.yaml:3:3: unknown key 'max_byte' in audit (did you mean 'max_bytes'?); "
            "allowed: path, content, redact, fsync, max_bytes",
        ),
        (
            "audit:\n  path: a\n  max_bytes: lots\n",
            "policy.yaml:3:14: audit.max_bytes must be a size: a number of bytes or a string such as 512KiB",
        ),
        ("audit:\n  path: a\n  max_bytes: -1\n", "policy.yaml:3:14: audit.max_bytes cannot be negative, got -1"),
        (
            "audit:\n  path: a\n  fsync: sometimes\n",
            "policy.yaml:3:10: audit.fsync must be true (each record is fsync'd right after it is written, while the "
            "answer goes out), before_answer (the answer waits for the fsync too) or false (never fsync'd), "
            "got 'sometimes'",
        ),
        (
            "audit:\n  path: a\n  redact: ['(unclosed']\n",
            "policy.yaml:3:12: audit.redact[0] /(unclosed/ is not a valid regular expression: missing ), unterminated "
            "subpattern at position 0",
        ),
        ("audit:\n  path: a\n  redact: ['a*']\n", "policy.yaml:3:12: audit.redact[0] /a*/ matches the empty string"),
        ("audit:\n  content: full\n", "policy.yaml:2:3: audit sets content but no path: give path: FILE"),
        ("audit:\n  path: ''\n", "policy.yaml:2:9: audit.path must be a non-empty string, got ''"),
    ],
)
def test_audit_section_mistakes_name_their_position(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_settings(text, "policy.yaml")
    assert str(info.value).startswith(message)


def test_media_data_is_not_pattern_masked_but_configured_keys_are_scrubbed() -> None:
    data = "QUtJQUlPU0ZPRE5ON0VYQU1QTEU" + "4111111111111111" + "AKIAIOSFODNN7EXAMPLE"
    block = {"type": "image", "mimeType": "image/png", "data": data}
    redacted, count = Redactor().redact_value({"content": [block, {"type": "text", "text": data}]})
    assert redacted["content"][0]["data"] == data
    assert "[REDACTED:" in redacted["content"][1]["text"] and count >= 1
    assert Redactor(secrets=["AKIAIOSFODNN7EXAMPLE"]).scrub_value(block)["data"].endswith("[REDACTED:configured-key]")


def test_callers_cannot_set_the_chain_keys(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False)
    forged: Any = log  # the typed API refuses these keys; a caller that gets past the types must not win either
    forged.record(server="s", decision="allow", ts="1999-01-01", seq=99, proxy_id="forged", prev_hash="x", hash="y")
    record = json.loads(path.read_text().splitlines()[0])
    assert (record["seq"], record["proxy_id"]) == (1, log.proxy_id)
    assert record["ts"] != "1999-01-01" and record["hash"] != "y" and record["prev_hash"] != "x"
    assert list(record)[:5] == ["ts", "seq", "proxy_id", "event", "continues"]
    assert list(record)[-2:] == ["prev_hash", "hash"]


def _each_string_redacted_in_full(redactor: Redactor, value: Any) -> Any:
    """What `redact_value` must give: every pattern run over every string, as `redact` does one text."""
    if isinstance(value, str):
        return redactor.redact(value)[0]
    if isinstance(value, dict):
        media = value.get("type") in ("image", "audio")
        return {
            (redactor.redact(k)[0] if isinstance(k, str) else k): v
            if media and k == "data"
            else _each_string_redacted_in_full(redactor, v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_each_string_redacted_in_full(redactor, v) for v in value]
    return value


AROUND = [
    "",
    "plain words, no secret",
    "call me at 4111 1111",
    "Authorization: Bearer ",
    "AWS key: ",
    "the aws secret key = ",
    "mail ",
    "sk-",
    "x" * 300,
]


# A mask is text the later shapes read: "[REDACTED:aws-access-key-id] token: ..." is an AWS secret key's
# shape, though the text before the first mask held no "aws"
MASK_MAKES_A_SHAPE = "AKIAIOSFODNN7EXAMPLE token: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
# (?i) takes U+017F (long s) for an `s`, which str.lower keeps: the literal "aws" must be looked for folded
LONG_S = "AW\u017f secret key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize("secret", [s for _, s in SAMPLES] + [KEY, "", "1234567890123", MASK_MAKES_A_SHAPE, LONG_S])
def test_redacting_a_value_looks_for_each_shape_only_where_it_may_be_and_masks_the_same(secret: str) -> None:
    """`redact_value` searches a shape only when a literal every match of it holds is in one of the value's
    strings; what it gives must not differ from every pattern run over every string, for every shape
    alone, beside ordinary text, in keys, split over two strings, and with a user's pattern too."""
    redactor = Redactor([KEY], [r"ticket-\d{4}"])
    values: list[Any] = []
    for before in AROUND:
        values.append({"messages": [{"role": "user", "content": {"type": "text", "text": before + secret}}]})
        values.append({"systemPrompt": secret + " " + before, "maxTokens": 4111111111111111, "ticket-1234": [before]})
        values.append({before + secret: {"type": "image", "data": secret, "mimeType": "image/png"}})
        values.append([before, secret[: len(secret) // 2], secret[len(secret) // 2 :], "AKIA", "ticket-9876"])
    for value in values:
        assert redactor.redact_value(value)[0] == _each_string_redacted_in_full(redactor, value), value
    assert redactor.redact_value({"t": "nothing here"}) == ({"t": "nothing here"}, 0)
    assert redactor.redact_value([MASK_MAKES_A_SHAPE])[0] == [
        "[REDACTED:aws-access-key-id] token: [REDACTED:aws-secret-key]"
    ]


def test_each_part_of_a_record_is_masked_in_its_place_and_counted_once(tmp_path: Path) -> None:
    """The record's parts (system prompt, messages, answer) are looked at together for the shapes they may
    hold; each keeps its own text and masks, and a part with nothing to mask is left as it came."""
    params = {
        "systemPrompt": "reply to bob@example.com",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "card 4111-1111-1111-1111"}},
            {"role": "assistant", "content": {"type": "text", "text": "nothing here"}},
        ],
    }
    result = {"role": "assistant", "content": {"type": "text", "text": "ref ACME-7"}, "model": "m"}
    path = tmp_path / "audit.jsonl"
    AuditLog(str(path), content="redacted", fsync=False, redact=[r"ACME-\d+"]).record(
        params=params, result=result, server="s", decision="allow"
    )
    content = json.loads(path.read_text().splitlines()[0])["content"]
    assert content["system"]["text"] == "reply to [REDACTED:email]"
    texts = [m["message"]["content"]["text"] for m in content["messages"]]
    assert texts == ["card [REDACTED:card-number]", "nothing here"]
    assert content["response"]["result"]["content"]["text"] == "ref [REDACTED:custom]"
    assert content["redactions"] == 3

"""The secret scan over sampling text: detect-secrets' detectors, redact.py's credential shapes, masks."""

from __future__ import annotations

import time

import pytest

from mcp_sampling_proxy.services.secret_scan import OVERLAP, WINDOW, mask_text, scan, scan_request
from mcp_sampling_proxy.text.redact import Pattern

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "a1B2c3"
SLACK = "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx"
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


def test_each_kind_is_masked_with_its_detector_type() -> None:
    text = f"id {AWS_KEY_ID}\ngh {GITHUB}\nslack {SLACK}\njwt {JWT}\n"
    masked, types = mask_text(text)
    assert masked == (
        "id [REDACTED:AWS Access Key]\ngh [REDACTED:GitHub Token]\nslack [REDACTED:Slack Token]\n"
        "jwt [REDACTED:JSON Web Token]\n"
    )
    assert types == ("AWS Access Key", "GitHub Token", "JSON Web Token", "Slack Token")


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def test_a_key_disguised_with_zero_width_characters_fullwidth_letters_or_spaces_is_masked_whole() -> None:
    """Each disguise reads as the key to a human or an LLM, and used to slip past every pattern."""
    for disguised in (
        "\u200b".join(GITHUB),  # a zero-width space between each character
        "\u2060".join(AWS_KEY_ID[:8]) + AWS_KEY_ID[8:],  # word joiners in part of it
        fullwidth(GITHUB),
        " ".join(GITHUB),
        fullwidth(" ".join(AWS_KEY_ID)),
    ):
        masked, types = mask_text(f"before {disguised} after")
        assert masked.startswith("before [REDACTED:") and masked.endswith("] after"), (disguised, masked)
        assert types in (("GitHub Token",), ("AWS Access Key",))


def test_folding_leaves_text_without_disguises_alone() -> None:
    text = "Ｔｈｅ ｆｕｌｌｗｉｄｔｈ title, a b c d e spaced letters, and a café: nothing to mask"
    assert mask_text(text) == (text, ())


def test_ordinary_prose_code_and_hashes_are_left_alone() -> None:
    text = (
        "Set password = os.environ['DB_PASSWORD'] and compare the digest "
        "3f786850e387550fdab836ed7e6dc881de23001b; mail ops@example.com from 10.1.2.3 or 8.8.8.8."
    )
    assert mask_text(text) == (text, ())


def test_a_private_key_block_without_its_end_is_masked_to_the_end() -> None:
    masked, types = mask_text("key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n(cut)")
    assert masked == "key:\n[REDACTED:Private Key]"
    assert types == ("Private Key",)


def test_a_secret_across_a_window_boundary_of_a_long_line_is_found() -> None:
    start = WINDOW - OVERLAP // 2 - len(AWS_KEY_ID) // 2  # straddles the first window's end
    text = "x" * start + " " + AWS_KEY_ID + " " + "y" * WINDOW
    masked, types = mask_text(text)
    assert AWS_KEY_ID not in masked and types == ("AWS Access Key",)


def test_a_line_built_to_make_a_detector_backtrack_costs_linear_time() -> None:
    started = time.monotonic()
    mask_text("/" * 20_000)  # npm's `//.+/:_authToken` pattern is quadratic over a whole line of it
    assert time.monotonic() - started < 5  # unwindowed: minutes


def test_values_keep_their_shape_and_media_is_not_scanned() -> None:
    content = [
        {"type": "text", "text": f"use {AWS_KEY_ID}"},
        {"type": "image", "data": "QUtJQUlPU0ZPRE5ON0VYQU1QTEU" + AWS_KEY_ID, "mimeType": "image/png"},
    ]
    scanned = scan(content)
    assert scanned.value[0] == {"type": "text", "text": "use [REDACTED:AWS Access Key]"}
    assert scanned.value[1] == content[1]
    assert scanned.types == ("AWS Access Key",)
    clean = [{"type": "text", "text": "nothing here"}]
    assert scan(clean).value is clean and scan(clean).types == ()


def test_a_request_is_scanned_in_its_messages_and_system_prompt_only() -> None:
    params = {
        "messages": [{"role": "user", "content": {"type": "text", "text": f"key {AWS_KEY_ID}"}}],
        "systemPrompt": f"token {GITHUB}",
        "maxTokens": 10,
        "metadata": {"note": AWS_KEY_ID},
    }
    scanned = scan_request(params)
    assert scanned.value["messages"][0]["content"]["text"] == "key [REDACTED:AWS Access Key]"
    assert scanned.value["systemPrompt"] == "token [REDACTED:GitHub Token]"
    assert scanned.value["metadata"] == {"note": AWS_KEY_ID} and scanned.value["maxTokens"] == 10
    assert scanned.types == ("AWS Access Key", "GitHub Token")


SHAPES = [  # one of each of redact.py's credential shapes the scan uses, and a mask that makes another
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----",
    JWT,
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_aa",
    "sk-proj-abcDEF1234567890abcDEF1234567890xyz",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "ya29.a0AfH6SMBx7abcdefghijklmnopqrstuvwxyz",
    AWS_KEY_ID,
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AKIAIOSFODNN7EXAMPLE token: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AW\u017f secret key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # (?i) reads U+017F as `s`
    GITHUB,
    SLACK,
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "plain words, nothing to mask",
]


def test_a_shape_is_skipped_only_where_it_cannot_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan skips one of redact.py's shapes in a text without a literal every match of it holds; it
    must find exactly what running every detector finds, for each shape alone, beside text, disguised."""
    texts = [f"{before}{shape}{after}" for shape in SHAPES for before, after in (("", ""), ("say ", " now"))]
    texts += ["\u200b".join(shape) for shape in SHAPES[:8]] + [fullwidth(shape) for shape in SHAPES[:8]]
    skipping = [mask_text(text) for text in texts]
    monkeypatch.setattr(Pattern, "may_match", lambda self, text, folded: True)
    assert skipping == [mask_text(text) for text in texts]


def test_a_key_in_typeset_prose_is_masked_and_the_prose_kept_as_it_is() -> None:
    """Dashes and curly quotes (not ASCII, but each its own NFKC form and visible) leave a text as it is
    for the detectors; a key in it is found as in plain ASCII, and a disguised one still is."""
    text = f"Your token \u2014 \u201c{GITHUB}\u201d \u2014 is shown once. And \u201c{fullwidth(AWS_KEY_ID)}\u201d too."
    masked, types = mask_text(text)
    assert masked == (
        "Your token \u2014 \u201c[REDACTED:GitHub Token]\u201d \u2014 is shown once. "
        "And \u201c[REDACTED:AWS Access Key]\u201d too."
    )
    assert types == ("AWS Access Key", "GitHub Token")

"""The secret-form guard on real-world forms, both ways (end to end through the real proxy:
tests/e2e/test_sensitive_forms_e2e.py).

Each case is a whole `elicitation/create` form (message + requestedSchema) as a server would send
it. Secret forms must name what triggered the decision; ordinary forms (including ones that
*mention* secrets to say they are not wanted) must reach the user.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers.real_forms import EVERYTHING_MESSAGE, EVERYTHING_SCHEMA, FASTMCP_MESSAGE, FASTMCP_SCHEMA

from mcp_sampling_proxy.approval.forms import parse_form, secret_reasons


def one(name: str, **prop: Any) -> dict[str, Any]:
    """A one-field form schema; `type` defaults to string."""
    return {"type": "object", "properties": {name: {"type": "string", **prop}}, "required": [name]}


def value(**prop: Any) -> dict[str, Any]:
    return one("value", **prop)


# (id, message, schema, expected reason fragment or None for "not a secret")
CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    # -- secret ---------------------------------------------------------------------------
    ("fastmcp-db-password", FASTMCP_MESSAGE, FASTMCP_SCHEMA, 'message: "password"'),
    ("github-pat", "Enter your GitHub personal access token", value(), 'message: "token"'),
    (
        "github-pat-field",
        "Connect GitHub",
        one("pat", title="GitHub personal access token"),
        "field 'pat' (title): \"token\"",
    ),
    ("otp", "Enter the OTP code we sent to your phone", one("code"), 'message: "otp"'),
    ("2fa", "Two-step verification", one("code", title="2FA code"), "field 'code' (title): \"2 fa\""),
    (
        "verification-code",
        "Sign in",
        one("code", description="The 6-digit verification code from your app"),
        '"verification code"',
    ),
    ("ssh-passphrase", "Unlock your key", one("passphrase", title="SSH passphrase"), "field 'passphrase'"),
    ("credit-card", "Checkout", one("cc", title="Credit card number"), '"credit card"'),
    ("cvv", "Checkout", one("cvv", type="integer", title="CVV"), "field 'cvv' (name)"),
    ("iban", "Where should we send the refund?", one("iban", title="IBAN"), "field 'iban'"),
    ("ssn", "Identity check", one("x", title="Social Security number"), '"social security"'),
    ("pin-code", "Card setup", one("pin", title="PIN code"), "field 'pin'"),
    ("pin-integer", "Unlock", one("code", type="integer", title="PIN"), '(title): "pin"'),
    ("api-key-field", "Configure the weather service", one("apiKey", title="API key"), "field 'apiKey' (name)"),
    ("format-password", "Log in", one("pw", format="password"), "(format password)"),
    ("client-secret", "Register the OAuth app", one("clientSecret"), '"client secret"'),
    ("seed-phrase", "Restore your wallet", one("words", title="Recovery phrase (12 words)"), '"recovery phrase"'),
    ("contrast-ends-negation", "No account needed, but enter your API key", value(), 'message: "api key"'),
    ("comma-ends-negation", "Don't worry, just type your password below", value(), 'message: "password"'),
    ("secret-after-negation", "Enter a PIN, not your password", value(), 'message: "pin"'),
    ("dont-forget", "Don't forget your 2FA code", value(), 'message: "2 fa"'),
    ("never-lose", "Type it carefully", one("phrase", description="Never lose your SSH passphrase"), '"passphrase"'),
    # -- not secret -----------------------------------------------------------------------
    ("server-everything", EVERYTHING_MESSAGE, EVERYTHING_SCHEMA, None),
    ("do-not-enter-password", "Do not enter your password here", one("nickname"), None),
    ("never-share-pin", "Pick a display name", one("display", description="Never share your PIN with anyone"), None),
    ("no-api-key-needed", "No API key needed: just pick a city", one("city"), None),
    ("without-token", "Search public repos without a token", one("query"), None),
    ("max-tokens", "Generation settings", one("max_tokens", type="integer", title="Max tokens"), None),
    ("token-count", "Budget", one("n", type="integer", title="Token count"), None),
    ("password-policy-name", "New group", one("policy", title="Password policy name"), None),
    ("keyboard-layout", "Preferences", one("layout", title="Keyboard layout"), None),
    ("primary-key", "Create table", one("pk", title="Primary key column"), None),
    ("api-endpoint", "Configure", one("endpoint", title="API endpoint URL", format="uri"), None),
    ("secret-santa", "Office party", one("gift", title="Secret santa gift idea"), None),
    ("pin-this-note", "Pin this note?", one("pin", type="boolean"), None),
    ("password-in-message-no-typed-field", "Reset your password now?", one("confirm", type="boolean"), None),
    ("tokenizer", "Model setup", one("tokenizer", title="Tokenizer to use"), None),
    ("pinned", "Filter", one("pinned_only", description="Show pinned messages first"), None),
    ("secretary", "Contact", one("secretary", title="Secretary's name"), None),
]


@pytest.mark.parametrize(
    ("message", "schema", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_real_world_forms(message: str, schema: dict[str, Any], expected: str | None) -> None:
    reasons = secret_reasons(parse_form(schema), message)
    if expected is None:
        assert reasons == []
    else:
        assert reasons, "a form asking for a secret was not flagged"
        assert any(expected in reason for reason in reasons), reasons


@pytest.mark.parametrize(
    "message",
    [
        "Enter your p\u200bassword",  # a zero-width space inside the word
        "Enter your ｐａｓｓｗｏｒｄ",  # fullwidth letters
        "We will never ask for your password. Enter it here",  # a negation, then "it"
    ],
)
def test_a_secret_is_found_through_invisible_characters_fullwidth_letters_and_negations(message: str) -> None:
    from mcp_sampling_proxy.approval.forms import parse_form, secret_reasons

    form = parse_form({"type": "object", "properties": {"value": {"type": "string"}}})
    assert secret_reasons(form, message), message


def test_a_negation_still_clears_a_mention_that_asks_for_nothing() -> None:
    from mcp_sampling_proxy.approval.forms import parse_form, secret_reasons

    form = parse_form({"type": "object", "properties": {"name": {"type": "string"}}})
    assert secret_reasons(form, "Enter a name for the new database (no password needed)") == []
    assert secret_reasons(form, "No password needed. Enter your name") == []

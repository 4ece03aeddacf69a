"""The literals every match of a pattern holds (text/regex_literals.py): the secret scan skips a detector
whose literals a text lacks, so a literal read wrongly would let a credential through unmasked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_sampling_proxy.services import secret_scan
from mcp_sampling_proxy.text.regex_literals import anchor, caseless_view, finditer, needs


@pytest.mark.parametrize(
    ("pattern", "groups"),
    [
        ("abc", (("abc",),)),
        ("a[0-9]+bc", (("bc",), ("a",))),  # the longest first: the test stops at the first one missing
        ("x(?:key|token)=", (("xkey", "xtoken"), ("key", "token"), ("=",), ("x",))),  # ties: code point order
        ("(?:ab)+c", (("ab",), ("c",))),
        ("(?:ab){2,}", (("ab",),)),
        ("gh_|github_pat_", (("gh_", "github_pat_"), ("h_", "ithub_pat_"), ("g",))),  # parsed as g(?:h_|ithub_pat_)
    ],
)
def test_what_every_match_must_hold(pattern: str, groups: tuple[tuple[str, ...], ...]) -> None:
    found = needs(re.compile(pattern))
    assert found is not None and found.groups == groups and not found.caseless


@pytest.mark.parametrize(
    "pattern",
    [
        "[a-z]+",  # no literal at all
        "(?:ab)?[0-9]",  # optional: a match may lack it
        "(?:ab)*[0-9]",
        "(?:key|)[0-9]",  # one branch holds nothing
        "(?:key|[0-9])",  # nor here
        "(?i:key)[0-9]",  # flags switched inside: not followed
        "(?<=key)[0-9]",  # a look-behind's text is not part of the match: not used
    ],
)
def test_nothing_is_claimed_where_a_match_need_not_hold_it(pattern: str) -> None:
    found = needs(re.compile(pattern))
    assert found is None or found.groups == ()


def test_a_text_shorter_than_every_match_is_ruled_out() -> None:
    """A pattern's shortest match, look-arounds taking no width: a shorter text cannot hold one."""
    found = needs(re.compile(r"(?<=\W)ab[0-9]{5}(?!x)"))
    assert found is not None and found.shortest == 7
    assert not found.may_match("ab1234", "ab1234") and found.may_match(" ab12345", " ab12345")
    assert needs(re.compile("(?:ab)?")) is None  # an empty match: nothing known


def test_a_caseless_pattern_is_compared_in_a_view_that_folds_as_the_engine_does() -> None:
    found = needs(re.compile("(?i)Secret_KEY"))
    assert found is not None and found.caseless and found.groups == (("secret_key",),)
    assert found.may_match("my SECRET_Key", caseless_view("my SECRET_Key"))
    assert not found.may_match("nothing here", caseless_view("nothing here"))
    # the engine takes ſ for s and ı, İ for i though str.lower does not: the view does too, offsets kept
    assert re.search("(?i)secret_key", "ſecret_key") and found.may_match("ſecret_key", caseless_view("ſecret_key"))
    assert caseless_view("İı ſ K — x") == "ii s k — x"


def test_a_slack_webhook_spelled_with_a_dotless_i_is_still_masked() -> None:
    """`(?i)...services...` matches `servıces` in the engine, though `str.lower` leaves the ı alone: the
    literals are looked for in `caseless_view`, which folds it as the engine does."""
    hook = "https://hooks.slack.com/servıces/T01234567/B01234567/abcdefghijklmnopqrstuvwx"
    masked, types = secret_scan.mask_text(f"hook: {hook}")
    assert masked == "hook: [REDACTED:Slack Token]" and types == ("Slack Token",)


DETECTORS = secret_scan._detectors()


@pytest.mark.parametrize("index", range(len(DETECTORS)), ids=[f"{d.type}-{i}" for i, d in enumerate(DETECTORS)])
@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_every_text_a_detector_matches_passes_its_literal_test(index: int, data: st.DataObject) -> None:
    """Texts generated from each detector's own regex (hypothesis), with text around them: the literal
    test never rules out a text the regex matches."""
    detector = DETECTORS[index]
    assert detector.needs is not None  # every detector has literals today; one without is always run
    inner = data.draw(st.from_regex(detector.regex, fullmatch=True))
    text = data.draw(st.text(max_size=5)) + inner + data.draw(st.text(max_size=5))
    if detector.regex.search(text) is None:  # the text around it broke a look-around: nothing to hold
        return
    lowered = caseless_view(text)
    assert detector.needs.may_match(text, lowered), (detector.type, text)
    anchored = [m.span() for m in finditer(detector.regex, text, detector.anchor, lowered)]
    assert anchored == [m.span() for m in detector.regex.finditer(text)], (detector.type, text)


ROOT = Path(__file__).resolve().parents[3]


def test_anchored_matches_are_finditers_over_real_text() -> None:
    """Every detector with an anchor finds, in this repository's own code and docs (1,024-character windows,
    the test's secrets and their lower-cased forms in some), exactly the matches `finditer` finds."""
    samples = [
        "key = 'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH'",
        'ibm_cloud_iam_api_key: "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH"',
        "cloudant_password = " + "a1" * 32,
        "[secret_access_key] := " + "0123456789abcdef" * 3,
        "softlayer_api_key=" + "ab12" * 16,
    ]
    texts = [
        *samples,
        *(s.upper() for s in samples),
        *(s.replace("s", "ſ").replace("i", "ı") + " — ’" for s in samples),
    ]
    for path in sorted([*ROOT.glob("mcp_sampling_proxy/**/*.py"), *ROOT.glob("docs/**/*.md")])[:120]:
        content = path.read_text(encoding="utf-8")
        texts += [content[i : i + 1024] for i in range(0, min(len(content), 8192), 1024)]
    anchored = [d for d in DETECTORS if d.anchor is not None]
    assert len(anchored) >= 10
    for text in texts:
        lowered = caseless_view(text)
        for d in anchored:
            expected = [m.span() for m in d.regex.finditer(text)]
            assert [m.span() for m in finditer(d.regex, text, d.anchor, lowered)] == expected, (d.type, text[:80])


def test_a_text_full_of_an_anchors_literals_gets_finditers_matches() -> None:
    """A hostile text holds the literals matches are anchored on everywhere: past a bound the scan is the
    engine's own (Python's tries would cost more); below it and past it, the matches are finditer's."""
    key = "AKIAIOSFODNN7EXAMPLE"
    texts = [
        ("key=" * 3000) + f"aws_key = '{key}abcdefghijklmnopqrst'",
        ("sk-" * 5000) + "sk-" + "a1B2" * 10,
        "key = " + "a" * 44 + " pass: " + "b" * 44 + " token " * 3,  # a few: tried where they are
        ("eyJ." * 2000) + "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abc",
    ]
    anchored = [d for d in DETECTORS if d.anchor is not None]
    for text in texts:
        lowered = caseless_view(text)
        for d in anchored:
            expected = [m.span() for m in d.regex.finditer(text)]
            assert [m.span() for m in finditer(d.regex, text, d.anchor, lowered)] == expected, (d.type, text[:40])


def test_an_anchor_is_where_a_match_must_start_near() -> None:
    found = anchor(re.compile(r"(?<=\W)[\[]?(?:api_|)(?:key|token)=[a-z]{8}"))
    assert found is not None and found.strings == ("key", "token") and found.reach == 1 + 4 + 5
    assert anchor(re.compile("AKIA[0-9A-Z]{16}")) is None  # a literal start: the engine's own prefix search
    assert anchor(re.compile("(?:x|y)?")) is None  # matches the empty string
    assert anchor(re.compile(r"[a-z]+key")) is None  # the literal may lie any distance from the start

"""Mask secrets in text before it is written to the audit log.

Two layers, applied by `Redactor`:

- `scrub`: the values of the proxy's own configured API keys (whole values) are replaced by
  `[REDACTED:configured-key]` wherever they occur. The audit log applies it to every string it
  writes, in every content mode, so a key never reaches the file, whatever a server sends. Only
  whole keys: most of what a record holds was chosen by the server (ids, prompts), and masking a
  part of a key there would tell a server that reads the log which guess of the next character was
  right (a 38-character key with a public 8-character prefix fell in 31 requests). A server that
  sends a whole key already has it. Text from the proxy's side (a provider's error, a CLI's stderr),
  which may echo a key in part, is masked run by run (`runs=True`, `KeyRuns`) before it goes anywhere.
- `redact`: secret *shapes* -- provider API keys, bearer tokens, JWTs, PEM private keys, email
  addresses, payment card numbers (Luhn-checked) -- and the user's own regexes are replaced by
  `[REDACTED:KIND]`. The audit log applies it to content in `audit.content: redacted` mode and to
  the free-text `reason` and `error` fields always.

A pattern with a named group `secret` masks only that group (e.g. the token after "Bearer ");
otherwise the whole match is masked.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

from msgspec import Struct

CONFIGURED_KEY = "configured-key"
# Shorter values are not API keys (e.g. the "ollama" placeholder local servers accept) and
# scrubbing them would mask ordinary words everywhere.
MIN_SECRET_LENGTH = 8
MEDIA_TYPES = ("image", "audio")


def mask(kind: str) -> str:
    return f"[REDACTED:{kind}]"


class Pattern(Struct, frozen=True):
    kind: str  # the label in the mask, e.g. "openai-key"
    regex: re.Pattern[str]
    check: Callable[[str], bool] | None = None  # an extra test of the match (Luhn for cards)
    # Literals one of which every match holds (`folded`: looked for in the case-folded text, as (?i)
    # matches: its `s` is also U+017F, which str.lower keeps and str.casefold makes `s`). A value
    # whose strings hold none of them is not searched for this shape at all (`Redactor.redact_value`).
    # Empty (a user's pattern): always searched.
    needles: tuple[str, ...] = ()
    folded: bool = False
    gate: re.Pattern[str] | None = None  # instead of needles: a cheaper regex every match contains a match of

    def may_match(self, text: str, folded: str) -> bool:
        """False only when no match of this pattern can be in `text` (`folded`: text.casefold())."""
        if self.gate is not None:
            return self.gate.search(text) is not None
        if not self.needles:
            return True
        haystack = folded if self.folded else text
        for needle in self.needles:  # noqa: SIM110  # a loop: half the time of any() over a generator
            if needle in haystack:
                return True
        return False


def luhn_ok(text: str) -> bool:
    """True when the digits of `text` (13 to 19 of them) pass the Luhn checksum."""
    digits = [int(c) for c in text if c.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _p(
    kind: str,
    regex: str,
    check: Callable[[str], bool] | None = None,
    *,
    needles: tuple[str, ...] = (),
    folded: bool = False,
    gate: str | None = None,
) -> Pattern:
    return Pattern(kind, re.compile(regex), check, needles, folded, re.compile(gate) if gate else None)


_AWS_KEY_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")


@functools.cache
def builtin_patterns() -> tuple[Pattern, ...]:
    """The secret shapes every redaction looks for, compiled at the first one (~10 ms of CPU that a proxy's
    start would spend, most of which only ever scrub configured keys). Order matters: the multi-line and
    composite shapes first, so that e.g. a JWT inside a bearer header is masked as a JWT and an Anthropic
    key is not taken for an OpenAI one."""
    return (
        _p(
            "private-key",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            needles=("-----BEGIN ",),
        ),
        _p("jwt", r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*", needles=("eyJ",)),
        _p("anthropic-key", r"\bsk-ant-[A-Za-z0-9]{2,10}-[A-Za-z0-9_-]{20,}", needles=("sk-ant-",)),
        _p("openai-key", r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}", needles=("sk-",)),
        _p("google-key", r"\bAIza[0-9A-Za-z_-]{35}", needles=("AIza",)),
        _p("google-oauth-token", r"\bya29\.[0-9A-Za-z_-]{20,}", needles=("ya29.",)),
        _p(
            "aws-access-key-id",
            r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
            needles=_AWS_KEY_PREFIXES,
        ),
        _p(
            "aws-secret-key",
            r"(?i)aws.{0,20}?(?:secret|private)?.{0,20}?(?:key|token)[\"']?\s*[:=]\s*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
            needles=("aws",),
            folded=True,
        ),
        _p(
            "github-token",
            r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})",
            needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        ),
        _p("slack-token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}", needles=("xox",)),
        _p(
            "slack-webhook",
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{20,}",
            needles=("https://hooks.slack.com/",),
        ),
        _p(
            "stripe-key",
            r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}|\bwhsec_[0-9A-Za-z]{24,}",
            needles=("_live_", "_test_", "whsec_"),
        ),
        _p("bearer-token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})", needles=("bearer",), folded=True),
        _p("email", r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b", needles=("@",)),
        _p("card-number", r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])", luhn_ok, gate=r"\d(?:[ -]?\d){12}"),
    )


class Redactor:
    """Masks configured key values (`scrub`) and secret shapes (`redact`) in text and JSON values."""

    def __init__(
        self, secrets: Iterable[str] = (), patterns: Iterable[re.Pattern[str] | str] = (), *, runs: bool = False
    ):
        # Longest first, so a key is masked whole before any value that is a part of it.
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True))
        self._user = tuple(Pattern("custom", re.compile(p) if isinstance(p, str) else p) for p in patterns)
        self._runs: KeyRuns | WholeKeys = KeyRuns(self.secrets) if runs else WholeKeys(self.secrets)

    @functools.cached_property
    def patterns(self) -> tuple[Pattern, ...]:
        """The built-in shapes, then the user's (made at the first redaction)."""
        return builtin_patterns() + self._user

    # -- text ---------------------------------------------------------------------------------
    def scrub(self, text: str) -> str:
        """Replace every configured key in `text`: whole values, or (`runs=True`, for text from the
        proxy's side) every run of 8+ of a key's characters (a provider error that echoes the key
        minus a few characters is as good as the key)."""
        return self._runs.scrub(text)[0]

    def redact(self, text: str) -> tuple[str, int]:
        """Mask every secret shape and configured key; return the text and how many were masked."""
        text, count = self._runs.scrub(text)
        for pattern in self.patterns:
            text, n = _apply(pattern, text)
            count += n
        return text, count

    def _redact_among(self, text: str, patterns: tuple[Pattern, ...]) -> tuple[str, int]:
        """`redact(text)` when only `patterns` can match in `text`: those alone are searched; a text one
        of them masks is redacted whole again, as if every pattern ran in order (a mask is text too)."""
        scrubbed, count = self._runs.scrub(text)
        masked = 0
        for pattern in patterns:
            scrubbed, n = _apply(pattern, scrubbed)
            masked += n
        return self.redact(text) if masked else (scrubbed, count)

    @staticmethod
    def _haystack(value: Any) -> str:
        """Every string of `value` (media data left out), one a line: no shape nor key spans two."""
        strings: list[str] = []
        _collect(value, strings)
        return "\n".join(strings)

    def _shapes_among(self, haystack: str) -> tuple[Pattern, ...]:
        """The patterns that may match in `haystack` (`_haystack` of a value): one look at all of a value's
        strings at once, for literals every match holds, instead of every pattern run over every string
        (26 strings and 15 shapes for a small sampling request and its answer: 0.4 ms)."""
        folded = haystack.casefold()  # once, not once a pattern
        return tuple(p for p in self.patterns if p.may_match(haystack, folded))

    def may_hold_key_json(self, encoded: bytes) -> bool:
        """False when the JSON text `encoded` cannot hold a run of a configured key in any string
        of it, so `scrub_value` of the value it encodes would change nothing. A quick test of one
        text instead of a walk over every string; True when unsure (a key holding a character
        JSON escapes, so its runs need not appear verbatim)."""
        runs = self._runs
        if not runs.windows:
            return False
        return not runs.verbatim_in_json or bool(runs.spans(encoded.decode("utf-8")))

    # -- JSON values --------------------------------------------------------------------------
    def scrub_value(self, value: Any) -> Any:
        """`value` with every string in it (keys too) scrubbed of configured keys."""
        return _walk(value, self.scrub)

    def redact_value(self, value: Any) -> tuple[Any, int]:
        """`value` with every string in it (keys too) redacted, except the base64 `data` of image and
        audio blocks (configured keys are scrubbed from those too, by `scrub_value`); and the number of masks."""
        redacted, count = self.redact_values([value])
        return redacted[0], count

    def redact_values(self, values: list[Any]) -> tuple[list[Any], int]:
        """`redact_value` of each of `values`, with one look (`_shapes_among`) at the strings of all of them:
        the parts of one audit record (its messages, system prompt, tools, answer) are looked at once."""
        count = 0
        haystack = self._haystack(values)
        present = self._shapes_among(haystack)
        if not present and not self._runs.spans(haystack):
            return values, 0  # nothing in them to mask: not walked again

        def one(text: str) -> str:
            nonlocal count
            text, n = self._redact_among(text, present)
            count += n
            return text

        return [_walk(value, one, skip_media=True) for value in values], count


class WholeKeys:
    """Finds whole configured keys (each whitespace-separated piece of 8+ characters) in a text."""

    def __init__(self, secrets: Iterable[str]):
        pieces = sorted(
            {piece for s in secrets for piece in s.split() if len(piece) >= MIN_SECRET_LENGTH}, key=len, reverse=True
        )
        self.windows = set(pieces)  # (named as KeyRuns' for `Redactor.may_hold_key_json`)
        self._pattern = re.compile("|".join(map(re.escape, pieces))) if pieces else None
        self.verbatim_in_json = not any(c in '"\\' or c < " " for p in pieces for c in p)

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._pattern.finditer(text)] if self._pattern is not None else []

    def scrub(self, text: str) -> tuple[str, int]:
        if self._pattern is None or len(text) < MIN_SECRET_LENGTH:
            return text, 0
        return self._pattern.subn(mask(CONFIGURED_KEY), text)


class KeyRuns:
    """Finds every run of `MIN_SECRET_LENGTH`+ consecutive characters of any key in a text.

    WHY this shape: providers echo keys partly ("Incorrect API key provided: sk-abc...xyz12"), so
    exact matching is not enough. All 8-character windows of every key go into a set; the text
    is probed at every 4th position with a 4-character block (any 8-run contains an aligned
    block), and only around a hit are 8-windows checked and extended both ways. Linear in the
    text, with one set look-up per 4 characters on text that holds no key."""

    def __init__(self, secrets: Iterable[str]):
        n = MIN_SECRET_LENGTH
        # Split on whitespace: a header value "Bearer KEY" must mask the key, not eat the space
        # before an echoed key (no API key contains whitespace).
        pieces = {piece for s in secrets for piece in s.split()}
        self.windows = {p[i : i + n] for p in pieces for i in range(len(p) - n + 1)}
        self.blocks = {w[i : i + n // 2] for w in self.windows for i in range(n // 2 + 1)}
        # JSON text escapes only '"', '\\' and control characters: without them, a run in a string is
        # a run in its JSON text too
        self.verbatim_in_json = not any(c in '"\\' or c < " " for p in pieces for c in p)

    def spans(self, text: str) -> list[tuple[int, int]]:
        if not self.windows:
            return []
        n, half = MIN_SECRET_LENGTH, MIN_SECRET_LENGTH // 2
        windows, blocks = self.windows, self.blocks
        spans: list[tuple[int, int]] = []
        covered = 0  # text before this index is already inside a span
        for j in range(0, len(text) - half + 1, half):
            if j + half <= covered or text[j : j + half] not in blocks:
                continue
            for i in range(max(j - half, covered, 0), j + 1):
                if text[i : i + n] in windows:
                    start, end = i, i + n
                    while start > covered and text[start - 1 : start - 1 + n] in windows:
                        start -= 1
                    while end < len(text) and text[end - n + 1 : end + 1] in windows:
                        end += 1
                    spans.append((start, end))
                    covered = end
                    break
        return spans

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` with each run masked as a configured key, and how many runs were masked."""
        if not self.windows or len(text) < MIN_SECRET_LENGTH:
            return text, 0
        spans = self.spans(text)
        if not spans:
            return text, 0
        parts, last = [], 0
        for start, end in spans:
            parts += [text[last:start], mask(CONFIGURED_KEY)]
            last = end
        parts.append(text[last:])
        return "".join(parts), len(spans)


def _apply(pattern: Pattern, text: str) -> tuple[str, int]:
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        whole = match.group(0)
        if pattern.check is not None and not pattern.check(whole):
            return whole
        count += 1
        if "secret" in pattern.regex.groupindex and match.group("secret") is not None:
            start, end = match.span("secret")
            offset = match.start()
            return whole[: start - offset] + mask(pattern.kind) + whole[end - offset :]
        return mask(pattern.kind)

    return pattern.regex.sub(replace, text), count


def map_strings(value: Any, fn: Callable[[str], str], *, skip_media: bool = False) -> Any:
    """`value` with `fn` applied to every string in it (keys too); `skip_media`: not to the base64
    `data` of image and audio blocks, which is not text."""
    return _walk(value, fn, skip_media)


def _collect(value: Any, into: list[str]) -> None:
    """Every string `_walk(value, fn, skip_media=True)` gives `fn`, in a list."""
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        media = value.get("type") in MEDIA_TYPES
        for k, v in value.items():
            if isinstance(k, str):
                into.append(k)
            if not (media and k == "data"):
                _collect(v, into)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect(v, into)


def _walk(value: Any, fn: Callable[[str], str], skip_media: bool = False) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        # Base64 media is not text: a pattern found in it is noise, and masking would corrupt it.
        media = skip_media and value.get("type") in MEDIA_TYPES
        return {
            fn(k) if isinstance(k, str) else k: v if media and k == "data" else _walk(v, fn, skip_media)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(v, fn, skip_media) for v in value]
    return value

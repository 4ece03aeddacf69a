"""Credentials in sampling text, found by detect-secrets' detectors and masked as `[REDACTED:<type>]`.

detect-secrets (Yelp) keeps a detector per credential shape (AWS, GitHub, GitLab, Slack, Stripe,
SendGrid, Twilio, JWTs, private keys, ...), maintained as the providers change their formats. Its
regex-based detectors are run here directly over each string: no files, no baseline, and never its
`verify` step, which would send a found key to its provider. Its keyword and high-entropy detectors
(and the public-IP one) are left out: in an LLM's prose and code they flag every `password = ...`
example and every hash. The credential shapes the audit log already masks (redact.py) fill what
detect-secrets lacks: a PEM private key block whole (its detector flags the BEGIN line only), an
AWS secret key outside quotes (as in a credentials file), Anthropic, OpenAI project and Google keys.

Strings are scanned in overlapping windows: one of detect-secrets' patterns (npm's `//.+/:_authToken`)
backtracks quadratically on a long line of slashes, and a window bounds what one string can cost.
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from msgspec import Struct

from mcp_sampling_proxy.text.redact import Pattern, builtin_patterns, map_strings, mask
from mcp_sampling_proxy.text.regex_literals import Anchor, Needs, anchor, caseless_view, finditer, needs

WINDOW = 1024  # characters detect-secrets' patterns see at once
OVERLAP = 256  # ... shared by neighbouring windows: a secret shorter than this is seen whole in one
MIN_LENGTH = 8  # shorter strings hold no credential
PRIVATE_KEY = "Private Key"  # detect-secrets' type for a private key block

# Left out of detect-secrets' regex detectors: an IP address is not a credential.
_LEFT_OUT = frozenset({"Public IP (ipv4)"})
# redact.py's credential shapes (not its email, card number or bearer shapes), named as
# detect-secrets names the same kind, so one kind has one name in the audit.
_SHAPES = {
    "private-key": PRIVATE_KEY,
    "jwt": "JSON Web Token",
    "anthropic-key": "Anthropic API Key",
    "openai-key": "OpenAI Token",
    "google-key": "Google API Key",
    "google-oauth-token": "Google OAuth Token",
    "aws-access-key-id": "AWS Access Key",
    "aws-secret-key": "AWS Access Key",
    "github-token": "GitHub Token",
    "slack-token": "Slack Token",
    "slack-webhook": "Slack Token",
    "stripe-key": "Stripe Access Key",
}
_GROUP_SECRET = 16  # a captured group this long is the secret itself (assignment-style detectors)


class Scanned(Struct, frozen=True):
    """A value with each credential in its strings masked, and the types found (sorted, each once)."""

    value: Any
    types: tuple[str, ...]


class _Detector(Struct, frozen=True):
    type: str
    regex: re.Pattern[str]
    windowed: bool  # detect-secrets' patterns: run window by window
    shape: Pattern | None = None  # redact.py's shape it is: its literals say when it cannot match
    needs: Needs | None = None  # the literals every match holds, read from the regex (text/regex_literals.py)
    anchor: Anchor | None = None  # where a match can start: near its literals (regex_literals.finditer)


def scan(value: Any) -> Scanned:
    """`value` (a result's content, or messages) with every credential in it masked."""
    found: set[str] = set()

    def one(text: str) -> str:
        if len(text) < MIN_LENGTH:
            return text
        masked, types = mask_text(text)
        found.update(types)
        return masked

    masked = map_strings(value, one, skip_media=True)
    return Scanned(masked if found else value, tuple(sorted(found)))


def scan_request(params: Mapping[str, Any]) -> Scanned:
    """A sampling request's messages and system prompt (what an LLM reads) with credentials masked."""
    parts = {key: params[key] for key in ("messages", "systemPrompt") if key in params}
    scanned = scan(parts)
    if not scanned.types:
        return Scanned(params, ())
    return Scanned({**params, **scanned.value}, scanned.types)


def mask_text(text: str) -> tuple[str, tuple[str, ...]]:
    """`text` with each credential replaced by `[REDACTED:<type>]`, and the types found. A credential
    disguised so that the patterns miss it (zero-width characters inside it, fullwidth letters, a space
    between each character) is found in the text folded back (`fold`) and masked where it stands."""
    folded, where = fold(text)
    found = _spans(folded)
    if where is not None:
        found = ((where[start], where[end - 1] + 1, kind) for start, end, kind in found)
    spans = sorted(found, key=lambda span: (span[0], -span[1]))
    if not spans:
        return text, ()
    parts, last, types = [], 0, set()
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in spans:
        types.add(kind)
        if merged and start < merged[-1][1]:  # overlaps the previous one: one mask, the first type
            previous = merged[-1]
            merged[-1] = (previous[0], max(previous[1], end), previous[2])
        else:
            merged.append((start, end, kind))
    for start, end, kind in merged:
        parts += [text[last:start], mask(kind)]
        last = end
    parts.append(text[last:])
    return "".join(parts), tuple(sorted(types))


# format characters that render as nothing: zero-width space, joiners, word joiner, BOM, soft hyphen
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e")
# a run of single characters each followed by one space ("s k - a b c ..."): a key spelled out
_SPACED = re.compile(r"(?:\S (?=\S(?: |$))){15,}\S")


@functools.lru_cache(maxsize=4096)
def _as_it_is(char: str) -> bool:
    """Whether `fold` keeps `char` as it is: not invisible, and its own NFKC form (an em dash, a curly
    quote, an accented letter: most of what an answer holds outside ASCII)."""
    if char.isascii():
        return True
    return char not in _INVISIBLE and unicodedata.category(char) != "Cf" and unicodedata.normalize("NFKC", char) == char


def fold(text: str) -> tuple[str, list[int] | None]:
    """`text` as the patterns should see it: invisible format characters removed, each character in its
    NFKC form (fullwidth `ｓｋ` is `sk`), and the spaces of a spaced-out run removed; with, for each
    character of the result, its offset in `text` (None when nothing changed: the common case, free)."""
    spaced = _SPACED.search(text) is not None
    if not spaced and (text.isascii() or all(map(_as_it_is, set(text)))):
        return text, None  # (the loop below would give `text` back: each character kept as it is)
    chars: list[str] = []
    where: list[int] = []
    for offset, char in enumerate(text):
        if _as_it_is(char):
            chars.append(char)
            where.append(offset)
            continue
        if char in _INVISIBLE or unicodedata.category(char) == "Cf":
            continue
        for part in unicodedata.normalize("NFKC", char):
            chars.append(part)
            where.append(offset)
    folded = "".join(chars)
    if _SPACED.search(folded):  # drop the spaces inside each spaced-out run
        keep = [True] * len(folded)
        for run in _SPACED.finditer(folded):
            for index in range(run.start() + 1, run.end(), 2):
                keep[index] = False
        folded = "".join(c for c, k in zip(folded, keep, strict=True) if k)
        where = [w for w, k in zip(where, keep, strict=True) if k]
    return (folded, where) if folded != text else (text, None)


def _spans(text: str) -> Iterator[tuple[int, int, str]]:
    detectors = _detectors()  # first: making them asks the engine what `caseless_view` needs (once)
    folded = text.casefold()
    lowered = caseless_view(text)
    for detector in detectors:
        if detector.shape is not None and not detector.shape.may_match(text, folded):
            continue  # none of the literals every match of this shape holds is in the text
        if detector.needs is not None and not detector.needs.may_match(text, lowered):
            continue  # nor of those its regex says every match holds: most detectors, in most texts
        if not detector.windowed:
            for match in finditer(detector.regex, text, detector.anchor, lowered):
                yield (*_secret_span(match), detector.type)
            continue
        for offset in _windows(len(text)):
            window = lowered[offset : offset + WINDOW] if lowered is not None else None
            for match in finditer(detector.regex, text[offset : offset + WINDOW], detector.anchor, window):
                start, end = _secret_span(match)
                if detector.type == PRIVATE_KEY:  # the BEGIN line: the block runs to its END line
                    end = _block_end(text, offset + end)
                    yield offset + start, end, detector.type
                else:
                    yield offset + start, offset + end, detector.type


def _windows(length: int) -> range:
    if length <= WINDOW:
        return range(1)
    return range(0, length - OVERLAP, WINDOW - OVERLAP)


def _secret_span(match: re.Match[str]) -> tuple[int, int]:
    """The part of a match that is the secret: a named `secret` group (redact.py's patterns), else
    the last captured group long enough to be one (detect-secrets' `key = "VALUE"` detectors), else
    the whole match (its prefix groups, such as GitHub's `(ghp|gho|...)`, are too short)."""
    if "secret" in match.re.groupindex and match.group("secret") is not None:
        return match.span("secret")
    for group in range(match.re.groups, 0, -1):
        captured = match.group(group)
        if captured is not None and len(captured) >= _GROUP_SECRET:
            return match.span(group)
    return match.span()


_END_LINE = re.compile(r"-----END [A-Z0-9 ]*?PRIVATE KEY(?: BLOCK)?-----")


def _block_end(text: str, start: int) -> int:
    """Where the private key block whose BEGIN line ends at `start` ends: after its END line, or at
    the end of the text when there is none (a key cut short is still masked)."""
    end = _END_LINE.search(text, start)
    return end.end() if end is not None else len(text)


_made: list[tuple[_Detector, ...]] = []  # the detectors, once made
_making = threading.Lock()
_warming: list[threading.Thread] = []  # the one warm-up thread, once started


def prepare() -> None:
    """Make the detectors now, in a thread, unless they are made or being made: importing detect-secrets
    costs ~0.2 s of CPU, which the scan of a proxy's first LLM answer would otherwise wait for. Called when
    a sampling request arrives; its LLM call (and any approval) takes longer than that. One thread at
    most: requests that come before it takes the lock start no other."""
    if not _made and not _warming:
        _warming.append(threading.Thread(target=_detectors, name="secret-scan-warm-up", daemon=True))
        _warming[0].start()


def make_detectors() -> None:
    """Make the detectors in this thread: for the warm start server, which loads once what every proxy it
    forks would make at its first sampling request (and starts no thread before it forks)."""
    _detectors()


def _detectors() -> tuple[_Detector, ...]:
    if not _made:
        with _making:  # the warm-up thread's (prepare) or a scan's: the other waits for it
            if not _made:
                _made.append(_make_detectors())
    return _made[0]


def _make_detectors() -> tuple[_Detector, ...]:
    # Imported at the first sampling request (prepare), not at start: detect-secrets imports requests,
    # ~0.2 s of the proxy's start-up for something only an LLM's answer needs, seconds later.
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    caseless_view("\u0131")  # asks the regex engine which characters it folds to ASCII letters, here (~45 ms)

    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()  # type -> class (class attributes)
    library = [
        _Detector(kind, regex, windowed=True, needs=needs(regex), anchor=anchor(regex))
        for kind, plugin in plugins.items()
        if issubclass(plugin, RegexBasedDetector) and kind not in _LEFT_OUT
        for regex in plugin.denylist
    ]
    shapes = [
        _Detector(_SHAPES[p.kind], p.regex, False, p, needs(p.regex), anchor(p.regex))
        for p in builtin_patterns()
        if p.kind in _SHAPES
    ]
    return (*library, *shapes)

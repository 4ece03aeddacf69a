"""Judge a URL a server asks the user to open (URL-mode elicitation) before a console shows it.

Pure (no I/O). `analyze_url` finds where the link really leads and what could mislead a
reader: a scheme other than http/https, control or invisible characters, a user name in
front of the host (`https://good.com@evil.com`), a backslash that browsers read as a slash,
punycode or non-ASCII host names, letters of several scripts in one label (Latin "pple"
after a Cyrillic "а"), a bare IP address, and links too long to read. `ok` is False when the
link must not be opened at all; warnings are for the user to weigh before consenting.

`display` is the link as it should be shown, with the real host between `HOST_START` and
`HOST_END` so that a console can make it stand out (`report.styled(bold, reset)`); `before`,
`host` and `after` are the same three parts. The host is shown in its lower-case ASCII
(punycode) form, which is the name the browser will actually look up. Everything in `display`
and the warnings is sanitised; `url` is the URL exactly as given.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import urlsplit

from msgspec import Struct, field

from mcp_sampling_proxy.text.sanitize import strip_controls

ALLOWED_SCHEMES = ("http", "https")
HOST_START = "⟦"
HOST_END = "⟧"
MAX_DISPLAY = 160  # characters of the URL shown; the host is never cut

# C0/C1 controls and DEL, and characters that are invisible or reorder text: soft hyphen,
# zero-width spaces and joiners, bidi marks, overrides and isolates, word joiner, BOM.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_LABEL_DOTS = re.compile("[.\u3002\uff0e\uff61]")  # IDNA treats the ideographic and full-width dots as dots
_ASCII_HOST = re.compile(r"[a-z0-9_.-]+")
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
# Scripts that may share a label (Unicode TS #39 "highly restrictive"): Japanese, Chinese and
# Korean writing mix Han with their own scripts and with Latin.
_SCRIPT_MIXES = (
    {"LATIN", "CJK", "HIRAGANA", "KATAKANA"},
    {"LATIN", "CJK", "BOPOMOFO"},
    {"LATIN", "CJK", "HANGUL"},
)


class UrlReport(Struct, frozen=True):
    url: str  # exactly as given
    scheme: str  # lower case, "" if none
    host: str  # where the link leads: lower-case ASCII (punycode) host, IPv6 without brackets; "" if none
    display: str  # before + HOST_START + host + HOST_END + after (no markers when there is no host)
    warnings: list[str] = field(default_factory=list)
    ok: bool = True  # False: do not open this link
    before: str = ""  # sanitised, possibly shortened, text before the host ("https://", "https://user@", "http://[")
    after: str = ""  # sanitised, possibly shortened, text after it (port, path, query, fragment)
    unicode_host: str = ""  # the host as a reader would see it in a browser's address bar (IDNA decoded)

    def styled(self, start: str, end: str) -> str:
        """The display text with the host between `start` and `end` (e.g. ANSI bold and reset)."""
        if not self.host:
            return self.before + self.after
        return f"{self.before}{start}{self.host}{end}{self.after}"


def analyze_url(url: str, *, max_display: int = MAX_DISPLAY) -> UrlReport:
    """Where `url` leads and what about it could mislead; see the module docstring."""
    warnings: list[str] = []
    ok = True
    if _HIDDEN.search(url):
        ok = False
        warnings.append("the link contains control or invisible characters; it will not be opened")
    clean = _HIDDEN.sub("", url).strip()
    if any(c.isspace() for c in clean):
        warnings.append("the link contains spaces")

    try:
        parts = urlsplit(clean)
    except ValueError as exc:  # e.g. an unbalanced '[' in the host
        warnings.append(f"the link cannot be parsed ({exc})")
        return _report(url, "", "", clean, "", "", warnings, False, max_display)
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        shown = f"a '{_short(scheme, 20)}:' link" if scheme else "not a web link (no scheme)"
        warnings.append(f"only http and https links can be opened; this is {shown}")
        return _report(url, scheme, "", clean, "", "", warnings, False, max_display)

    netloc_start = len(parts.scheme) + 3
    netloc_end = netloc_start + len(parts.netloc)
    if clean[len(parts.scheme) : netloc_start] != "://" or not parts.netloc:
        warnings.append("the link has no host")
        return _report(url, scheme, "", clean, "", "", warnings, False, max_display)

    userinfo, at, hostport = parts.netloc.rpartition("@")
    if "\\" in parts.netloc:
        ok = False
        warnings.append("the link has a backslash before its path; browsers read it as '/', so it may lead elsewhere")
    if hostport.startswith("["):
        close = hostport.find("]")
        raw_host = hostport[1:close] if close > 0 else hostport[1:]
        before = clean[:netloc_start] + userinfo + at + "["
        after = hostport[close:] if close > 0 else ""
    else:
        raw_host, colon, port = hostport.partition(":")
        before = clean[:netloc_start] + userinfo + at
        after = colon + port
    after += clean[netloc_end:]
    if raw_host.endswith(".") and not hostport.startswith("["):
        after = "." * (len(raw_host) - len(raw_host.rstrip("."))) + after  # the root dot: shown, not part of host
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        ok = False
        warnings.append("the link's port is not valid")

    host, unicode_host, host_ok, host_warnings = _judge_host(raw_host.rstrip(".").lower())
    ok = ok and host_ok
    warnings += host_warnings
    if at:
        warnings.append(
            f"the link starts with '{_short(strip_controls(userinfo), 40)}@', which is not where it leads: "
            f"the real host is {host or '?'}"
        )
    if scheme == "http" and host and not _is_loopback(host):
        warnings.append("the link is not encrypted (http, not https)")
    return _report(url, scheme, host, before, after, unicode_host, warnings, ok, max_display)


def _judge_host(host: str) -> tuple[str, str, bool, list[str]]:
    """(ASCII host, Unicode host, ok, warnings) for a lower-cased host name or address."""
    if not host:
        return "", "", False, ["the link has no host"]
    address = _ip(host)
    if address is not None:
        kind = " (a local or private address)" if address.is_private or address.is_loopback else ""
        return host, host, True, [f"the link points at the IP address {host}{kind}, not at a named site"]
    warnings: list[str] = []
    if host.isascii():
        ascii_host = host
    else:
        try:
            ascii_host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return _short(host, 80), host, False, ["the link's host name is not valid"]
    if not _ASCII_HOST.fullmatch(ascii_host) or "" in ascii_host.split("."):
        return _short(strip_controls(ascii_host), 80), host, False, ["the link's host name is not valid"]
    labels = ascii_host.split(".")
    if all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        warnings.append(f"the host {ascii_host} is a number, which browsers read as an IP address")
    decoded = []
    for label in labels:
        if label.startswith("xn--"):
            try:
                decoded.append(label.encode("ascii").decode("idna"))
            except UnicodeError:
                return ascii_host, ascii_host, False, [f"the host label {label} is not valid punycode"]
        else:
            decoded.append(label)
    unicode_host = ".".join(decoded)
    if unicode_host != ascii_host or not host.isascii():
        reads_as = unicode_host if host.isascii() else host
        warnings.append(
            f"the host {ascii_host} is an international name that reads as '{strip_controls(reads_as)}'; "
            "check it is the site you expect"
        )
    for label in decoded:
        scripts = _scripts(label)
        if len(scripts) > 1 and not any(scripts <= allowed for allowed in _SCRIPT_MIXES):
            warnings.append(
                f"the host label '{strip_controls(label)}' mixes {_and(sorted(s.title() for s in scripts))} letters, "
                "a common trick to imitate another site's name"
            )
    return ascii_host, unicode_host, True, warnings


def _scripts(label: str) -> set[str]:
    """The scripts of the letters in a label, from their Unicode names (LATIN, CYRILLIC, CJK...)."""
    scripts = set()
    for char in label:
        if not unicodedata.category(char).startswith("L"):
            continue  # digits, hyphens, combining marks belong to no script of their own
        words = unicodedata.name(char, "UNKNOWN").split()
        if words[0] in ("FULLWIDTH", "HALFWIDTH") and len(words) > 1:
            words = words[1:]
        scripts.add(words[0])
    return scripts


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.partition("%")[0])  # IPv6 may carry a zone id: fe80::1%eth0
    except ValueError:
        return None


def _is_loopback(host: str) -> bool:
    address = _ip(host)
    return host == "localhost" or host.endswith(".localhost") or (address is not None and address.is_loopback)


def _report(
    url: str,
    scheme: str,
    host: str,
    before: str,
    after: str,
    unicode_host: str,
    warnings: list[str],
    ok: bool,
    max_display: int,
) -> UrlReport:
    before, after = strip_controls(before), strip_controls(after)
    if len(before) + len(host) + len(after) > max_display:
        warnings = [*warnings, f"the link is very long ({len(url)} characters); it is shortened here"]
        if len(before) > 40:  # a long user name in front of the host hides where the link leads
            before = before[:24] + "…" + before[-12:]
        room = max(max_display - len(before) - len(host), 24)
        if len(after) > room:
            after = after[: room - 1] + "…"
    display = f"{before}{HOST_START}{host}{HOST_END}{after}" if host else before + after
    return UrlReport(url, scheme, host, display, warnings, ok, before, after, unicode_host or host)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]

"""URL-mode elicitation links (url_safety.py): where a link leads and what could mislead."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.approval.url_safety import HOST_END, HOST_START, MAX_DISPLAY, UrlReport, analyze_url


def warned(report: UrlReport, fragment: str) -> bool:
    return any(fragment in warning for warning in report.warnings)


@pytest.mark.parametrize(
    ("url", "host", "display"),
    [
        ("https://example.com/login?next=/", "example.com", "https://⟦example.com⟧/login?next=/"),
        ("https://example.com", "example.com", "https://⟦example.com⟧"),
        ("HTTPS://Accounts.Example.COM:8443/a#b", "accounts.example.com", "HTTPS://⟦accounts.example.com⟧:8443/a#b"),
        ("https://example.com./x", "example.com", "https://⟦example.com⟧./x"),
        ("http://localhost:8080/callback", "localhost", "http://⟦localhost⟧:8080/callback"),
        ("  https://example.com/  ", "example.com", "https://⟦example.com⟧/"),
    ],
)
def test_plain_links_are_ok_without_warnings(url: str, host: str, display: str) -> None:
    report = analyze_url(url)
    assert report.ok and report.warnings == []
    assert (report.scheme, report.host, report.display) == (url.strip().split(":")[0].lower(), host, display)
    assert report.url == url  # kept exactly
    assert report.display == report.before + HOST_START + report.host + HOST_END + report.after
    assert report.styled("<b>", "</b>") == f"{report.before}<b>{host}</b>{report.after}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("javascript:alert(document.cookie)", "'javascript:' link"),
        ("JavaScript:alert(1)", "'javascript:' link"),
        ("data:text/html,<script>alert(1)</script>", "'data:' link"),
        ("file:///etc/passwd", "'file:' link"),
        ("ftp://example.com/file", "'ftp:' link"),
        ("vbscript:msgbox", "'vbscript:' link"),
        ("example.com/login", "not a web link (no scheme)"),
        ("", "not a web link"),
    ],
)
def test_only_http_and_https(url: str, shown: str) -> None:
    report = analyze_url(url)
    assert not report.ok and report.host == ""
    assert warned(report, "only http and https links can be opened") and warned(report, shown)
    assert HOST_START not in report.display


@pytest.mark.parametrize("url", ["https:example.com", "https:///path", "https://", "https://user@/x"])
def test_no_host_is_not_ok(url: str) -> None:
    report = analyze_url(url)
    assert not report.ok and warned(report, "has no host") and report.host == ""


def test_punycode_host_is_shown_decoded_in_a_warning() -> None:
    report = analyze_url("https://xn--pple-43d.com/signin")
    assert report.ok  # a warning, not a refusal: the user decides
    assert report.host == "xn--pple-43d.com" and report.unicode_host == "\u0430pple.com"
    assert warned(report, "reads as '\u0430pple.com'")
    assert warned(report, "mixes Cyrillic and Latin letters")
    assert report.display == "https://⟦xn--pple-43d.com⟧/signin"


def test_unicode_host_is_shown_as_the_ascii_name_it_resolves_to() -> None:
    report = analyze_url("https://\u0430pple.com/")  # Cyrillic а, typed raw
    assert report.host == "xn--pple-43d.com" and "⟦xn--pple-43d.com⟧" in report.display
    assert warned(report, "international name") and warned(report, "mixes Cyrillic and Latin")


@pytest.mark.parametrize(
    ("url", "host", "reads_as"),
    [
        ("https://münchen.de/", "xn--mnchen-3ya.de", "münchen.de"),  # one script (Latin): no mixing warning
        ("https://例え.jp/", "xn--r8jz45g.jp", "例え.jp"),  # Han + Hiragana is normal Japanese
        ("https://ｇｏｏｇｌｅ.com/", "google.com", "ｇｏｏｇｌｅ.com"),  # full-width letters fold to ASCII
        ("https://пример.рф/", "xn--e1afmkfd.xn--p1ai", "пример.рф"),  # all Cyrillic
    ],
)
def test_single_script_international_names_warn_without_mixing(url: str, host: str, reads_as: str) -> None:
    report = analyze_url(url)
    assert report.ok and report.host == host
    assert warned(report, f"reads as '{reads_as}'") and not warned(report, "mixes")


@pytest.mark.parametrize(
    ("url", "scripts"),
    [
        ("https://p\u0430ypal.com", "Cyrillic and Latin"),
        ("https://xn--80ak6aa92e.com", None),  # "аррӏе" all Cyrillic: whole-script, no mixing
        ("https://g\u03bfogle.com", "Greek and Latin"),  # Greek omicron
    ],
)
def test_mixed_scripts(url: str, scripts: str | None) -> None:
    report = analyze_url(url)
    assert warned(report, "international name")
    if scripts is None:
        assert not warned(report, "mixes")
    else:
        assert warned(report, f"mixes {scripts} letters")


def test_invalid_punycode_is_not_ok() -> None:
    report = analyze_url("https://xn--zz.com/")
    assert not report.ok and warned(report, "not valid punycode")


@pytest.mark.parametrize(
    ("url", "userinfo", "host"),
    [
        ("https://good.com@evil.com/login", "good.com@", "evil.com"),
        ("https://accounts.google.com:pass@evil.example/", "accounts.google.com:pass@", "evil.example"),
        ("https://a@b@evil.com/", "a@b@", "evil.com"),
    ],
)
def test_userinfo_names_the_real_host(url: str, userinfo: str, host: str) -> None:
    report = analyze_url(url)
    assert report.ok and report.host == host
    assert warned(report, f"starts with '{userinfo}'") and warned(report, f"the real host is {host}")
    assert report.before.endswith(userinfo) and f"{HOST_START}{host}{HOST_END}" in report.display


def test_backslash_before_the_path_is_not_ok() -> None:
    # urllib says good.com; a browser reads '\' as '/' and goes to evil.com
    report = analyze_url("https://evil.com\\@good.com/")
    assert not report.ok and warned(report, "backslash")


@pytest.mark.parametrize(
    ("url", "host", "note"),
    [
        ("https://93.184.216.34/x", "93.184.216.34", "IP address 93.184.216.34, not"),
        ("http://192.168.1.1/admin", "192.168.1.1", "(a local or private address)"),
        ("http://127.0.0.1:9000/cb", "127.0.0.1", "(a local or private address)"),
        ("https://[2001:db8::1]:8443/x", "2001:db8::1", "IP address 2001:db8::1"),
        ("https://2130706433/", "2130706433", "is a number, which browsers read as an IP address"),
        ("https://0x7f.1/", "0x7f.1", "is a number"),
    ],
)
def test_ip_literal_hosts_warn(url: str, host: str, note: str) -> None:
    report = analyze_url(url)
    assert report.ok and report.host == host and warned(report, note)


def test_ipv6_brackets_stay_outside_the_host() -> None:
    report = analyze_url("https://[2001:db8::1]:8443/x")
    assert (report.before, report.after) == ("https://[", "]:8443/x")


def test_plain_http_warns_except_on_loopback() -> None:
    assert warned(analyze_url("http://example.com/"), "not encrypted")
    assert not warned(analyze_url("http://localhost/"), "not encrypted")
    assert not warned(analyze_url("http://[::1]/"), "not encrypted")


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/\x1b[31mred",
        "https://example.com/\x07",
        "https://exa\nmple.com/",
        "https://example.com/\tx",
        "https://exam\u200bple.com/",  # zero-width space
        "https://example.com/\u202egnp.exe",  # right-to-left override
        "https://example.com/\x9b2J",  # C1 CSI
        "\x00https://example.com/",
    ],
)
def test_control_and_invisible_characters_are_not_ok(url: str) -> None:
    report = analyze_url(url)
    assert not report.ok and warned(report, "control or invisible characters")
    for text in [report.display, *report.warnings]:
        assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or c in "\u200b\u202e" for c in text)
    assert report.url == url


@pytest.mark.parametrize(
    ("url", "warning"),
    [
        ("https://exa mple.com/", "not valid"),
        ("https://%65vil.com/", "not valid"),
        ("https://a..b.com/", "not valid"),
        ("https://example.com:99999/", "port is not valid"),
        ("https://example.com:http/", "port is not valid"),
        ("http://[::1/", "cannot be parsed"),
    ],
)
def test_malformed_hosts_and_ports_are_not_ok(url: str, warning: str) -> None:
    report = analyze_url(url)
    assert not report.ok and warned(report, warning)


def test_long_url_is_shortened_for_display_but_kept_whole() -> None:
    url = "https://login.example.com/oauth/authorize?" + "state=" + "x" * 1000
    report = analyze_url(url)
    assert report.ok and report.url == url and report.host == "login.example.com"
    assert len(report.display) <= MAX_DISPLAY + 2  # plus the two markers
    assert report.display.startswith("https://⟦login.example.com⟧/oauth/") and report.display.endswith("…")
    assert warned(report, f"very long ({len(url)} characters)")


def test_long_userinfo_cannot_push_the_host_out_of_sight() -> None:
    url = "https://accounts.google.com" + "/" * 0 + "-" * 500 + "@evil.com/" + "p" * 500
    report = analyze_url(url)
    assert report.host == "evil.com" and f"{HOST_START}evil.com{HOST_END}" in report.display
    assert report.display.index(HOST_START) < 50
    assert len(report.display) <= MAX_DISPLAY + 2


def test_display_limit_is_adjustable() -> None:
    report = analyze_url("https://example.com/" + "a" * 100, max_display=60)
    assert len(report.display) == 62 and report.display.endswith("a…")
    assert not analyze_url("https://example.com/" + "a" * 100).warnings

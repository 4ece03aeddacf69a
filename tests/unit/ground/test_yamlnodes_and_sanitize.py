"""Positioned YAML access (yamlnodes) and terminal-safe text (sanitize)."""

from __future__ import annotations

import pytest

from mcp_sampling_proxy.notation.yamlnodes import Node, PolicyError, load
from mcp_sampling_proxy.text.sanitize import one_line, strip_controls

# -- yamlnodes ------------------------------------------------------------------------------------


def root(text: str) -> Node:
    node = load(text, "f.yaml")
    assert node is not None
    return node


def error(call: object) -> str:
    with pytest.raises(PolicyError) as info:
        call()  # type: ignore[operator]
    return str(info.value)


def test_empty_document_is_none() -> None:
    assert load("", "f.yaml") is None
    assert load("# only a comment\n", "f.yaml") is None


def test_children_carry_dotted_paths_and_positions() -> None:
    top = root("a:\n  b:\n    - x\n    - {c: 1}\n")
    items = top.mapping()["a"].mapping()["b"].sequence()
    assert [item.path for item in items] == ["a.b[0]", "a.b[1]"]
    assert items[0].str() == "x"
    c = items[1].mapping(("c",))["c"]
    assert c.path == "a.b[1].c"
    assert error(lambda: c.str()) == "f.yaml:4:11: a.b[1].c must be a non-empty string, got 1"


def test_scalar_accessors_validate_types() -> None:
    m = root("s: ''\nb: yes\nn: 2.5\nt: true\ni: 3\nz: ~\n").mapping()
    assert error(m["s"].str) == "f.yaml:1:4: s must be a non-empty string, got ''"
    assert m["b"].bool() is True  # YAML 1.1 booleans, as the safe loader reads them
    assert m["n"].number(minimum=0, maximum=3) == 2.5
    assert error(lambda: m["n"].number(maximum=1)) == "f.yaml:3:4: n must be between -inf and 1, got 2.5"
    assert error(m["t"].number) == "f.yaml:4:4: t must be a number, got True"
    assert error(m["n"].int) == "f.yaml:3:4: n must be a whole number, got 2.5"
    assert error(lambda: m["i"].int(minimum=5)) == "f.yaml:5:4: i must be at least 5, got 3"
    assert error(m["z"].bool) == "f.yaml:6:4: z must be true or false, got nothing"
    assert error(lambda: m["i"].choice(("x", "y"))) == "f.yaml:5:4: i 3 is not one of x, y"


def test_strings_accepts_one_string_or_a_list() -> None:
    m = root("one: A\nmany: [A, B]\nbad: [A, 2]\n").mapping()
    assert m["one"].strings() == ["A"]
    assert m["many"].strings() == ["A", "B"]
    assert error(m["bad"].strings) == "f.yaml:3:10: bad[1] must be a non-empty string, got 2"


def test_mapping_keys_must_be_strings_and_known() -> None:
    assert error(lambda: root("1: x\n").mapping()) == (
        "f.yaml:1:1: keys in the top level of the policy must be strings, got 1"
    )
    assert error(lambda: root("a:\n  colour: red\n").mapping()["a"].mapping(("color", "size"))) == (
        "f.yaml:2:3: unknown key 'colour' in a (did you mean 'color'?); allowed: color, size"
    )
    assert error(lambda: root("a:\n  zzz: red\n").mapping()["a"].mapping(("color",))) == (
        "f.yaml:2:3: unknown key 'zzz' in a; allowed: color"
    )


def test_shape_errors() -> None:
    m = root("a: [1]\nb: {x: 1}\n").mapping()
    assert error(m["a"].mapping) == "f.yaml:1:4: a must be a mapping (key: value lines), got a list"
    assert error(m["b"].sequence) == "f.yaml:2:4: b must be a list (lines starting with '- '), got a mapping"
    assert error(lambda: root("just text\n").mapping()) == (
        "f.yaml:1:1: the top level of the policy must be a mapping (key: value lines), got 'just text'"
    )


def test_yaml_syntax_errors_have_positions() -> None:
    assert error(lambda: load("a: b: c\n", "f.yaml")).startswith("f.yaml:1:5: not valid YAML: ")
    assert error(lambda: load("a: 'unclosed\n", "f.yaml")).startswith("f.yaml:2:1: not valid YAML: ")
    assert error(lambda: load("a: *nope\n", "f.yaml")).startswith("f.yaml:1:4: not valid YAML: ")


def test_unsafe_tags_are_refused() -> None:
    node = root("a: !!python/object/apply:os.system ['true']\n").mapping()["a"]
    with pytest.raises(Exception) as info:
        node.value()
    assert "python/object/apply" in str(info.value)


# -- sanitize.strip_controls ----------------------------------------------------------------------

ESC = "\x1b"
BEL = "\x07"
ST = ESC + "\\"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        # CSI: colours, cursor movement, screen and line clearing, private modes
        (f"{ESC}[31mred{ESC}[0m plain", "red plain"),
        (f"{ESC}[1;38;2;255;0;0mtrue colour{ESC}[m", "true colour"),
        (f"a{ESC}[2Ab{ESC}[10;20Hc{ESC}[5D", "abc"),
        (f"{ESC}[2J{ESC}[Hscreen", "screen"),
        (f"line{ESC}[K{ESC}[1K", "line"),
        (f"{ESC}[?25lhidden cursor{ESC}[?25h", "hidden cursor"),
        (f"{ESC}[?1049h{ESC}[?1000h", ""),
        (f"{ESC}[1 qbar cursor", "bar cursor"),  # CSI with an intermediate byte
        # OSC: window title and hyperlinks, terminated by BEL or ST
        (f"{ESC}]0;pwned title{BEL}after", "after"),
        (f"{ESC}]2;title{ST}after", "after"),
        (f"{ESC}]8;;https://evil.example/{ST}click me{ESC}]8;;{ST}", "click me"),
        (f"{ESC}]8;;https://evil.example/{BEL}click{ESC}]8;;{BEL}!", "click!"),
        (f"{ESC}]52;c;ZWNobyBwd25lZA=={BEL}clipboard", "clipboard"),
        # DCS, SOS, PM, APC strings
        (f"a{ESC}Pq#0;2;0;0;0#0~~{ST}b", "ab"),
        (f"a{ESC}P$qm{ST}b", "ab"),
        (f"a{ESC}Xsos{ST}b{ESC}^pm{ST}c{ESC}_apc{ST}d", "abcd"),
        # 8-bit C1 forms
        ("\x9b31mred\x9b0m", "red"),
        ("a\x9d0;title\x9cb", "ab"),
        ("a\x90dcs\x9cb", "ab"),
        ("a\x85b\x8dc", "abc"),
        # other ESC sequences and a lone ESC
        (f"{ESC}cafter reset", "after reset"),
        (f"{ESC}7saved{ESC}8", "saved"),
        (f"{ESC}(Bcharset", "charset"),
        (f"trailing{ESC}", "trailing"),
        (f"{ESC}", ""),
        # C0 controls (but \n and \t), DEL
        ("a\x00b\x07c\x08d\x0be\x0cf\x1ag\x1fh\x7fi", "abcdefghi"),
        ("keep\ttabs\nand newlines\n", "keep\ttabs\nand newlines\n"),
        ("over\rwrite", "overwrite"),
        ("crlf\r\nline", "crlf\nline"),
        # bidi overrides and isolates (Trojan Source)
        ("access\u202e\u2066 level\u2069\u2066admin\u2069\u202c", "access leveladmin"),
        ("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069", ""),
        # other invisible format characters: zero-width space, soft hyphen, word joiner, BOM
        ("ad\u200bmin ap\u00adproved\u2060\ufeff", "admin approved"),
        # Unicode tag characters: invisible text riding along ("ASCII smuggling": here "APPROVE")
        ("ok" + "".join(chr(0xE0000 + ord(c)) for c in "APPROVE") + "\U000e007f", "ok"),
    ],
)
def test_strip_controls_removes_escapes_and_controls(raw: str, clean: str) -> None:
    assert strip_controls(raw) == clean


@pytest.mark.parametrize(
    "text",
    [
        "plain ASCII text, with punctuation: ()[]{};'\"!?~",
        "héllo wörld — “quotes” ‘single’ …",
        "日本語のテキスト 中文 한국어",
        "emoji 🙂 family 👨‍👩‍👧 flag 🇫🇷 skin 👍🏽",
        "עברית ومرحبا",  # right-to-left scripts without overrides are fine
        "combining e\u0301 and zero-width joiner \u200d",
        "math ∑ ∫ ≠ ≤ ∞, box ┌─┐ │ └─┘",
        "[31m is not an escape without ESC; 1;2H neither",
    ],
)
def test_strip_controls_keeps_plain_unicode(text: str) -> None:
    assert strip_controls(text) == text


def test_strip_controls_on_a_mixed_prompt() -> None:
    raw = f"{ESC}]0;Approved!{BEL}{ESC}[2J{ESC}[HSummarise this:\n\t{ESC}[8mhidden{ESC}[0m text\u202e with tricks\x00\n"
    assert strip_controls(raw) == "Summarise this:\n\thidden text with tricks\n"


# -- sanitize.one_line ----------------------------------------------------------------------------


def test_one_line_flattens_whitespace() -> None:
    assert one_line("  first\nsecond\t\tthird \r\n fourth  ") == "first second third fourth"
    assert one_line("") == ""
    assert one_line(f"{ESC}[31merror:{ESC}[0m\n  bad\x00 thing") == "error: bad thing"


def test_one_line_clips_with_an_ellipsis() -> None:
    assert one_line("x" * 200) == "x" * 200
    clipped = one_line("x" * 201)
    assert clipped == "x" * 199 + "…"
    assert len(clipped) == 200
    assert one_line("word " * 10, limit=12) == "word word w…"
    assert one_line("a b c", limit=5) == "a b c"


def test_unterminated_string_sequence_cannot_hide_the_following_lines() -> None:
    from mcp_sampling_proxy.text.sanitize import strip_controls

    assert strip_controls("ok\x1b]0;title never ends\nsecond line") == "ok\nsecond line"
    assert strip_controls("ok\x1bPdcs never ends\nvisible") == "ok\nvisible"

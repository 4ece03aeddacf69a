"""Make server-controlled text safe to show on a terminal.

A malicious prompt must not be able to move the cursor, recolour or redraw the screen, set
the window title or talk to the terminal in any other way, so every escape sequence and
control character is removed before text reaches a console (newlines and tabs survive), and
so is every invisible format character (Unicode category Cf: zero-width spaces, word joiner, BOM,
bidi marks and overrides, tag characters; ZWJ and ZWNJ stay), which can hide or reorder text. Text
that could be mistaken for the proxy's own lines is shown quoted (`quote`).
"""

from __future__ import annotations

import re
import unicodedata

# CSI (ESC [ ... final), OSC (ESC ] ... BEL/ST), DCS/SOS/PM/APC strings, other two-byte ESC
# sequences, and the 8-bit C1 forms of CSI/OSC/DCS.
_ESCAPES = re.compile(
    r"""
    (?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]            # CSI
    | (?:\x1b\]|\x9d).*?(?:\x07|\x1b\\|\x9c|(?=\n)|\Z)    # OSC ... BEL or ST (or end of line)
    | (?:\x1b[PX^_]|[\x90\x98\x9e\x9f]).*?(?:\x1b\\|\x9c|(?=\n)|\Z)  # DCS, SOS, PM, APC
    | \x1b[ -/]*[0-~]?                          # any other ESC sequence (or a lone ESC)
    """,
    re.VERBOSE,  # no DOTALL: an unterminated string sequence ends at the newline, hiding nothing after it
)
# C0 controls except \t and \n, DEL, C1 controls, and Unicode bidi overrides that can
# visually reorder text (Trojan Source).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


_LINE_BREAKS = re.compile("[\u2028\u2029]")  # line and paragraph separators: real line breaks
# ZWJ builds emoji sequences and ZWNJ is spelling in Persian and Indic scripts: shown as they are
_JOINERS = frozenset("\u200c\u200d")
QUOTE = "  \u2502 "  # "  │ ": every line of server text starts with it, so none looks like ours


def strip_controls(text: str) -> str:
    """Remove escape sequences, control and format characters; keep newlines and tabs."""
    if text.isascii() and text.isprintable():  # nothing to remove (the common case: a method, a name)
        return text
    text = _LINE_BREAKS.sub("\n", text.replace("\r\n", "\n"))
    text = _CONTROLS.sub("", _ESCAPES.sub("", text))
    if text.isascii():
        return text
    return "".join(c for c in text if c.isascii() or c in _JOINERS or unicodedata.category(c) != "Cf")


def terminal_line(text: str) -> str:
    """`strip_controls` on one line (line breaks become spaces), returning plain printable ASCII as it
    is: for text that reaches a terminal line by line (a server's stderr, log fields)."""
    if text.isascii() and text.isprintable():
        return text
    return strip_controls(text).replace("\n", " ")


def quote(text: str, prefix: str = QUOTE) -> str:
    """Server text as an indented block: sanitised, every line prefixed, so a newline in a prompt
    cannot start a line that looks like the proxy's own (a forged "Server ... asks" header)."""
    return "\n".join(prefix + line for line in strip_controls(text).split("\n"))


def one_line(text: str, limit: int = 200) -> str:
    """A sanitised single-line excerpt, for log fields and summaries."""
    flat = " ".join(strip_controls(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def folded(text: str) -> str:
    """`text` as detectors read it: NFKC-folded (fullwidth ｐａｓｓｗｏｒｄ is password, ligatures and
    compatibility forms are their letters) and without format characters (p\u200bassword is password)."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if c.isascii() or unicodedata.category(c) != "Cf")

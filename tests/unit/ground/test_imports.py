"""Imports sit at the top of a module; one inside a function says why on its line (CONTRIBUTING.md).

An import inside a function is for start-up cost only (a module the common path never needs, kept
off the proxy's start), and a reader must see that reason where the import is, or the next person
hoists it and slows every start, or copies it where nothing justifies it. So every import inside a
function or method (not under `if TYPE_CHECKING:`, which never runs) carries a comment on one of its
lines, or on a comment line directly above it or above the unbroken run of imports it ends. A bare
pragma (`# noqa: F401`) is not a reason.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import mcp_sampling_proxy

PACKAGE = Path(mcp_sampling_proxy.__file__).parent
ROOT = PACKAGE.parent
PRAGMA = re.compile(r"(noqa|type:\s*ignore|pragma)\b")


def _comments(source: str) -> dict[int, str]:
    """Line number -> the text of the comment on that line, pragmas taken out."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            parts = [part.strip() for part in token.string.split("#")]
            text = " ".join(part for part in parts if not PRAGMA.match(part)).strip()
            if re.search(r"[A-Za-z]{2}", text):
                found[token.start[0]] = text
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_in_functions(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, list[ast.stmt]]]:
    """Each import inside a function (outside `if TYPE_CHECKING:`), with the statement list holding it."""
    found: list[tuple[ast.Import | ast.ImportFrom, list[ast.stmt]]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            if field == "body" and isinstance(node, ast.If) and _is_type_checking(node):
                continue  # never runs
            for child in block:
                if isinstance(child, ast.Import | ast.ImportFrom):
                    if in_function:
                        found.append((child, block))
                else:
                    visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, False)
    return found


def unexplained(source: str, name: str) -> list[str]:
    """NAME:LINE of every import inside a function that does not say why it is there."""
    comments = _comments(source)
    lines = source.splitlines()
    missing: list[str] = []
    for node, block in _imports_in_functions(ast.parse(source)):
        end = node.end_lineno or node.lineno
        if any(line in comments for line in range(node.lineno, end + 1)):
            continue
        # a comment line directly above it, or above an import of the unbroken run it ends
        index, said = block.index(node), False
        while not said and index >= 0 and isinstance(block[index], ast.Import | ast.ImportFrom):
            above = block[index].lineno - 1
            said = above in comments and lines[above - 1].lstrip().startswith("#")
            index -= 1
        if said:
            continue
        missing.append(f"{name}:{node.lineno}")
    return missing


def test_every_import_inside_a_function_says_why() -> None:
    missing: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        missing += unexplained(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not missing, (
        "imports inside functions without a comment saying why (hoist them to the top of the module, or,"
        " if start-up cost is the reason, say so on the line, e.g. `# start-up: jsonschema costs 40 ms and"
        " only forms need it`):\n  " + "\n  ".join(missing)
    )


# -- the check itself -------------------------------------------------------------------------------


def test_an_import_in_a_function_without_a_comment_is_named_by_line() -> None:
    source = "import os\n\n\ndef f():\n    import json\n\n    return json, os\n"
    assert unexplained(source, "m.py") == ["m.py:5"]


def test_a_comment_on_the_line_or_the_one_above_says_why() -> None:
    source = (
        "def f():\n"
        "    import json  # start-up: only f needs it\n"
        "    # start-up: only f needs them\n"
        "    import csv\n"
        "    import gzip\n"
        "    return json, csv, gzip\n"
    )
    assert unexplained(source, "m.py") == []


def test_a_pragma_or_a_distant_comment_is_no_reason() -> None:
    source = (
        "class C:\n"
        "    def m(self):\n"
        "        import json  # noqa: F401\n"
        "        # a comment about something else\n"
        "\n"
        "        import csv\n"
        "        x = 1  # a comment on the statement before\n"
        "        import gzip\n"
        "        return csv, gzip, x\n"
    )
    assert unexplained(source, "m.py") == ["m.py:3", "m.py:6", "m.py:8"]


def test_type_checking_blocks_and_module_level_imports_are_left_alone() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    import csv\n"
        "\n"
        "\n"
        "def f():\n"
        "    if TYPE_CHECKING:\n"
        "        import gzip\n"
        "    else:\n"
        "        import zlib\n"
        "    try:\n"
        "        import bz2\n"
        "    except ImportError:\n"
        "        import lzma\n"
        "    return json, zlib, bz2, lzma\n"
    )
    assert unexplained(source, "m.py") == ["m.py:11", "m.py:13", "m.py:15"]

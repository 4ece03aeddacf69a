"""The docs site as a reader sees it: built with `mkdocs build --strict` and opened in a real headless
Chromium. The build is strict (a broken link fails it) and its command-line reference is the parsers' own
help. No code block is cut off by the content column (a long command wraps, its wrapped part indented,
rather than hiding past the edge), no copy button covers a block's text, and the diagrams are drawn by
Mermaid rather than typed as ASCII art.

Material loads Mermaid in the reader's browser from unpkg.com; this machine has no network, so the
diagrams test hands the browser the npm package mermaid from the CI cache (.ci/run installs it) in its
place, and the test skips its diagrams without it (after the code blocks are checked)."""

from __future__ import annotations

import functools
import html
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.npm_support import package_file
from helpers.support import ROOT

from mcp_sampling_proxy.commands import reference

MKDOCS = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(MKDOCS is None, reason="mkdocs is not installed (pip install -e '.[test]')")

WIDTH = 1280  # a laptop's window: the site shows the navigation on the left and the contents on the right
DIAGRAMS = {"": 1, "guides/scale/": 1, "architecture/": 1}  # page -> how many drawings it holds
ASCII_ART = re.compile(r"[┌└┐┘┼▶▼◀▲]|──")  # box corners, lines and arrow heads drawn with characters

# each code block's text lines that run past its visible width, or under its copy button
CUT_OR_COVERED = """() => {
  const found = [];
  for (const pre of document.querySelectorAll('.md-content pre')) {
    const code = pre.querySelector(':scope > code');
    if (!code) continue;
    const head = code.textContent.split('\\n')[0].slice(0, 50);
    const [scroll, client] = [code.scrollWidth, code.clientWidth];
    if (scroll > client + 1) found.push(`cut off (${scroll} > ${client}): ${head}`);
    const button = pre.querySelector('.md-clipboard');
    if (!button) continue;
    const b = button.getBoundingClientRect();
    const range = document.createRange();
    range.selectNodeContents(code);
    for (const r of range.getClientRects()) {
      if (r.width && r.right > b.left && r.left < b.right && r.bottom > b.top && r.top < b.bottom) {
        found.push(`under the copy button: ${head}`);
        break;
      }
    }
  }
  return found;
}"""


def nav_pages() -> list[str]:
    """Every page of mkdocs.yml's nav, as its path on the built site."""

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)  # our own file
    return ["" if page == "index.md" else page.removesuffix(".md") + "/" for page in walk(config["nav"])]


class _Loader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (`!!python/name:`); read as text here, for the nav alone."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """The site built as CI builds it (`--strict`: a broken link or a warning fails the build): its directory."""
    assert MKDOCS is not None
    built = tmp_path / "site"
    done = subprocess.run(
        [MKDOCS, "build", "--strict", "--quiet", "--site-dir", str(built)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    return built


@pytest.fixture
def site(built: Path) -> Iterator[str]:
    """The built site served on 127.0.0.1: its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def open_site(browser: Any, mermaid: bytes | None) -> Any:
    """A page whose requests to unpkg.com get the local Mermaid (or are refused: no network here)."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})

    def unpkg(route: Any) -> None:
        if mermaid is None:
            route.abort()
        else:
            route.fulfill(body=mermaid, content_type="text/javascript")

    page.route("https://unpkg.com/**", unpkg)
    return page


def cli_reference_is_the_parsers_help(built: Path) -> None:
    """The command-line reference is the parsers' own help, every command's, generated at build time."""
    assert (built / "security" / "index.html").exists()
    cli_page = html.unescape((built / "reference" / "cli" / "index.html").read_text())
    for command in reference.commands():
        assert reference.help_text(command.parser).splitlines()[0] in cli_page, command.line
    assert "<!-- generated:" not in cli_page
    # the builder's own directories stay out of it: init's default path is the documented one
    assert "default path: ~/.config/mcp-sampling-proxy/policy.yaml" in cli_page
    assert os.environ["XDG_CONFIG_HOME"] not in cli_page and f"{Path.home()}/" not in cli_page
    for variable in reference.ENVIRONMENT:
        assert f"<code>{variable.name}</code>" in cli_page


def test_the_site_builds_and_no_code_block_is_cut_off_and_the_diagrams_are_drawn(
    built: Path, site: str, request: pytest.FixtureRequest
) -> None:
    """One test, so the site is built and Chromium started once (two tests on two workers did both twice).
    The build and its command-line reference are checked before Chromium is asked for (it skips where
    there is none)."""
    cli_reference_is_the_parsers_help(built)
    browser = request.getfixturevalue("browser")
    page = open_site(browser, None)
    problems = []
    pages = nav_pages()
    assert "guides/serve/" in pages and "" in pages
    for path in pages:
        page.goto(site + path)
        page.locator(".md-content").wait_for()
        problems += [f"{path or 'index'}: {found}" for found in page.evaluate(CUT_OR_COVERED)]
    assert problems == [], "\n".join(problems)

    typed = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "docs").rglob("*.md"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ASCII_ART.search(line)
    ]
    assert typed == [], "ASCII-art diagrams left in the docs (write them as ```mermaid blocks):\n" + "\n".join(typed)
    mermaid = Path(package_file("mermaid", "dist/mermaid.min.js")).read_bytes()  # skips without it
    page = open_site(browser, mermaid)
    for path, count in DIAGRAMS.items():
        page.goto(site + path)
        drawn = page.locator("div.mermaid")  # Material replaces each ```mermaid block with its drawing
        drawn.nth(count - 1).wait_for(timeout=20000)
        assert drawn.count() == count, path
        assert page.locator("pre.mermaid").count() == 0, f"{path}: a diagram was left as text"
        for index in range(count):
            box = drawn.nth(index).bounding_box()
            assert box is not None and box["height"] > 100 and box["width"] > 200, (path, box)
            # the drawing fits the column: nothing of it is cut off past the content's edge
            column = page.locator("article.md-content__inner").bounding_box()
            assert column is not None and box["x"] + box["width"] <= column["x"] + column["width"] + 1, (path, box)
        assert page.locator(".mermaid .md-clipboard, .mermaid + .md-clipboard").count() == 0

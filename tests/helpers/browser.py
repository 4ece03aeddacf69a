"""The system's Chromium as a pytest fixture (`browser`), for the tests that drive the web console."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser() -> Iterator[Any]:
    """The system's Chromium (never a browser Playwright downloads), headless; skips where there is none."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH: install the Debian package (apt-get install -y chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright  # start-up: only the browser tests need Playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()

"""The README is a front page and the docs hold no development history (that is for commit bodies and
CHANGELOG.md); the docs site builds with every link resolved."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

USER_DOCS = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for heading in ("## Install", "## Quickstart", "## A host config entry", "## Documentation"):
        assert heading in text


@pytest.mark.parametrize("path", USER_DOCS, ids=[str(p.relative_to(ROOT)) for p in USER_DOCS])
def test_user_docs_hold_no_development_history(path: Path) -> None:
    text = path.read_text()
    found = re.findall(r"(?i)\bissue #\d+|\(#\d+\)|\bin git history\b", text)
    assert found == [], f"{path}: {found}"


@pytest.mark.skipif(
    shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None, reason="mkdocs is not installed"
)
def test_the_docs_site_builds_with_every_link_resolved(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "security" / "index.html").exists()

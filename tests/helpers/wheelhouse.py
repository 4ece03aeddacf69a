"""What the install test's wheels are made for: the requirements `pip install .` resolves, and nothing else.

`.ci/run` downloads those wheels into its cache and writes this key beside them; `tests/e2e/test_install_paths.py`
installs from them only when the key still matches. Keyed on the project's dependencies and the build
backend's requirements, not the whole pyproject.toml: an edit to a tool's settings there (pytest's, ruff's)
leaves the wheels as good as they were.

    python3 tests/helpers/wheelhouse.py pyproject.toml                   # prints the key
    python3 tests/helpers/wheelhouse.py --build-requires pyproject.toml  # the build backend's requirements
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path

KEY_FILE = ".requirements-sha256"


def _requirements(pyproject: Path) -> dict[str, list[str]]:
    """The project's dependencies and the build backend's requirements (pip fetches those to build it)."""
    data = tomllib.loads(pyproject.read_text())
    return {
        "dependencies": data.get("project", {}).get("dependencies", []),
        "build-system": data.get("build-system", {}).get("requires", []),
    }


def build_requires(pyproject: Path) -> list[str]:
    """`[build-system] requires`: what `.ci/run` downloads besides the dependencies."""
    return _requirements(pyproject)["build-system"]


def requirements_key(pyproject: Path) -> str:
    """A sha256 of the requirements `pip install .` of this pyproject.toml resolves."""
    return hashlib.sha256(json.dumps(_requirements(pyproject), sort_keys=True).encode()).hexdigest()


def matching(folder: Path, pyproject: Path) -> Path | None:
    """`folder` when it holds the wheels made for this pyproject.toml's requirements, else None."""
    made_for = folder / KEY_FILE
    if made_for.is_file() and made_for.read_text().strip() == requirements_key(pyproject):
        return folder
    return None


if __name__ == "__main__":
    if sys.argv[1] == "--build-requires":
        print("\n".join(build_requires(Path(sys.argv[2]))))
    else:
        print(requirements_key(Path(sys.argv[1])))

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


def build_requires(pyproject: Path) -> list[str]:
    """The build backend's requirements (`[build-system] requires`): pip fetches them to build the package."""
    requires: list[str] = tomllib.loads(pyproject.read_text()).get("build-system", {}).get("requires", [])
    return requires


def requirements_key(pyproject: Path) -> str:
    """A sha256 of the requirements `pip install .` of this pyproject.toml resolves."""
    dependencies = tomllib.loads(pyproject.read_text()).get("project", {}).get("dependencies", [])
    wanted = {"dependencies": dependencies, "build-system": build_requires(pyproject)}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()


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

"""The package's front page stays short: a reader who opens `mcp_sampling_proxy/` sees the wings (folders)
and a few modules that wire them, not the utilities beneath them (CONTRIBUTING.md, the layers)."""

from __future__ import annotations

from pathlib import Path

import mcp_sampling_proxy

PACKAGE = Path(mcp_sampling_proxy.__file__).parent
MAX_ROOT_MODULES = 8


def test_the_package_root_holds_at_most_eight_modules() -> None:
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= MAX_ROOT_MODULES, (
        f"{len(modules)} modules at the package root ({', '.join(modules)}): put a new one in the package of "
        f"its wing or of its layer (text/, system/, notation/ for the ground)"
    )

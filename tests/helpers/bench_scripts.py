"""The scripts of bench/ as modules, for the tests that render their tables from the JSON they print.

They are scripts, not a package: each is loaded from its file, with bench/ on `sys.path` (where running
`python bench/NAME.py` puts it) so the modules they share (procstat.py) import as they do there.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from helpers.support import ROOT

BENCH = ROOT / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py, loaded once and registered under NAME (its dataclasses look themselves up there)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

"""Which event loop the proxy's processes run on: uvloop when it is installed, else asyncio's own.

uvloop cuts the event loop's cost per message, which is most of what the relay adds. The choice sits
here, below everything that runs a loop (the proxy, `serve`, `console --web`), so that asking costs
no more than looking for the module.
"""

from __future__ import annotations

import importlib.util
import os

NO_UVLOOP_ENV = "MCP_SAMPLING_PROXY_NO_UVLOOP"  # set: asyncio's own loop even with uvloop


def has_uvloop() -> bool:
    """Whether to run on uvloop: installed, and not turned off by $MCP_SAMPLING_PROXY_NO_UVLOOP."""
    if os.environ.get(NO_UVLOOP_ENV):
        return False
    return importlib.util.find_spec("uvloop") is not None

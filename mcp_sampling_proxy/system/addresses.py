"""Whether a host name or address stays on this machine.

One answer for every place that asks: plain http to a webhook or an external check is allowed only
to loopback, `serve` needs no token and checks `Host` against DNS rebinding there, and an OAuth
resource may be plain http only there.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for `localhost` (any case) and every loopback address: all of 127.0.0.0/8, and ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

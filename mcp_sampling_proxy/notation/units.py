"""Sizes and durations as the policy file and the command line write them: `512KiB`, `16MB`, `90s`, `1d`."""

from __future__ import annotations

import math
import re

from mcp_sampling_proxy.notation.vocabulary import GiB, KiB, MiB

_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": KiB, "mib": MiB, "gib": GiB}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)
SIZE_FORMS = "a number of bytes or a string such as 512KiB, 1MiB, 16MB (units B, KB, MB, GB, KiB, MiB, GiB)"

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*")
DURATION_FORMS = "a number of seconds or a string such as 30s, 90s, 1m, 2h, 1d (units s, m, h, d)"


def parse_size(value: object) -> int:
    """Bytes from an integer or a string such as '512KiB', '1MiB', '16MB'; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str):
        found = _SIZE_RE.fullmatch(value)
        if found and found.group(2).lower() in _SIZE_UNITS:
            return int(float(found.group(1)) * _SIZE_UNITS[found.group(2).lower()])
        if value.strip().startswith("-"):
            raise ValueError("a size cannot be negative")
    raise ValueError("not a size")


def parse_duration(value: object) -> float:
    """Seconds from a positive number or a string such as '30s', '1m', '2h', '1d'; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("not a duration")
    seconds: float | None = None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION_RE.fullmatch(value)):
        seconds = float(found.group(1)) * _DURATION_UNITS[found.group(2)]
    if seconds is None or not math.isfinite(seconds):
        raise ValueError("not a duration")
    if seconds <= 0:
        raise ValueError("a duration must be longer than 0 seconds")
    return seconds

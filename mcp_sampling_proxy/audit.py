"""Audit records: one JSON line per sampling decision, in a file of its own.

This is the seam the full audit log (hash chain, content modes, verify) builds on. Records
never hold API keys: they are built from request facts, never from configuration secrets.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any


class AuditLog:
    """Appends records with O_APPEND, one write per record, file created 0600."""

    def __init__(self, path: str | None):
        self.path = path
        self.proxy_id = uuid.uuid4().hex[:12]
        self._seq = 0
        self._fd: int | None = None
        if path:
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def record(self, **fields: Any) -> None:
        if self._fd is None:
            return
        self._seq += 1
        entry = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "seq": self._seq,
            "proxy_id": self.proxy_id,
            **fields,
        }
        os.write(self._fd, (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode("utf-8"))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)

"""`audit tail -f` as a user runs it, a process: it follows the log across a rotation and ends on Ctrl-C
with status 0. `audit tail` itself, in process: tests/unit/commands/test_audit_cli.py."""

from __future__ import annotations

import signal
from pathlib import Path

from helpers.audit_logs import tail_follow

from mcp_sampling_proxy.audit.recorder import AuditLog


def test_tail_follow_prints_new_records_across_rotation(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False, max_bytes=3000)
    log.record(server="before", decision="allow")
    proc, lines = tail_follow(path)
    try:
        assert "before" in lines.get(timeout=15)
        for index in range(8):  # about 500 bytes each: rotates at least once
            log.record(server=f"after-{index}", decision="allow")
        servers: list[str] = []
        while len(servers) < 8:
            line = lines.get(timeout=15)
            if "after-" in line:
                servers.append(line)
        assert [s.split()[1] for s in servers] == [f"after-{i}" for i in range(8)]
        assert Path(f"{path}.1").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0

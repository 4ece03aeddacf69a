"""A foreign tail on the audit log, in bounded memory: whoever runs as the user (the governed server too)
can append to the log, hundreds of MB if they like. The next writer seals what they wrote without holding
it, `audit verify` checks the seal without holding it, and `audit tail -f` passes over a runaway line.

Each is measured as a process of its own (its peak resident memory, VmHWM), so the writer, `verify` and
`tail -f` run as commands here; the chain's seals and `verify`'s verdicts are in tests/unit/audit/.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from helpers.audit_logs import PARAMS, lines_of, tail_follow, write_log
from helpers.support import PY

from mcp_sampling_proxy.audit.recorder import AuditLog

# Writes one record to the log at argv[1] (reading back and sealing whatever is at its end), or with
# argv[2] == "verify" runs `audit verify` on it; prints the process's peak RSS in MB last on stderr.
_PEAK_SCRIPT = """
import sys
from mcp_sampling_proxy import log as logging_setup
from mcp_sampling_proxy.audit.recorder import AuditLog
logging_setup.configure("info", "json")
from mcp_sampling_proxy.commands import audit
if sys.argv[2:] == ["verify"]:
    code = audit.main(["verify", sys.argv[1]])
else:
    log = AuditLog(sys.argv[1], fsync=False, max_bytes=0)  # never rotated for its size here
    log.record(server="after", decision="allow")
    log.close()
    code = 0
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(peak_kb // 1024, file=sys.stderr)  # VmHWM, not ru_maxrss: that one keeps the forking parent's peak
sys.exit(code)
"""


def run_peak(path: Path, *extra: str) -> tuple[int, str, str, int]:
    """(exit code, stdout, stderr without the last line, peak RSS in MB) of _PEAK_SCRIPT on `path`."""
    proc = subprocess.run([PY, "-c", _PEAK_SCRIPT, str(path), *extra], capture_output=True, text=True, timeout=300)
    *err, peak = proc.stderr.rstrip("\n").split("\n")
    return proc.returncode, proc.stdout, "\n".join(err), int(peak)


def test_a_huge_foreign_tail_is_sealed_and_verified_in_bounded_memory(tmp_path: Path) -> None:
    """200 MB appended to the log by another program (many short lines, then one line without an end):
    the next record seals it without holding it (the tail used to be read whole, twice), and `audit
    verify` checks the seal without holding the long line either (it used to read it whole and parse it)."""
    path = tmp_path / "audit.jsonl"
    write_log(path, 3).close()
    junk_lines = b"x\n" * 100_000
    long_line = 200 * 1024 * 1024
    with open(path, "ab") as f:
        f.write(junk_lines)
        for _ in range(long_line // (8 * 1024 * 1024)):
            f.write(b"y" * (8 * 1024 * 1024))
    code, _, err, peak = run_peak(path)
    assert code == 0, err
    assert peak < 120, f"sealing a {long_line // 2**20} MB foreign tail took {peak} MB"
    records = [json.loads(line) for line in lines_of(path)[-2:]]
    seal, after = records
    assert seal["event"] == "seal" and seal["torn_bytes"] == len(junk_lines) + long_line + 1  # + the newline added
    assert seal["newline_added"] is True and "not chained records" in seal["reason"]
    assert after["server"] == "after" and after["prev_hash"] == seal["hash"]

    code, out, err, peak = run_peak(path, "verify")
    assert code == 0, err
    assert f"line 4-100004: {seal['torn_bytes']} bytes that are not records" in out and "sealed by line 100005" in out
    assert peak < 120, f"verify held {peak} MB"


def test_a_long_line_that_starts_like_a_record_is_not_read_whole(tmp_path: Path) -> None:
    """100 MB that start with '{' but do not end as every record does (`"hash":"..."}`): the next
    writer seals them without reading them whole (it read and parsed them: ~300 MB). A long record
    of the proxy's own (a full-content one) is still found behind a torn tail."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False, content="full")
    big = {**PARAMS, "messages": [{"role": "user", "content": {"type": "text", "text": "w" * 300_000}}]}
    log.record(params=big, server="srv", decision="allow")
    log.close()
    long_record = json.loads(lines_of(path)[-1])
    with open(path, "ab") as f:
        f.write(b'{"torn":"')  # a write cut short
    AuditLog(str(path), fsync=False, max_bytes=0).close()  # the start seals the torn tail
    seal = json.loads(lines_of(path)[-1])
    assert seal["event"] == "seal" and seal["prev_hash"] == long_record["hash"]

    junk = 100 * 1024 * 1024
    with open(path, "ab") as f:
        f.write(b'{"x":"')
        for _ in range(junk // (4 * 1024 * 1024)):
            f.write(b"y" * (4 * 1024 * 1024))
        f.write(b'"}\n')
    code, _, err, peak = run_peak(path)
    assert code == 0, err
    assert peak < 120, f"sealing a {junk // 2**20} MB line that starts like a record took {peak} MB"
    seal, after = (json.loads(line) for line in lines_of(path)[-2:])
    assert seal["event"] == "seal" and seal["torn_bytes"] == junk + 9 and after["prev_hash"] == seal["hash"]


def test_tail_follow_skips_a_runaway_line_with_bounded_memory(tmp_path: Path) -> None:
    """Anyone running as the user (the governed server too) can append to the log: 100 MB without
    a newline must not make `audit tail -f` hold 100 MB. It reports the line by its size and goes
    on with the records after it."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False)
    log.record(server="before", decision="allow")
    proc, lines = tail_follow(path, "--json")
    junk = 100 * 1024 * 1024
    try:
        assert "before" in lines.get(timeout=15)
        with open(path, "ab") as f:
            for _ in range(junk // (4 * 1024 * 1024)):
                f.write(b"x" * (4 * 1024 * 1024))
                f.flush()
            f.write(b"\n")
        log.record(server="after", decision="allow")
        assert json.loads(lines.get(timeout=30)) == {"unreadable_line_bytes": junk + 1}
        seal = json.loads(lines.get(timeout=15))  # the writer sealed the foreign bytes before its record
        assert seal["event"] == "seal" and seal["torn_bytes"] == junk + 1
        assert json.loads(lines.get(timeout=15))["server"] == "after"
        peak_kb = next(
            int(line.split()[1])
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith("VmHWM:")
        )
        assert peak_kb < 100 * 1024, f"tail -f held {peak_kb // 1024} MB for a {junk // 2**20} MB line"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0

"""`audit summary` numbers against a known run, and `audit tail` (escapes stripped, -n, --json), in process;
the follower `audit tail -f` and the web console read with. `audit tail -f` as a command, across rotation:
tests/e2e/test_audit_tail_follow.py; on a runaway line, in bounded memory: tests/security/test_audit_foreign_tail.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pytest

from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.commands import audit as audit_cmd


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what the writers logged
    code = audit_cmd.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def known_run(path: Path) -> None:
    log = AuditLog(str(path), fsync=False)

    def rec(server: str, request_id: int, decision: Any, **fields: Any) -> None:
        log.record(server=server, request_id=request_id, decision=decision, method="sampling/createMessage", **fields)

    def fulfilled(
        server: str, request_id: int, tokens_in: int, tokens_out: int, latency: int, decision: str = "allow"
    ) -> None:
        rec(
            server,
            request_id,
            decision,
            provider="p",
            model="m",
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            latency_ms=latency,
            stop_reason="endTurn",
        )

    fulfilled("alpha", 1, 10, 2, 100)
    fulfilled("alpha", 2, 20, 4, 300)
    fulfilled("alpha", 3, 30, 6, 200)
    rec("alpha", 4, "deny", rule="no", reason="denied by rule")
    rec("alpha", 5, "allow", provider="p", model="m", error="provider 'p' answered 500", latency_ms=50)
    fulfilled("alpha", 6, 5, 1, 400)  # ... and then its answer is rejected on review:
    rec("alpha", 6, "rejected", approver="console", reason="the LLM's answer was not approved")
    rec("beta", 1, "timeout", approver=None, reason="nobody answered")
    fulfilled("beta", 2, 7, 3, 1000, decision="approved")


# a log without tool decisions or sampling checks' refusals (test_audit_summary_governance.py has them)
NOTHING_GOVERNED = {
    "tools": {"calls_allowed": 0, "calls_denied": 0, "calls_held": 0, "hidden": 0, "changes": 0},
    "refused": {"unsolicited": 0, "max_per_call": 0, "checks": 0, "secrets": 0},
    "secrets_found": 0,
}


def test_summary_numbers_of_a_known_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    known_run(path)
    code, out, _ = run(capsys, "summary", "--json", str(path))
    assert code == 0
    data = json.loads(out)
    assert data["servers"] == {
        "alpha": {
            "requests": 6,
            "allowed": 3,
            "denied": 2,
            "errors": 1,
            "input_tokens": 65,
            "output_tokens": 13,
            "cost_usd": 0.0,
            "unpriced": 0,
            "p50_latency_ms": 250,
            **NOTHING_GOVERNED,
        },
        "beta": {
            "requests": 2,
            "allowed": 1,
            "denied": 1,
            "errors": 0,
            "input_tokens": 7,
            "output_tokens": 3,
            "cost_usd": 0.0,
            "unpriced": 0,
            "p50_latency_ms": 1000,
            **NOTHING_GOVERNED,
        },
    }
    assert data["total"] == {
        "requests": 8,
        "allowed": 4,
        "denied": 3,
        "errors": 1,
        "input_tokens": 72,
        "output_tokens": 16,
        "cost_usd": 0.0,
        "unpriced": 0,
        "p50_latency_ms": 300,
        **NOTHING_GOVERNED,
    }
    code, out, _ = run(capsys, "summary", str(path))
    assert code == 0
    assert out.splitlines() == [
        "server  requests  allowed  denied  errors  tokens in  tokens out  p50 latency",
        "alpha          6        3       2       1         65          13       250 ms",
        "beta           2        1       1       0          7           3      1000 ms",
        "total          8        4       3       1         72          16       300 ms",
    ]


def test_summary_since_and_several_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recent = tmp_path / "audit.jsonl"
    known_run(recent)
    old = tmp_path / "old.jsonl"
    old.write_text(
        json.dumps(
            {
                "ts": "2020-01-01T00:00:00.000Z",
                "event": "decision",
                "server": "alpha",
                "decision": "allow",
                "request_id": 99,
                "input_tokens": 1000,
                "output_tokens": 1000,
                "latency_ms": 5,
                "provider": "p",
                "error": None,
            }
        )
        + "\n"
    )
    code, out, _ = run(capsys, "summary", "--json", str(old), str(recent))
    assert json.loads(out)["servers"]["alpha"]["requests"] == 7
    code, out, _ = run(capsys, "summary", "--json", "--since", "1d", str(old), str(recent))
    assert json.loads(out)["servers"]["alpha"]["input_tokens"] == 65
    code, out, _ = run(capsys, "summary", "--json", "--since", "2019-12-31T00:00:00Z", str(old))
    assert json.loads(out)["total"]["requests"] == 1
    code, _, err = run(capsys, "summary", "--since", "yesterday", str(old))
    assert code == 2
    assert "--since 'yesterday' is neither a duration" in err
    code, _, err = run(capsys, "summary", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "no such file" in err


def test_tail_prints_the_last_records_without_escape_sequences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    known_run(path)
    AuditLog(str(path), fsync=False).record(
        server="\x1b]0;pwned\x07evil\x1b[31m-server",
        tool="t\x1b[2Jool",
        decision="deny",
        rule="r",
        reason="bad\x1b[1A\rwords\u202e",
    )
    code, out, _ = run(capsys, "tail", "-n", "3", str(path))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3
    assert "beta" in lines[0] and "timeout" in lines[0] and "reason: nobody answered" in lines[0]
    assert "beta  approved (rule" not in lines[1]
    assert "approved" in lines[1] and "p/m" in lines[1] and "7+3 tokens" in lines[1] and "1000 ms" in lines[1]
    assert "evil-server" in lines[2] and "tool=tool" in lines[2] and "deny (rule r)" in lines[2]
    assert "reason: badwords" in lines[2]
    assert not any(ch in out for ch in "\x1b\x07\r\u202e")


def test_tail_json_is_one_escaped_json_object_per_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    known_run(path)
    AuditLog(str(path), fsync=False).record(server="\x1b[31mred\u202e", decision="deny")
    code, out, _ = run(capsys, "tail", "--json", "-n", "100", str(path))
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 10  # the 9 decisions of the known run, and the last record
    assert records[-1]["server"] == "\x1b[31mred\u202e"
    assert out.isascii() and "\x1b" not in out


def test_tail_shows_seals_and_unreadable_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    known_run(path)
    with open(path, "ab") as f:
        f.write(b'{"torn')
    AuditLog(str(path), fsync=False).record(server="s", decision="allow")
    _code, out, _ = run(capsys, "tail", "-n", "100", str(path))
    lines = out.splitlines()
    assert "alpha" in lines[0] and "allow" in lines[0] and "10+2 tokens" in lines[0] and "100 ms" in lines[0]
    assert "?? a line that is not a record" in lines[-3]
    assert "-- seal: 7 bytes after the last record sealed" in lines[-2]


def test_the_web_consoles_reader_starts_at_the_end_and_skips_a_runaway_line(tmp_path: Path) -> None:
    """The web console shows the last records and follows the file through audit/follow.py: it
    starts from the end (not by reading the whole file) and passes over a line too long to keep."""
    from mcp_sampling_proxy.audit.follow import Follower

    path = tmp_path / "audit.jsonl"
    lines = [json.dumps({"n": i}).encode() + b"\n" for i in range(50_000)]
    path.write_bytes(b"".join(lines))
    follower = Follower(str(path), last=20_000, max_line=1024 * 1024)
    first = follower.read()
    head, last = cast(bytes, first[0]), cast(bytes, first[-1])  # complete lines, not sizes of skipped ones
    assert len(first) == 20_000 and json.loads(head) == {"n": 30_000} and json.loads(last) == {"n": 49_999}
    with open(path, "ab") as f:
        f.write(b"y" * (3 * 1024 * 1024))  # no newline yet: held back, then skipped, never gathered whole
    assert follower.read() == []
    with open(path, "ab") as f:
        f.write(b"\n" + json.dumps({"n": "after"}).encode() + b"\n")
    assert follower.read() == [3 * 1024 * 1024 + 1, b'{"n": "after"}\n']
    follower.close()


def test_the_follower_survives_a_path_it_cannot_open_and_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    """The log's path is briefly something else (rotated, then a directory in its place): the read
    fails, and the next read after the file is back follows it again (it stayed on the closed file
    and failed for good). A FIFO at the path is refused at once instead of blocking the open."""
    from mcp_sampling_proxy.audit.follow import Follower
    from mcp_sampling_proxy.system.shared_files import NotARegularFile

    path = tmp_path / "audit.jsonl"
    AuditLog(str(path), fsync=False).record(server="before", decision="allow")
    follower = Follower(str(path), last=5)
    assert len(follower.read()) == 1
    path.rename(tmp_path / "audit.jsonl.1")
    path.mkdir()
    with pytest.raises(OSError):
        follower.read()
    path.rmdir()
    AuditLog(str(path), fsync=False).record(server="after", decision="allow")
    assert [json.loads(line)["server"] for line in follower.read() if isinstance(line, bytes)] == ["after"]
    follower.close()

    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile):
        Follower(str(fifo), last=5).read()


def test_tail_tells_a_tool_decision_from_a_sampling_in_a_tool_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), fsync=False)
    log.record(server="files", tool="delete_file", method="tools/call", decision="deny", rule="no-delete")
    log.record(server="files", tool="summarise", method="sampling/createMessage", decision="allow", client="alice")
    _code, out, _ = run(capsys, "tail", "-n", "2", str(path))
    tool_line, sampling_line = out.splitlines()
    assert "files  tools/call delete_file:  deny (rule no-delete)" in tool_line
    assert "files  client=alice  tool=summarise  allow" in sampling_line

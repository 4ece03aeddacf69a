"""The logs of several `serve` replicas: each record names its writer (`replica`), `audit tail` shows
it, and `audit summary` over the files adds a table per replica."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.support import run_subcommand

from mcp_sampling_proxy.audit.recorder import AuditLog


def write_log(path: Path, replica: str | None, decisions: list[str]) -> None:
    log = AuditLog(str(path), fsync=False, stamp={"replica": replica} if replica else None)
    for n, decision in enumerate(decisions, 1):
        log.record(server="notes", method="sampling/createMessage", request_id=n, decision=decision, client="alice")  # type: ignore[arg-type]
    log.close()


def run(*args: str) -> str:
    done = run_subcommand(["audit", *args], check=True)
    return done.stdout


def test_every_record_names_the_replica_and_a_given_field_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = AuditLog(str(path), fsync=False, stamp={"replica": "r1"})
    log.record(server="notes", decision="allow")
    log.record(server="notes", decision="deny", replica="named-by-the-caller")
    log.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["replica"] for r in records] == ["r1", "named-by-the-caller"]
    assert run("verify", str(path)).strip()  # the stamped records chain like any others


def test_a_writer_without_a_replica_writes_no_replica_key(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    write_log(path, None, ["allow"])
    assert "replica" not in json.loads(path.read_text().splitlines()[0])


def test_tail_names_the_replica(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    write_log(path, "pod-7f9c:8765", ["allow"])
    (line,) = run("tail", str(path)).splitlines()
    assert "  notes  client=alice  replica=pod-7f9c:8765  allow" in line


def test_summary_over_the_replicas_files_has_a_table_per_replica(tmp_path: Path) -> None:
    write_log(tmp_path / "r1.jsonl", "r1", ["allow", "allow", "deny"])
    write_log(tmp_path / "r2.jsonl", "r2", ["allow", "deny"])
    files = [str(tmp_path / "r1.jsonl"), str(tmp_path / "r2.jsonl")]
    text = run("summary", *files).splitlines()
    assert text[text.index("replica  requests  allowed  denied  errors") :] == [
        "replica  requests  allowed  denied  errors",
        "r1              3        2       1       0",
        "r2              2        1       1       0",
    ]
    data = json.loads(run("summary", "--json", *files))
    assert {name: (e["requests"], e["allowed"], e["denied"]) for name, e in data["replicas"].items()} == {
        "r1": (3, 2, 1),
        "r2": (2, 1, 1),
    }
    assert data["total"]["requests"] == 5  # the same request id in two replicas' files is two requests


def test_a_single_replicas_log_without_names_has_no_replica_table(tmp_path: Path) -> None:
    write_log(tmp_path / "a.jsonl", None, ["allow"])
    assert "replica" not in run("summary", str(tmp_path / "a.jsonl"))
    assert "replicas" not in json.loads(run("summary", "--json", str(tmp_path / "a.jsonl")))


def test_summary_counts_each_served_sessions_requests_apart(tmp_path: Path) -> None:
    """Under serve every session's server numbers its requests from 1, and one writer (the replica) records
    them all: the session tells them apart, where proxy_id and request_id alone would count one request."""
    path = tmp_path / "a.jsonl"
    log = AuditLog(str(path), fsync=False, stamp={"replica": "r1"})
    for session in ("s-one", "s-two", "s-three"):
        log.record(server="notes", request_id=1, decision="allow", client="alice", session=session)
    log.record(server="notes", request_id=1, decision="rejected", client="alice", session="s-three")  # its review
    log.close()
    data = json.loads(run("summary", "--json", str(path)))
    assert (data["total"]["requests"], data["total"]["allowed"], data["total"]["denied"]) == (3, 2, 1)

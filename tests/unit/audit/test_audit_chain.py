"""The audit log's hash chain: records, every kind of tampering `audit verify` must name, seals, rotation."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from helpers.audit_logs import PARAMS, RESULT, lines_of, write_log
from helpers.support import CommandRun, run_subcommand
from structlog.testing import capture_logs

from mcp_sampling_proxy.audit.chain_file import AuditError
from mcp_sampling_proxy.audit.recorder import AuditLog
from mcp_sampling_proxy.audit.records import DECISION_FIELDS, GENESIS, AuditFields, canonical, record_hash
from mcp_sampling_proxy.commands import audit as audit_cmd


def verify(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, str]:
    code = audit_cmd.main(["verify", *map(str, paths)])
    out = capsys.readouterr()
    return code, out.out, out.err


def rehash(lines: list[bytes], start: int) -> list[bytes]:
    """Recompute prev_hash/hash from line `start` on, as a careful forger would."""
    out = list(lines[:start])
    head = json.loads(out[-1])["hash"] if out else GENESIS
    for raw in lines[start:]:
        record = json.loads(raw)
        record["prev_hash"] = head
        record["hash"] = head = record_hash(record)
        out.append(json.dumps(record).encode() + b"\n")
    return out


# -- the records ------------------------------------------------------------------------------------


def test_every_decision_record_has_every_field_and_the_chain_links(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = write_log(path, 3)
    log.record(params=PARAMS, server="srv", decision="deny", reason="no", limit="rate_limit")
    records = [json.loads(line) for line in lines_of(path)]
    first, *rest = records
    assert first["continues"] is None and first["prev_hash"] == GENESIS  # only the first record of a file
    assert list(first)[:5] == ["ts", "seq", "proxy_id", "event", "continues"]
    assert not any("continues" in record for record in rest)
    decisions = records
    for record in decisions:
        assert record["event"] == "decision"
        assert all(key in record for key in DECISION_FIELDS)
        assert record["ts"].endswith("Z") and "T" in record["ts"]
    assert decisions[-1]["limit"] == "rate_limit"
    assert decisions[-1]["provider"] is None and decisions[-1]["content"]["response"] is None
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert {r["proxy_id"] for r in records} == {log.proxy_id}
    for previous, record in itertools.pairwise(records):
        assert record["prev_hash"] == previous["hash"]
    for record in records:
        assert record["hash"] == record_hash(record)
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_every_field_a_decision_record_carries_is_typed() -> None:
    """AuditFields (what `record` accepts, checked by mypy at every call site) names every key of
    DECISION_FIELDS: a field added to the record's format without its type would reach the log
    unchecked."""
    typed = AuditFields.__optional_keys__
    assert set(DECISION_FIELDS) <= typed, set(DECISION_FIELDS) - typed
    assert not AuditFields.__required_keys__


def test_content_none_holds_sizes_and_digests_only(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "audit.jsonl"
    write_log(path, 1)
    text = path.read_text()
    assert "Capital of France" not in text and "Be brief" not in text and "Paris" not in text
    content = json.loads(lines_of(path)[0])["content"]
    message = PARAMS["messages"][0]
    assert content["mode"] == "none"
    assert content["messages"] == [
        {"role": "user", "bytes": len(canonical(message)), "sha256": hashlib.sha256(canonical(message)).hexdigest()}
    ]
    assert content["system"] == {"bytes": 9, "sha256": hashlib.sha256(b"Be brief.").hexdigest()}
    assert content["request"]["sha256"] == hashlib.sha256(canonical(PARAMS)).hexdigest()
    assert content["response"]["sha256"] == hashlib.sha256(canonical(RESULT)).hexdigest()


def test_content_full_holds_the_messages_and_response(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 1, content="full")
    content = json.loads(lines_of(path)[0])["content"]
    assert content["messages"][0]["message"] == PARAMS["messages"][0]
    assert content["system"]["text"] == "Be brief."
    assert content["response"]["result"] == RESULT


def test_no_path_writes_nothing(tmp_path: Path) -> None:
    log = AuditLog(None)
    log.record(server="x", decision="allow")
    log.close()
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_log_refuses_the_record_with_a_json_rpc_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    log = AuditLog(str(blocker / "audit.jsonl"))
    with pytest.raises(AuditError) as info:
        log.record(server="x", decision="allow")
    assert info.value.code == -32603
    assert "audit log cannot be written" in info.value.message


# -- verify: intact ---------------------------------------------------------------------------------


def test_verify_passes_an_intact_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    code, out, err = verify(capsys, path)
    assert code == 0, err
    assert f"{path}: ok: 5 records (5 decisions, 0 seals); last hash {json.loads(lines_of(path)[-1])['hash']}" in out
    assert "the chain starts here (genesis)" in out


def test_several_writers_append_one_chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    first = write_log(path, 2)
    write_log(path, 2)
    first.record(server="srv", decision="deny")
    assert verify(capsys, path)[0] == 0
    records = [json.loads(line) for line in lines_of(path)]
    assert [(r["proxy_id"] == first.proxy_id, r["seq"]) for r in records] == [
        (True, 1),
        (True, 2),
        (False, 1),
        (False, 2),
        (True, 3),
    ]


# -- verify: every kind of tampering ----------------------------------------------------------------


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)  # lines 1-5, seq 1-5
    return path


def test_edited_field(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    lines[2] = lines[2].replace(b'"decision":"allow"', b'"decision":"deny"')
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert err.startswith(f"{log_file}:3: edited: the record's hash does not match its content")


@pytest.mark.parametrize("nested", [False, True])
def test_a_duplicate_key_is_an_edit(log_file: Path, capsys: pytest.CaptureFixture[str], nested: bool) -> None:
    """A second "decision" in front: Python's json keeps the last (the hash still matches), a reader
    that keeps the first (jq --stream, many others) sees "allow" for a refused request."""
    lines = lines_of(log_file)
    record = json.loads(lines[2])
    assert record["decision"] == "allow"
    if nested:  # inside a nested object too
        lines[2] = b'{"extra": {"a": 1, "a": 2}, ' + lines[2][1:]
    else:
        lines[2] = b'{"decision": "deny", ' + lines[2][1:]
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    key = "a" if nested else "decision"
    assert err.startswith(f"{log_file}:3: edited: the line names the key '{key}' twice"), err


def test_edited_and_rehashed_line(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    record = json.loads(lines[2])
    record["input_tokens"] = 1
    record["hash"] = record_hash(record)
    lines[2] = json.dumps(record).encode() + b"\n"
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:4: deleted or edited: the record this one follows" in err


def test_deleted_line(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    del lines[2]
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:3: deleted or edited: the record this one follows" in err
    assert "(line 2)" in err


def test_deleted_line_with_the_chain_recomputed_shows_as_a_seq_gap(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = lines_of(log_file)
    del lines[2]
    log_file.write_bytes(b"".join(rehash(lines, 2)))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:3: records deleted: seq of proxy" in err
    assert "goes from 2 to 4" in err


def test_swapped_lines(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    lines[2], lines[3] = lines[3], lines[2]
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:3: reordered: this record follows line 4, which comes after it" in err


def test_moved_line(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    lines.append(lines.pop(2))
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:3: reordered: this record follows line 5" in err


def test_truncated_mid_line(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = log_file.read_bytes()
    log_file.write_bytes(data[: len(data) - 40])
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:5: torn: the last line has no newline at its end" in err
    assert "the next proxy start seals it" in err


def test_appended_garbage(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with open(log_file, "ab") as f:
        f.write(b"hello, I am not a record\n")
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:6: not JSON: garbage, or a torn write" in err


def test_appended_json_without_a_hash(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with open(log_file, "ab") as f:
        f.write(b'{"decision": "allow"}\n')
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:6: not a chained record: no valid hash" in err


def test_garbage_in_the_middle(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    lines.insert(3, b"#### inserted\n")
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:4: not JSON: garbage, or a torn write (and no seal record follows it)" in err


def test_deleted_first_lines(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = lines_of(log_file)
    log_file.write_bytes(b"".join(lines[2:]))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert (
        f"{log_file}:1: the first record does not start a file (it has no 'continues' key): lines were deleted "
        "from the start of the file" in err
    )


def test_deleted_last_line_is_not_detectable_and_verify_says_so(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = lines_of(log_file)
    log_file.write_bytes(b"".join(lines[:-1]))
    code, out, _ = verify(capsys, log_file)
    assert code == 0
    assert json.loads(lines[-2])["hash"] in out  # the last hash, to compare with one kept elsewhere
    assert "not records removed from its end" in out


# -- torn writes and seals --------------------------------------------------------------------------


def test_a_torn_tail_is_sealed_at_the_next_start(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = log_file.read_bytes()
    torn = data[: len(data) - 40]
    log_file.write_bytes(torn)
    last_good = json.loads(lines_of(log_file)[-2])["hash"]
    log = AuditLog(str(log_file), fsync=False)  # the start seals
    seal = json.loads(lines_of(log_file)[-1])
    assert seal["event"] == "seal" and seal["prev_hash"] == last_good
    assert seal["torn_bytes"] == len(torn) - torn.rfind(b"\n") - 1 + 1  # the fragment and the newline added
    assert seal["newline_added"] is True and seal["seq"] == 1
    log.record(server="srv", decision="allow")
    code, out, err = verify(capsys, log_file)
    assert code == 0, err
    assert f"line 5: {seal['torn_bytes']} bytes that are not records" in out
    assert "sealed by line 6" in out
    assert "1 seals" in out


def test_a_complete_last_record_missing_only_its_newline_is_completed(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = log_file.read_bytes()
    log_file.write_bytes(data[:-1])
    AuditLog(str(log_file), fsync=False).record(server="srv", decision="deny")
    assert log_file.read_bytes().startswith(data)
    code, out, err = verify(capsys, log_file)
    assert code == 0, err
    assert "0 seals" in out


def test_a_running_writer_seals_what_another_left_behind(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(log_file.parent / "audit.jsonl", 0)
    with open(log_file, "ab") as f:
        f.write(b'{"half a rec')
    log.record(server="srv", decision="allow")
    code, out, err = verify(capsys, log_file)
    assert code == 0, err
    assert "line 6: 13 bytes that are not records" in out  # with the newline the seal added


def test_torn_bytes_changed_after_sealing(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = log_file.read_bytes()
    log_file.write_bytes(data[:-40])
    AuditLog(str(log_file), fsync=False)
    lines = lines_of(log_file)
    lines[-2] = lines[-2][:-2] + b"X\n"
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:6: the seal does not match the" in err


def test_deleting_the_torn_line_before_a_seal_is_detected(log_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = log_file.read_bytes()
    log_file.write_bytes(data[:-40])
    AuditLog(str(log_file), fsync=False)
    lines = lines_of(log_file)
    del lines[-2]
    log_file.write_bytes(b"".join(lines))
    code, _, err = verify(capsys, log_file)
    assert code == 1
    assert f"{log_file}:5: a seal covering" in err and "the torn lines were deleted" in err


def test_a_file_from_before_the_chain_is_sealed_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"ts": "2025-01-01T00:00:00Z", "seq": 1, "decision": "allow"}\n' * 3)
    AuditLog(str(path), fsync=False).record(server="srv", decision="allow")
    code, out, err = verify(capsys, path)
    assert code == 0, err
    assert "line 1-3:" in out and "sealed by line 4" in out
    seal = json.loads(lines_of(path)[3])
    assert seal["event"] == "seal" and seal["prev_hash"] == GENESIS and seal["continues"] is None


# -- rotation ---------------------------------------------------------------------------------------


def test_rotation_keeps_the_chain_across_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    log = write_log(path, 12, max_bytes=4000)
    files = sorted(tmp_path.glob("audit.jsonl.*[0-9]"), key=lambda p: -int(p.suffix[1:]))
    assert len(files) >= 2
    ordered = [*files, path]
    for file in ordered:
        assert file.stat().st_size <= 4000
        assert oct(file.stat().st_mode & 0o777) == "0o600"
    firsts = [json.loads(lines_of(f)[0]) for f in ordered]
    assert firsts[0]["continues"] is None and firsts[0]["prev_hash"] == GENESIS
    for older, first in zip(ordered, firsts[1:], strict=False):
        assert first["event"] == "decision" and first["continues"] == f"{path.name}.1"
        assert first["prev_hash"] == json.loads(lines_of(older)[-1])["hash"]
    seqs = [json.loads(line)["seq"] for f in ordered for line in lines_of(f)]
    assert seqs == list(range(1, log.seq + 1))
    code, out, err = verify(capsys, *ordered)
    assert code == 0, err
    assert out.count(": ok:") == len(ordered)
    assert (
        sum(int(part.split(" records")[0].rsplit(" ", 1)[1]) for part in out.splitlines() if ": ok:" in part) == log.seq
    )


def test_verify_of_the_newest_file_alone_notes_the_rotated_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 12, max_bytes=4000)
    code, out, _ = verify(capsys, path)
    assert code == 0
    assert "continues the chain of audit.jsonl.1" in out
    assert "audit.jsonl.1 exists: verify FILE.N ... FILE.1 FILE" in out


def test_verify_names_a_missing_or_misordered_rotated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 12, max_bytes=4000)
    one, two = Path(f"{path}.1"), Path(f"{path}.2")
    code, _, err = verify(capsys, two, path)
    assert code == 1
    assert f"{path}:1: prev_hash" in err and "a file is missing in between" in err
    code, _, err = verify(capsys, one, two)
    assert code == 1
    assert f"{two}:1: prev_hash" in err and "files are out of order (give them oldest first)" in err


def test_a_restarted_proxy_continues_the_rotated_chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 6, max_bytes=3000).close()
    write_log(path, 6, max_bytes=3000).close()
    files = sorted(tmp_path.glob("audit.jsonl.*[0-9]"), key=lambda p: -int(p.suffix[1:]))
    code, _, err = verify(capsys, *files, path)
    assert code == 0, err


def test_max_bytes_zero_never_rotates(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 30, max_bytes=0)
    assert not Path(f"{path}.1").exists()


# -- the command line -------------------------------------------------------------------------------


def run_cli(*args: str) -> CommandRun:
    """`mcp-sampling-proxy audit ARGS...`, run in process."""
    return run_subcommand(["audit", *args])


def test_cli_exit_codes_and_messages(log_file: Path) -> None:
    ok = run_cli("verify", str(log_file))
    assert ok.returncode == 0, ok.stderr
    assert f"{log_file}: ok: 5 records" in ok.stdout
    missing = run_cli("verify", str(log_file.parent / "nope.jsonl"))
    assert missing.returncode == 2
    nope = log_file.parent / "nope.jsonl"
    assert missing.stderr.strip() == f"mcp-sampling-proxy audit verify: error: {nope}: no such file"
    lines = lines_of(log_file)
    log_file.write_bytes(b"".join(lines[:3] + lines[4:]))
    broken = run_cli("verify", str(log_file))
    assert broken.returncode == 1
    assert broken.stderr.startswith(f"{log_file}:4: deleted or edited")
    assert "verification stopped at the first problem" in broken.stderr
    usage = run_cli()
    assert usage.returncode == 2
    assert "verify" in usage.stderr and "tail" in usage.stderr and "summary" in usage.stderr


def test_empty_file_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    AuditLog(str(path)).close()
    code, out, _ = verify(capsys, path)
    assert code == 0 and f"{path}: ok: empty" in out


def test_verify_names_the_predecessor_by_its_current_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, 12, max_bytes=4000)
    code, out, _ = verify(capsys, Path(f"{path}.1"))
    assert code == 0
    assert "continues the chain of audit.jsonl.2" in out


# -- a foreign tail: whoever runs as the user can append to the log ------------------------------------
# (sealing and verifying one of hundreds of MB in bounded memory, measured in a process of its own:
# tests/security/test_audit_foreign_tail.py)


def test_a_log_whose_end_holds_no_record_within_reach_is_moved_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past 1,000 lines that look like records but are not, the writer stops looking for the last
    record (each is parsed; a foreign tail can hold millions): it cannot link a seal, so the file is
    rotated away untouched and a new chain starts, and `verify` on the old file shows where."""
    path = tmp_path / "audit.jsonl"
    write_log(path, 3).close()
    with open(path, "ab") as f:
        f.write(b'{"not": "a record"}\n' * 1_001)
    before = path.read_bytes()
    with capture_logs() as logs:  # as the next writer: one record
        log = AuditLog(str(path), fsync=False, max_bytes=0)  # never rotated for its size here
        log.record(server="after", decision="allow")
        log.close()
    assert any("moved it aside and started a new chain" in entry["event"] for entry in logs), logs
    moved = tmp_path / "audit.jsonl.1"
    assert moved.read_bytes() == before
    first = json.loads(lines_of(path)[0])
    assert first["server"] == "after" and first["continues"] is None and first["prev_hash"] == GENESIS
    code, _, err = verify(capsys, path)
    assert code == 0, err
    code, _, err = verify(capsys, moved)
    assert code == 1 and f"{moved}:4: not a chained record: no valid hash" in err


def test_a_record_too_long_to_read_back_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record longer than read_tail takes for one would be sealed as foreign by the next writer:
    it is refused with an error that says what to change, and nothing is written."""
    from mcp_sampling_proxy.audit import chain_file

    monkeypatch.setattr(chain_file, "MAX_RECORD_BYTES", 4096)
    path = tmp_path / "audit.jsonl"
    log = write_log(path, 1, content="full")
    size = path.stat().st_size
    big = {**PARAMS, "messages": [{"role": "user", "content": {"type": "text", "text": "z" * 8000}}]}
    with pytest.raises(AuditError, match=r"over the audit log.s limit of 4,096 .*audit.content to none"):
        log.record(params=big, server="srv", decision="allow")
    assert path.stat().st_size == size
    log.close()


def test_a_line_nested_past_the_parser_is_foreign_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """5,000 '[' in a line that ends like a record: the stdlib parser raises RecursionError (not a
    ValueError) on it. It stopped every proxy sharing the log from starting; it is a foreign line."""
    path = tmp_path / "audit.jsonl"
    write_log(path, 2).close()
    with open(path, "ab") as f:
        f.write(b'{"x":' + b"[" * 5000 + b'"hash":"' + b"0" * 64 + b'"}\n')
    log = AuditLog(str(path), fsync=False)  # the start seals it
    log.record(server="srv", decision="allow")
    log.close()
    code, out, err = verify(capsys, path)
    assert code == 0, err
    assert "line 3: " in out and "sealed by line 4" in out
    assert audit_cmd.main(["tail", "-n", "5", str(path)]) == 0
    assert "?? a line that is not a record (5080 bytes)" in capsys.readouterr().out

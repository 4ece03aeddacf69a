"""The benchmarks of bench/ that measure work done in their own process, run here in this one (their
`main()` with a small count): each checks its own result (it exits non-zero when a message or record is
lost) and prints its figure. The benchmarks that start processes: tests/e2e/test_sdk_bench.py and
tests/e2e/test_serve_bench.py."""

from __future__ import annotations

import os
import sys

import pytest
from helpers.bench_scripts import load_bench


def run_main(name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """bench/NAME.py's main() with `argv`, as `python bench/NAME.py ARGV` runs it: what it printed. The
    directories it gives the proxy's code are its own (bench/scratch_dirs.py) and leave no trace: the
    environment after it is the test's."""
    monkeypatch.setattr(sys, "argv", [f"bench/{name}.py", *argv])
    environment = dict(os.environ)
    load_bench(name).main()
    assert dict(os.environ) == environment
    return capsys.readouterr().out


def test_relay_micro_runs_the_real_relay_and_reports_its_cost(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/relay_micro.py (the relay's own work per message) passes every message on and prints the figure."""
    out = run_main("relay_micro", ["--pairs", "500"], monkeypatch, capsys)
    assert out.startswith("relay logic: ") and "us per request+response (450 pairs)" in out


def test_audit_record_writes_every_record_and_reports_its_cost(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/audit_record.py (the audit log's own work per request) finds every record in its file and
    prints the figure."""
    out = run_main("audit_record", ["--requests", "200", "--rounds", "2"], monkeypatch, capsys)
    assert out.startswith("audit record: ") and "(median of 2 rounds of 200;" in out


def test_secret_scan_masks_alike_with_and_without_the_literal_tests_and_reports_both(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/secret_scan.py (the credential scan per 1,000 characters, each detector's literal test on and
    off) prints a row per kind of text."""
    out = run_main("secret_scan", ["--rounds", "1", "--number", "2"], monkeypatch, capsys)
    rows = [line.split()[0] for line in out.splitlines()[2:]]
    assert out.startswith("the credential scan of 1,000 characters")
    assert rows == ["prose", "typeset", "code", "markdown", "hostile"]


def test_sampling_micro_answers_every_request_and_records_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/sampling_micro.py (the proxy's own work per sampling request, the LLM in memory) finds a result
    for every request and a record of each in its audit log, and prints the figure."""
    out = run_main("sampling_micro", ["--requests", "20", "--rounds", "2"], monkeypatch, capsys)
    assert out.startswith("sampling request, the proxy's own work: best ") and "(2 rounds of 20;" in out


@pytest.mark.parametrize("mode", ["stateless", "session"])
def test_serve_micro_answers_every_call_and_reports_its_cost(
    mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench/serve_micro.py (serve's own work per relayed call, the endpoint's ASGI app called in process, the
    callers' servers in memory) checks each call's echo and prints the figure."""
    out = run_main("serve_micro", ["--mode", mode, "--calls", "30", "--rounds", "2"], monkeypatch, capsys)
    assert out.startswith(f"serve {mode}: own CPU per call ") and "(2 rounds of 30)" in out

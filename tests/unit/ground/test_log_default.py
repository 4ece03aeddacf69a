"""Logging before `configure()`: a line must never reach stdout, which carries the stdio protocol."""

from __future__ import annotations

import json

import pytest
import structlog

from mcp_sampling_proxy.log import get_logger, set_secrets, stderr_until_configured


def test_a_line_logged_before_configure_goes_to_stderr_scrubbed(capsys: pytest.CaptureFixture[str]) -> None:
    structlog.reset_defaults()  # structlog's own default: a PrintLogger on stdout
    stderr_until_configured()
    set_secrets(["sk-test-0123456789abcdef"])
    try:
        get_logger().info("early", detail="key sk-test-0123456789abcdef")
    finally:
        set_secrets([])
    out, err = capsys.readouterr()
    assert out == ""
    line = json.loads(err)
    assert line["event"] == "early" and line["level"] == "info"
    assert "sk-test-0123456789abcdef" not in err


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_key_is_masked_wherever_a_field_holds_it(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """Not only a string field: a key inside a dict, a list or a tuple, an exception given as a field, and
    a traceback (`exc_info`) are masked before the line is written, in both formats."""
    from mcp_sampling_proxy.log import configure

    key = "sk-test-0123456789abcdef"
    configure("info", fmt, cache=False)
    set_secrets([key])
    try:
        log = get_logger()
        log.warning("nested", detail={"headers": {"authorization": f"Bearer {key}"}}, tried=[key], pair=(1, key))
        log.warning("failed", error=RuntimeError(f"401 for {key}"))
        try:
            raise ValueError(f"bad key {key}")
        except ValueError:
            log.exception("raised")
    finally:
        set_secrets([])  # (the configuration itself is undone after the test: conftest's loggers_never_cached)
    out, err = capsys.readouterr()
    assert out == ""
    assert "nested" in err and "failed" in err and "raised" in err
    assert key not in err, err

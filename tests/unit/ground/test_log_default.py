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

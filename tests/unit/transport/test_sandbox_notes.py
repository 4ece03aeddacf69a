"""What the sandbox's notes make of a server's stderr, in process: the ways runtimes say a write was refused
or, with `network: false`, that a host could not be reached. (tests/e2e/test_sandbox_grants.py: the real
proxy and a real refusal.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from mcp_sampling_proxy.transport import sandbox_notes
from mcp_sampling_proxy.transport.sandbox_notes import SandboxNotes


@pytest.fixture(autouse=True)
def no_keeping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox_notes, "keep", lambda note: None)  # the state file: not this module's question


def said(notes: SandboxNotes, *lines: str) -> list[tuple[str, str]]:
    with structlog.testing.capture_logs() as logs:
        for line in lines:
            notes.stderr_line(line)
    return [(entry["event"], entry["fix"]) for entry in logs]


@pytest.mark.parametrize(
    ("line", "host"),
    [
        (
            "npm error request to https://registry.npmjs.org/x failed, reason: "
            "getaddrinfo EAI_AGAIN registry.npmjs.org",
            "registry.npmjs.org",
        ),
        ("Error: getaddrinfo ENOTFOUND api.example.com", "api.example.com"),
        (
            "npm error request to https://registry.npmjs.org/x failed: cache mode is 'only-if-cached' but no "
            "cached response is available.",
            "registry.npmjs.org",
        ),
        ("curl: (6) Could not resolve host: files.pythonhosted.org", "files.pythonhosted.org"),
        (
            'Get "https://proxy.golang.org/x": dial tcp: lookup proxy.golang.org on 10.0.0.1:53: no such host',
            "proxy.golang.org",
        ),
        (
            "error: Request failed after 3 retries: https://pypi.org/simple/x/ "
            "dns error: failed to lookup address information",
            "pypi.org",
        ),
    ],
)
def test_with_no_network_the_host_a_server_could_not_reach_is_named(line: str, host: str) -> None:
    notes = SandboxNotes("notes", "sandbox.servers.notes", offline=True)
    assert said(notes, line, line) == [  # once
        (
            f"the sandbox refused the server a connection to {host}",
            f"if it needs it, grant it: sandbox.servers.notes.network: [{host}]",
        )
    ]


def test_a_failure_that_names_no_host_is_said_without_one() -> None:
    notes = SandboxNotes("notes", "sandbox", offline=True)
    line = "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>"
    assert said(notes, line) == [
        (
            "the sandbox refused the server a connection to the network (its error names no host)",
            "if it needs it, grant it: sandbox.network: [the hosts it needs]",
        )
    ]


def test_with_the_network_through_the_relay_the_relay_says_it_not_the_stderr() -> None:
    """The relay decides each connection and says what it refused; a server's own DNS error there is the
    server's business (a host that does not exist), not a grant."""
    notes = SandboxNotes("notes", "sandbox", offline=False)
    assert said(notes, "Error: getaddrinfo ENOTFOUND no-such-host.example") == []


@pytest.mark.parametrize(
    ("line", "path"),
    [
        (
            "Error: EROFS: read-only file system, open '/home/me/.cache/notes/index.db'",
            "/home/me/.cache/notes/index.db",
        ),
        (
            "error: failed to create directory `/home/me/.local/share/uv/tools`: Read-only file system (os error 30)",
            "/home/me/.local/share/uv/tools",
        ),
        ("OSError: [Errno 30] Read-only file system: '/home/me/notes/x.txt'", "/home/me/notes/x.txt"),
    ],
)
def test_a_refused_write_names_the_path(line: str, path: str) -> None:
    (event, _fix), *_ = said(SandboxNotes("notes", "sandbox"), line)
    assert event == f"the sandbox refused the server a write to {path}"


@pytest.mark.parametrize(
    ("written", "fix"),
    [
        ("notes/x.md", "if it needs it, grant it: sandbox.write: [~/notes]"),
        (
            ".cache/notes/a/b.db",
            "if it needs it, grant it: sandbox.write: [~/.cache/notes] "
            "(make it first: mkdir -p ~/.cache/notes; ~/.cache itself may not be granted)",
        ),
        ("foo.txt", "if it needs it, grant it: sandbox.write: [a directory of its own] (~ itself may not be granted)"),
        (
            ".npm/_cacache/tmp/x",
            "no grant allows it: ~/.npm/_cacache/tmp/x is inside ~/.npm (npm's cache: npx runs the packages in it "
            "as you): a server may not write there",
        ),
    ],
)
def test_a_refused_write_names_a_grant_the_proxy_would_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: str, fix: str
) -> None:
    """The fix names the folder the write was in when it may be granted; else a folder of its own below it
    that may (never one the proxy would refuse to start with: ~/.cache holds uv's cache); and says so when
    none may (inside npm's cache, which npx runs as the user later)."""
    home = tmp_path / "home"
    for folder in ("notes", ".cache", ".npm"):
        (home / folder).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    line = f"OSError: [Errno 30] Read-only file system: '{home / written}'"
    ((_event, given),) = said(SandboxNotes("notes", "sandbox"), line)
    assert given == fix


def test_a_path_the_server_makes_deep_gets_the_plain_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The advice walks the refused path, asking at each step whether a grant there would be refused; the
    server names the path, on its stderr. A line naming one 2,000 folders deep inside npm's cache (4 KB)
    held the proxy's event loop for hours, and again at each repeat of it; now such a path gets the plain
    advice at once, and a repeated line is not looked at again."""
    home = tmp_path / "home"
    (home / ".npm").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    line = f"OSError: [Errno 30] Read-only file system: '{home / '.npm'}/{'a/' * 2000}x'"
    notes = SandboxNotes("notes", "sandbox")
    assert [fix for _event, fix in said(notes, *[line] * 50)] == [
        "if it needs it, grant it: sandbox.write: [the directory it writes]"
    ]


@pytest.mark.parametrize(
    "line",
    [
        "read-only file system " + "EROFS " * 50_000,  # each EROFS a place to scan the rest of the line from
        "Read-only file system: failed to create directory" + " " * 500_000,  # spaces two runs could share
    ],
    ids=["repeated-marker", "long-run"],
)
def test_a_line_made_to_be_slow_to_read_is_read_at_once(line: str) -> None:
    """The server writes its stderr: a line of up to 1 MB. Two patterns for the path in an EROFS line could
    scan a line again from each place a word repeats (a 48 KB line of `EROFS ` took 5 s of the event loop,
    growing with the square of its length); their runs are bounded now, and only the line's first 8 KB is
    looked at. The line is said, with the plain advice, and the test does not wait."""
    assert said(SandboxNotes("notes", "sandbox"), line) == [
        (
            "the sandbox refused the server a write to a file (its error names none)",
            "if it needs it, grant it: sandbox.write: [the directory it writes]",
        )
    ]

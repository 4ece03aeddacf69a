"""`wrap` / `unwrap` / `wrap --list` on real-looking config files of every host format."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import tomllib
from pathlib import Path
from typing import Any, cast

import pytest
from helpers.support import PY, write_policy
from helpers.wrapping import FIXTURES, copy_fixture, run, servers_of

from mcp_sampling_proxy.commands.cli import main as cli_main
from mcp_sampling_proxy.hosts.config_files import SIDECAR_NAME, load_config, record_path
from mcp_sampling_proxy.hosts.entries import Remote, classify, is_wrapped, parse_proxy_args
from mcp_sampling_proxy.hosts.jsonc import parse_jsonc
from mcp_sampling_proxy.hosts.registry import ConfigError, config_path
from mcp_sampling_proxy.hosts.wrapping import Invocation, proxy_invocation

CASES = [
    ("claude-desktop", "claude_desktop_config.json"),
    ("claude-code", "claude_code.mcp.json"),
    ("claude-code", "claude_code.claude.json"),
    ("cursor", "cursor.mcp.json"),
    ("vscode", "vscode.mcp.json"),
    ("windsurf", "windsurf.mcp_config.json"),
    ("gemini", "gemini.settings.json"),
    ("codex", "codex.config.toml"),
    ("zed", "zed.settings.json"),
    ("cline", "cline_mcp_settings.json"),
    ("lmstudio", "lmstudio.mcp.json"),
    ("vscode", "vscode.settings.json"),
    ("continue", "continue.config.yaml"),
    ("continue", "continue.block.yaml"),
    ("continue", "continue.mcp.json"),
]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Backups go to the state dir: the test's own."""
    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def policy(tmp_path: Path) -> str:
    return write_policy(tmp_path, "rules:\n  - name: all\n    action: allow\n")


def backups(path: Path) -> list[Path]:
    """The backups taken of `path` (in the state dir, never beside it)."""
    found = []
    for meta in sorted((path.parent.parent / "state" / "backups").glob("*.meta")):
        if json.loads(meta.read_text())["path"] == str(path.absolute()):
            found.append(meta.with_suffix(""))
    return found


# -- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "fixture"), CASES)
def test_wrap_wrap_unwrap_round_trip_is_byte_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, host: str, fixture: str
) -> None:
    path = copy_fixture(tmp_path, fixture)
    original = path.read_bytes()
    before = servers_of(host, path)
    key = load_config(path, host).tables()[0][0]
    other_before = {k: v for k, v in load_config(path, host).data.items() if k != key}

    code, out, err = run(capsys, "wrap", "--host", host, "--config", str(path), "--all", "--policy", policy)
    assert code == 0, err
    assert "backup:" in out
    wrapped_bytes = path.read_bytes()
    assert wrapped_bytes != original
    [first_backup] = backups(path)
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}-{host}-{re.escape(path.name)}", first_backup.name)
    assert stat.S_IMODE(first_backup.stat().st_mode) == 0o600
    assert not list(path.parent.glob("*.bak-*"))
    assert first_backup.read_bytes() == original
    assert not (path.parent / SIDECAR_NAME).exists()  # nothing of ours beside the config
    sidecar = record_path(path)
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600

    doc = load_config(path, host)
    assert {k: v for k, v in doc.data.items() if k != key} == other_before
    after = servers_of(host, path)
    assert list(after) == list(before)
    proxy = proxy_invocation().command
    for name, entry in before.items():
        kind = classify(host, entry)
        if kind.kind == "sse":
            assert after[name] == entry, "SSE entries cannot be wrapped and stay as they were"
            continue
        new = after[name]
        assert is_wrapped(new) and new["command"] == proxy and os.path.isabs(proxy)
        parsed = parse_proxy_args(new["args"])
        assert parsed.options["--policy"] == policy
        if kind.kind == "stdio":
            assert parsed.command == [entry["command"], *entry.get("args", [])]
            assert {k: v for k, v in new.items() if k not in ("command", "args")} == {
                k: v for k, v in entry.items() if k not in ("command", "args")
            }
        else:
            remote = cast(Remote, kind.remote)  # an entry that is not stdio or SSE is a remote one
            assert parsed.options["--url"] == remote.url
            assert parsed.headers == [f"{k}: {v}" for k, v in remote.headers.items()]

    code, out, _ = run(capsys, "wrap", "--host", host, "--config", str(path), "--all", "--policy", policy)
    assert code == 0 and "nothing to change" in out and "already wrapped" in out
    assert path.read_bytes() == wrapped_bytes
    assert len(backups(path)) == 1, "a wrap that changes nothing writes no backup"

    code, out, err = run(capsys, "unwrap", "--host", host, "--config", str(path), "--all")
    assert code == 0, err
    assert "restored exactly" in out
    assert path.read_bytes() == original
    assert not sidecar.exists()


def test_dry_run_prints_a_diff_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    original = path.read_bytes()
    code, out, _ = run(
        capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy, "--dry-run"
    )
    assert code == 0
    assert f"--- {path}" in out and f"+++ {path} (after)" in out
    assert '-      "command": "/usr/bin/python3",' in out
    assert f'+      "command": "{proxy_invocation().command}",' in out
    assert "dry run: nothing written" in out
    assert path.read_bytes() == original
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


# -- failures leave the file alone -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "fixture", "position"),
    [
        ("cursor", "broken.json", "broken.json:4:5: expected ',' or '}' after an object member"),
        ("codex", "broken.toml", "broken.toml:4:1: Unclosed array"),
    ],
)
def test_a_broken_file_is_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, host: str, fixture: str, position: str
) -> None:
    path = copy_fixture(tmp_path, fixture)
    original = path.read_bytes()
    code, _, err = run(capsys, "wrap", "--host", host, "--config", str(path), "--all", "--policy", policy)
    assert code == 1
    assert position in err and "nothing written" in err
    assert path.read_bytes() == original
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope" / "mcp.json"
    code, _, err = run(capsys, "wrap", "--host", "cursor", "--config", str(missing), "--all")
    assert code == 1
    assert f"{missing}: file not found" in err


def test_a_missing_default_file_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run(capsys, "wrap", "--host", "windsurf", "--all")
    assert code == 1
    assert f"{tmp_path}/.codeium/windsurf/mcp_config.json: file not found" in err
    assert "--config PATH" in err


def test_an_invalid_policy_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    original = path.read_bytes()
    bad = write_policy(tmp_path, "rules:\n  - action: alow\n", "bad.yaml")
    code, _, err = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", bad)
    assert code == 1
    assert "bad.yaml:2:13" in err and "nothing written" in err
    assert path.read_bytes() == original


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1,, }', "1:9: expected a string key"),
        ('{\n  "a": "x\ny"\n}', "2:10: a control character"),
        ('{"a": 1 /* open', "1:9: unterminated /* comment"),
        ('{"a": tru}', "1:7: unexpected 't': expected a value"),
        ('{"a": 1}\n{"b": 2}', "2:1: unexpected '{' after the end of the JSON document"),
        ("", "1:1: unexpected end of file: expected a value"),
    ],
)
def test_jsonc_errors_give_line_and_column(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_jsonc(text, "f.json")
    assert str(info.value).startswith(f"f.json:{message}")


def test_jsonc_reads_comments_and_trailing_commas() -> None:
    node = parse_jsonc('// c\n{"a": [1, 2,], /* x */ "b": {"c": "d",},}')
    assert node.value == {"a": [1, 2], "b": {"c": "d"}}


# -- choosing servers --------------------------------------------------------------------------------


def test_server_changes_only_that_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    original = path.read_text()
    doc = load_config(path, "claude-desktop")
    start, end = doc.entry_span(("mcpServers",), "filesystem")
    code, out, _ = run(
        capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--server", "filesystem", "--policy", policy
    )
    assert code == 0 and "filesystem" in out and "summarizer" not in out
    text = path.read_text()
    tail = len(original) - end
    assert text[:start] == original[:start] and text[len(text) - tail :] == original[end:]
    after = servers_of("claude-desktop", path)
    assert is_wrapped(after["filesystem"]) and not is_wrapped(after["summarizer"])

    code, _, _ = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)
    assert code == 0
    assert all(is_wrapped(e) for e in servers_of("claude-desktop", path).values())
    code, out, _ = run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(path), "--server", "summarizer")
    assert code == 0
    after = servers_of("claude-desktop", path)
    assert not is_wrapped(after["summarizer"]) and is_wrapped(after["filesystem"])
    code, _, _ = run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(path), "--all")
    assert code == 0 and path.read_text() == original


def test_an_unknown_server_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    original = path.read_bytes()
    code, _, err = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--server", "summarizr")
    assert code == 1
    assert "no server named 'summarizr' (servers: summarizer, filesystem, plain-binary)" in err
    assert path.read_bytes() == original


def test_server_or_all_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli_main(["wrap", "--host", "cursor"])
    assert info.value.code == 2
    assert "--server NAME ... or --all" in capsys.readouterr().err


def test_an_sse_server_named_explicitly_is_an_error_and_all_skips_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "vscode.mcp.json")
    original = path.read_bytes()
    code, out, err = run(
        capsys,
        "wrap",
        "--host",
        "vscode",
        "--config",
        str(path),
        "--server",
        "summarizer",
        "old-sse",
        "--policy",
        policy,
    )
    assert code == 1 and "SSE transport" in out and "nothing written" in err
    assert path.read_bytes() == original
    code, out, _ = run(capsys, "wrap", "--host", "vscode", "--config", str(path), "--all", "--policy", policy)
    assert code == 0 and "(skipped)" in out


def test_claude_code_local_scope_edits_the_project_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "claude_code.claude.json")
    original = path.read_bytes()
    code, _, err = run(capsys, "wrap", "--host", "claude-code", "--config", str(path), "--server", "summarizer")
    assert code == 1 and "local scope of project /home/me/work/app" in err
    code, _, err = run(
        capsys,
        "wrap",
        "--host",
        "claude-code",
        "--config",
        str(path),
        "--scope",
        "local",
        "--project-dir",
        "/home/me/work/app",
        "--all",
        "--policy",
        policy,
        "--name-from-key",
    )
    assert code == 0, err
    data = load_config(path, "claude-code").data
    entry = data["projects"]["/home/me/work/app"]["mcpServers"]["summarizer"]
    assert parse_proxy_args(entry["args"]).options["--name"] == "summarizer"
    assert not is_wrapped(data["mcpServers"]["memory"])
    code, _, _ = run(
        capsys,
        "unwrap",
        "--host",
        "claude-code",
        "--config",
        str(path),
        "--scope",
        "local",
        "--project-dir",
        "/home/me/work/app",
        "--all",
    )
    assert code == 0 and path.read_bytes() == original


# -- entry shapes ------------------------------------------------------------------------------------


def test_url_entries_become_stdio_entries_with_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    vscode = copy_fixture(tmp_path, "vscode.mcp.json")
    assert run(capsys, "wrap", "--host", "vscode", "--config", str(vscode), "--server", "github")[0] == 0
    github = servers_of("vscode", vscode)["github"]
    assert github["type"] == "stdio" and "url" not in github and "headers" not in github
    assert github["args"] == [
        "--name",
        "github",
        "--url",
        "https://api.githubcopilot.com/mcp/",
        "--header",
        "Authorization: Bearer ${input:github-token}",
    ]

    gemini = copy_fixture(tmp_path, "gemini.settings.json")
    assert run(capsys, "wrap", "--host", "gemini", "--config", str(gemini), "--server", "streamed")[0] == 0
    streamed = servers_of("gemini", gemini)["streamed"]
    assert streamed == {
        "command": proxy_invocation().command,
        "args": [
            "--name",
            "streamed",
            "--url",
            "https://stream.example.com/mcp",
            "--header",
            "Authorization: Bearer $STREAM_TOKEN",
        ],
        "timeout": 5000,
    }

    codex = copy_fixture(tmp_path, "codex.config.toml")
    assert (
        run(capsys, "wrap", "--host", "codex", "--config", str(codex), "--server", "docs server", "--policy", policy)[0]
        == 0
    )
    docs = tomllib.loads(codex.read_text())["mcp_servers"]["docs server"]
    assert docs["args"] == [
        "--policy",
        policy,
        "--name",
        "docs server",
        "--url",
        "https://docs.example.com/mcp",
        "--header",
        "X-Team: platform",
        "--header",
        "Authorization: Bearer ${DOCS_TOKEN}",
    ]
    assert docs["env_vars"] == ["DOCS_TOKEN"] and docs["enabled"] is True
    assert not {"url", "bearer_token_env_var", "http_headers"} & set(docs)


def test_comments_and_formatting_survive(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    vscode = copy_fixture(tmp_path, "vscode.mcp.json")
    original = vscode.read_text()
    assert run(capsys, "wrap", "--host", "vscode", "--config", str(vscode), "--all", "--policy", policy)[0] == 0
    text = vscode.read_text()
    for line in (
        "// VS Code reads this file as JSONC: comments and trailing commas are fine.",
        "    /* a local server */",
        '      "password": true,',
        '    "old-sse": {"type": "sse", "url": "http://localhost:3001/sse"},',
        '      "envFile": "${workspaceFolder}/.env",',
    ):
        assert line in original and line in text
    assert "// the example" in text

    codex = copy_fixture(tmp_path, "codex.config.toml")
    assert run(capsys, "wrap", "--host", "codex", "--config", str(codex), "--all", "--policy", policy)[0] == 0
    text = codex.read_text()
    for line in (
        "# Codex configuration",
        "# the example summarizer",
        "[mcp_servers.summarizer.env]",
        'LOG_LEVEL = "debug"',
        "[profiles.fast]",
        'model = "gpt-5-mini"',
    ):
        assert line in text
    assert text.startswith('# Codex configuration\nmodel = "gpt-5-codex"\n')
    assert 'args = [\n  "--policy",\n' in text and '  "--verbose",\n]' in text, (
        "a multi-line array stays multi-line, with the file's indentation"
    )
    assert 'command = "' + proxy_invocation().command + '"   # the interpreter\n' in text, "a comment stays"


def test_windows_line_endings_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    path = tmp_path / "claude_desktop_config.json"
    original = (FIXTURES / "claude_desktop_config.json").read_bytes().replace(b"\n", b"\r\n")
    path.write_bytes(original)
    assert run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)[0] == 0
    assert b"\n" not in path.read_bytes().replace(b"\r\n", b"")
    assert run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(path), "--all")[0] == 0
    assert path.read_bytes() == original


def test_toml_inline_table_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.toml"
    original = '[mcp_servers]\nweather = { command = "weather-mcp", args = ["--units", "metric"] }  # inline\n'
    path.write_text(original)
    assert run(capsys, "wrap", "--host", "codex", "--config", str(path), "--all")[0] == 0
    entry = tomllib.loads(path.read_text())["mcp_servers"]["weather"]
    assert parse_proxy_args(entry["args"]).command == ["weather-mcp", "--units", "metric"]
    assert path.read_text().endswith("  # inline\n")
    assert run(capsys, "unwrap", "--host", "codex", "--config", str(path), "--all")[0] == 0
    assert path.read_text() == original


def test_a_symlinked_config_stays_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = copy_fixture(tmp_path, "cursor.mcp.json")
    link = tmp_path / "mcp.json"
    link.symlink_to(real)
    assert run(capsys, "wrap", "--host", "cursor", "--config", str(link), "--all")[0] == 0
    assert link.is_symlink() and is_wrapped(servers_of("cursor", real)["summarizer"])


# -- unwrap without an exact record ------------------------------------------------------------------


def test_unwrap_without_the_record_rebuilds_from_the_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    for host, fixture in (("claude-desktop", "claude_desktop_config.json"), ("cursor", "cursor.mcp.json")):
        path = copy_fixture(tmp_path, fixture)
        before = servers_of(host, path)
        assert run(capsys, "wrap", "--host", host, "--config", str(path), "--all", "--policy", policy)[0] == 0
        record_path(path).unlink()
        code, out, _ = run(capsys, "unwrap", "--host", host, "--config", str(path), "--all")
        assert code == 0 and "no record of the original" in out
        assert servers_of(host, path) == before


def test_a_record_an_older_version_left_beside_the_config_is_used_and_moved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    original = path.read_bytes()
    assert run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)[0] == 0
    legacy = path.parent / SIDECAR_NAME
    record_path(path).rename(legacy)  # where versions before 0.2 kept it
    code, _, err = run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(path), "--all")
    assert code == 0, err
    assert path.read_bytes() == original  # restored byte for byte from the old record
    assert not legacy.exists()


def test_an_older_shared_record_file_keeps_the_other_configs_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    """Older versions kept one record file per folder, for every config in it: moving one config's
    records to the state dir leaves the others' where they are, and nothing is lost."""
    first = copy_fixture(tmp_path, "claude_desktop_config.json")
    second = first.with_name("second.json")
    shutil.copyfile(first, second)
    originals = {first: first.read_bytes(), second: second.read_bytes()}
    legacy = first.parent / SIDECAR_NAME
    merged: list[Any] = []
    for path in (first, second):
        assert (
            run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)[0] == 0
        )
        merged += json.loads(record_path(path).read_text())["records"]
        record_path(path).unlink()
    legacy.write_text(json.dumps({"version": 1, "records": merged}))  # as versions before 0.2 wrote it
    assert run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(first), "--all")[0] == 0
    assert first.read_bytes() == originals[first]
    left = json.loads(legacy.read_text())["records"]
    assert left and {r["file"] for r in left} == {"second.json"}  # the other config's records stay
    assert run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(second), "--all")[0] == 0
    assert second.read_bytes() == originals[second]  # restored byte for byte from them
    assert not legacy.exists()


def test_unwrap_after_reformatting_restores_the_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "claude_code.mcp.json")
    before = servers_of("claude-code", path)
    assert run(capsys, "wrap", "--host", "claude-code", "--config", str(path), "--all", "--policy", policy)[0] == 0
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4))  # the host rewrote the file its own way
    code, out, _ = run(capsys, "unwrap", "--host", "claude-code", "--config", str(path), "--all")
    assert code == 0 and "formatting had changed" in out
    assert servers_of("claude-code", path) == before


def test_unwrap_keeps_edits_made_while_wrapped(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    before = servers_of("claude-desktop", path)
    assert run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)[0] == 0
    data = json.loads(path.read_text())
    data["mcpServers"]["summarizer"]["env"]["LOG_LEVEL"] = "info"
    path.write_text(json.dumps(data, indent=2))
    code, out, _ = run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(path), "--all")
    assert code == 0 and "edited since wrap" in out
    after = servers_of("claude-desktop", path)
    assert after["summarizer"] == {**before["summarizer"], "env": {"LOG_LEVEL": "info"}}
    assert after["filesystem"] == before["filesystem"]


# -- listing -------------------------------------------------------------------------------------------


def test_list_shows_which_servers_are_wrapped(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    assert (
        run(
            capsys,
            "wrap",
            "--host",
            "claude-desktop",
            "--config",
            str(path),
            "--server",
            "summarizer",
            "--policy",
            policy,
        )[0]
        == 0
    )
    code, out, _ = run(capsys, "wrap", "--list", "--host", "claude-desktop", "--config", str(path))
    assert code == 0
    assert f"{path}: 1 of 3 servers wrapped" in out
    assert re.search(
        r"summarizer\s+wrapped\s+/usr/bin/python3 /home/me/servers/summarizer.py --verbose "
        rf"\(policy: {re.escape(policy)}\)",
        out,
    )
    assert re.search(r"filesystem\s+not wrapped\s+npx -y", out)


def test_list_looks_in_every_hosts_default_places(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    for relative, fixture in (
        (".cursor/mcp.json", "cursor.mcp.json"),
        (".codex/config.toml", "codex.config.toml"),
        (".config/Claude/claude_desktop_config.json", "claude_desktop_config.json"),
    ):
        (home / relative).parent.mkdir(parents=True)
        shutil.copyfile(FIXTURES / fixture, home / relative)
    (project / ".vscode").mkdir(parents=True)
    shutil.copyfile(FIXTURES / "vscode.mcp.json", project / ".vscode" / "mcp.json")
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.chdir(project)
    code, out, _ = run(capsys, "wrap", "--list")
    assert code == 0
    assert f"Cursor (user): {home}/.cursor/mcp.json: 0 of 2 servers wrapped" in out
    assert f"Codex (user): {home}/.codex/config.toml: 0 of 3 servers wrapped" in out
    assert f"Claude Desktop (user): {home}/.config/Claude/claude_desktop_config.json: 0 of 3" in out
    assert f"VS Code (project): {project}/.vscode/mcp.json: 0 of 3 servers wrapped" in out
    assert "cannot be wrapped" in out  # the SSE entry
    assert "no config file for: Claude Code (user)" in out


def test_a_project_config_nested_too_deeply_is_reported_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wrap --list` (and doctor) read the project configs of the current directory: a checked-out
    repository's `.vscode/mcp.json` of 50,000 nested brackets, or a Continue YAML file like it, is
    one problem in the listing, not a traceback that ends the command."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / ".vscode").mkdir(parents=True)
    (project / ".vscode" / "mcp.json").write_text("[" * 50_000 + "]" * 50_000)
    (project / ".continue" / "mcpServers").mkdir(parents=True)
    (project / ".continue" / "mcpServers" / "deep.yaml").write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(project)
    _, out, err = run(capsys, "wrap", "--list")  # raised RecursionError before
    assert out.count("nested too deeply to read as an MCP config") == 2, out + err


# -- where files are, and how the proxy is started ------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "scope", "platform", "expected"),
    [
        ("claude-desktop", "user", "darwin", "/Users/me/Library/Application Support/Claude/claude_desktop_config.json"),
        ("claude-desktop", "user", "win32", r"C:\Users\me\AppData\Roaming\Claude\claude_desktop_config.json"),
        ("claude-desktop", "user", "linux", "/Users/me/.config/Claude/claude_desktop_config.json"),
        ("claude-code", "user", "linux", "/Users/me/.claude.json"),
        ("claude-code", "project", "linux", "/work/app/.mcp.json"),
        ("claude-code", "local", "darwin", "/Users/me/.claude.json"),
        ("cursor", "user", "win32", r"C:\Users\me\.cursor\mcp.json"),
        ("cursor", "project", "darwin", "/work/app/.cursor/mcp.json"),
        ("vscode", "user", "darwin", "/Users/me/Library/Application Support/Code/User/mcp.json"),
        ("vscode", "user", "win32", r"C:\Users\me\AppData\Roaming\Code\User\mcp.json"),
        ("vscode", "user", "linux", "/Users/me/.config/Code/User/mcp.json"),
        ("vscode", "project", "linux", "/work/app/.vscode/mcp.json"),
        ("windsurf", "user", "darwin", "/Users/me/.codeium/windsurf/mcp_config.json"),
        ("gemini", "user", "linux", "/Users/me/.gemini/settings.json"),
        ("gemini", "project", "linux", "/work/app/.gemini/settings.json"),
        ("codex", "user", "linux", "/Users/me/.codex/config.toml"),
        ("codex", "user", "win32", r"C:\Users\me\.codex\config.toml"),
        ("vscode", "settings", "linux", "/Users/me/.config/Code/User/settings.json"),
        ("zed", "user", "linux", "/Users/me/.config/zed/settings.json"),
        ("zed", "user", "darwin", "/Users/me/.config/zed/settings.json"),
        ("zed", "user", "win32", r"C:\Users\me\AppData\Roaming\Zed\settings.json"),
        ("zed", "project", "linux", "/work/app/.zed/settings.json"),
        (
            "cline",
            "user",
            "linux",
            "/Users/me/.config/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
        ),
        (
            "cline",
            "user",
            "darwin",
            "/Users/me/Library/Application Support/Code/User/globalStorage/"
            "saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
        ),
        ("lmstudio", "user", "darwin", "/Users/me/.lmstudio/mcp.json"),
        ("lmstudio", "user", "win32", r"C:\Users\me\.lmstudio\mcp.json"),
        ("continue", "user", "darwin", "/Users/me/.continue/config.yaml"),
        ("continue", "user", "win32", r"C:\Users\me\.continue\config.yaml"),
        ("continue", "project", "linux", "/work/app/.continue/mcpServers"),
        ("continue", "project", "win32", r"C:\work\app\.continue\mcpServers"),
    ],
)
def test_default_locations(host: str, scope: str, platform: str, expected: str) -> None:
    windows = platform == "win32"
    environ = {"APPDATA": r"C:\Users\me\AppData\Roaming", "USERPROFILE": r"C:\Users\me"} if windows else {}
    got = config_path(
        host,
        scope,
        project_dir=r"C:\work\app" if windows else "/work/app",
        environ=environ,
        platform=platform,
        home=None if windows else "/Users/me",
    )
    assert str(got) == expected


def test_default_locations_follow_the_hosts_variables() -> None:
    env = {"XDG_CONFIG_HOME": "/x", "CODEX_HOME": "/c", "CLAUDE_CONFIG_DIR": "/cc", "CONTINUE_GLOBAL_DIR": "/co"}
    assert (
        str(config_path("claude-desktop", environ=env, platform="linux", home="/h"))
        == "/x/Claude/claude_desktop_config.json"
    )
    assert str(config_path("codex", environ=env, platform="linux", home="/h")) == "/c/config.toml"
    assert str(config_path("claude-code", environ=env, platform="linux", home="/h")) == "/cc/.claude.json"
    assert str(config_path("continue", environ=env, platform="linux", home="/h")) == "/co/config.yaml"


def test_without_the_script_the_proxy_runs_as_a_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert proxy_invocation() == Invocation(str(Path(PY).parent / "mcp-sampling-proxy"))
    fake_python = tmp_path / "bin" / "python3"
    fake_python.parent.mkdir()
    fake_python.touch()
    monkeypatch.setattr(sys, "executable", str(fake_python))
    monkeypatch.setattr(
        shutil, "which", lambda name, path=None: None
    )  # no command on any PATH (wrap looks with shutil)
    assert proxy_invocation() == Invocation(str(fake_python), ("-m", "mcp_sampling_proxy"))
    path = copy_fixture(tmp_path, "cursor.mcp.json")
    original = path.read_bytes()
    assert run(capsys, "wrap", "--host", "cursor", "--config", str(path), "--server", "summarizer")[0] == 0
    entry = servers_of("cursor", path)["summarizer"]
    assert entry["command"] == str(fake_python)
    assert entry["args"] == ["-m", "mcp_sampling_proxy", "--name", "summarizer", "--", "uvx", "summarizer-mcp"]
    assert is_wrapped(entry)
    assert run(capsys, "unwrap", "--host", "cursor", "--config", str(path), "--all")[0] == 0
    assert path.read_bytes() == original


# -- the wrapped entry really runs ----------------------------------------------------------------------


# -- backups -------------------------------------------------------------------------------------------


def test_backups_go_to_the_state_dir_and_from_backup_restores_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    path = project / ".vscode" / "mcp.json"
    shutil.copyfile(FIXTURES / "vscode.mcp.json", path)
    original = path.read_bytes()
    monkeypatch.chdir(project)
    code, out, err = run(capsys, "wrap", "--host", "vscode", "--scope", "project", "--all", "--policy", policy)
    assert code == 0, err
    wrapped = path.read_bytes()
    assert sorted(p.name for p in (project / ".vscode").iterdir()) == ["mcp.json"]
    [wrap_backup] = re.findall(r"backup: (\S+) in ", out)
    assert (state / "backups" / wrap_backup).read_bytes() == original
    assert stat.S_IMODE((state / "backups").stat().st_mode) == 0o700

    code, out, _ = run(capsys, "unwrap", "--list-backups")
    assert code == 0
    assert re.search(rf"{re.escape(wrap_backup)}\s+\S+\s+before wrap\s+VS Code: {re.escape(str(path))}", out)

    path.write_text("{ broken by hand")
    code, out, err = run(capsys, "unwrap", "--from-backup", wrap_backup)
    assert code == 0, err
    assert path.read_bytes() == original
    [saved] = re.findall(r"the file as it was: backup (\S+)", out)
    assert (state / "backups" / saved).read_text() == "{ broken by hand"
    code, out, _ = run(capsys, "unwrap", "--list-backups")
    assert "before from-backup" in out

    code, _, err = run(capsys, "unwrap", "--from-backup", "19990101T000000")
    assert code == 1 and "no backup '19990101T000000'" in err and "--list-backups" in err
    assert path.read_bytes() == original
    assert wrapped != original


def test_list_backups_when_there_are_none(capsys: pytest.CaptureFixture[str], state: Path) -> None:
    code, out, _ = run(capsys, "unwrap", "--list-backups")
    assert code == 0 and f"no backups in {state / 'backups'}" in out


def test_new_hosts_and_vscode_locations_are_found_by_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    home = tmp_path / "home"
    user = home / ".config" / "Code" / "User"
    for relative, fixture in (
        (".config/zed/settings.json", "zed.settings.json"),
        (".lmstudio/mcp.json", "lmstudio.mcp.json"),
        (
            ".config/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json",
            "cline_mcp_settings.json",
        ),
        (".config/Code/User/settings.json", "vscode.settings.json"),
        (".config/Code/User/profiles/-6a1b2c3d/mcp.json", "vscode.mcp.json"),
    ):
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIXTURES / fixture, home / relative)
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "wrap", "--list")
    assert code == 0
    assert f"Zed (user): {home}/.config/zed/settings.json: 0 of 3 servers wrapped" in out
    assert f"LM Studio (user): {home}/.lmstudio/mcp.json: 0 of 2 servers wrapped" in out
    assert f"Cline (user): {user}/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json: 0 of 3" in out
    assert f"VS Code (settings): {user}/settings.json: 0 of 2 servers wrapped" in out
    assert f"VS Code (profile -6a1b2c3d): {user}/profiles/-6a1b2c3d/mcp.json: 0 of 3 servers wrapped" in out

    settings = user / "settings.json"
    original = settings.read_bytes()
    code, out, err = run(
        capsys, "wrap", "--host", "vscode", "--scope", "settings", "--server", "memory", "--policy", policy
    )
    assert code == 0, err
    assert f"VS Code: {settings} (mcp.servers)" in out
    text = settings.read_bytes()
    assert b"\r\n\t// servers from before VS Code 1.102 kept MCP in settings.json\r\n" in text
    assert b'"editor.tabSize": 4,\r\n}\r\n' in text
    entry = load_config(settings, "vscode").data["mcp"]["servers"]["memory"]
    assert parse_proxy_args(entry["args"]).command == ["npx", "-y", "@modelcontextprotocol/server-memory"]
    code, out, _ = run(capsys, "wrap", "--list", "--host", "vscode")
    assert f"VS Code (settings): {settings}: 1 of 2 servers wrapped" in out
    assert run(capsys, "unwrap", "--host", "vscode", "--scope", "settings", "--all")[0] == 0
    assert settings.read_bytes() == original


def test_codex_unwrap_after_an_edit_elsewhere_in_the_table_keeps_the_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "codex.config.toml")
    original = path.read_text()
    assert run(capsys, "wrap", "--host", "codex", "--config", str(path), "--all", "--policy", policy)[0] == 0
    slow = ("startup_timeout_sec = 20\n", "startup_timeout_sec = 20  # slow start\n")
    path.write_text(path.read_text().replace(*slow))
    code, out, _ = run(capsys, "unwrap", "--host", "codex", "--config", str(path), "--all")
    assert code == 0 and "formatting had changed" in out
    assert path.read_text() == original.replace(*slow)


# -- Continue: YAML lists of named entries, one file or a folder of them ------------------------------------


def continue_project(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with a YAML block file and a Claude-style JSON file in .continue/mcpServers/."""
    project = tmp_path / "project"
    folder = project / ".continue" / "mcpServers"
    folder.mkdir(parents=True)
    shutil.copyfile(FIXTURES / "continue.block.yaml", folder / "playwright-mcp.yaml")
    shutil.copyfile(FIXTURES / "continue.mcp.json", folder / "mcp.json")
    (folder / "notes.txt").write_text("not a server file")
    return project, folder


def test_continue_yaml_keeps_comments_and_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "continue.config.yaml")
    original = path.read_text()
    code, out, err = run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all", "--policy", policy)
    assert code == 0, err
    assert re.search(r"old events\s+cannot wrap: it uses the SSE transport", out)
    assert "a key variable the policy reads (api_key_env) and any ${VAR} a --header names go in the entry's env" in out
    text = path.read_text()
    proxy = proxy_invocation().command
    for line in (
        "# Continue's global config (~/.continue/config.yaml)\n",
        "name: My local config   # shown in the config picker\n",
        "    apiKey: ${{ secrets.ANTHROPIC_API_KEY }}\n",
        "  # the example summarizer, run from a checkout\n",
        "  # a remote one, its token from Continue's secrets\n",
        "  - name: old events\n    type: sse\n    url: http://localhost:3001/sse\n",
        "  - uses: anthropic/github-mcp     # a hub block: nothing local to wrap\n",
        "context:\n  - provider: code\n  - provider: diff\n# end of file\n",
    ):
        assert line in original and line in text, line
    # a block list gains the proxy's arguments as lines of its own; its items and their comments stay
    assert (
        f'    command: "{proxy}"   # the interpreter\n    args:\n      - "--policy"\n      - "{policy}"\n'
        '      - "--name"\n      - "summarizer"\n      - "--"\n      - "/usr/bin/python3"\n'
        '      - /home/me/servers/summarizer.py\n      - "--verbose"     # chatty logs\n\n'
        "    env:\n      LOG_LEVEL: debug\n"
    ) in text
    # a flow list stays one flow list; an entry written as a flow mapping stays one
    assert f'    args: ["--policy", "{policy}", "--name", "SQLite MCP", "--", "npx", "-y", "mcp-sqlite", ' in text
    assert f'  - {{name: memory, command: "{proxy}", args: ["--policy", ' in text
    # args are added right after command, before the comment that followed it
    assert (
        f'    command: "{proxy}"\n    args: ["--policy", "{policy}", "--name", "plain-binary", "--", '
        '"weather-mcp"]\n    # no arguments\n' in text
    )
    docs = servers_of("continue", path)["docs"]
    assert docs == {
        "name": "docs",
        "type": "stdio",
        "command": proxy,
        "args": [
            "--policy",
            policy,
            "--name",
            "docs",
            "--url",
            "https://docs.example.com/mcp",
            "--header",
            "Authorization: Bearer ${{ secrets.DOCS_TOKEN }}",
            "--header",
            "X-Team: platform",
        ],
    }
    assert run(capsys, "unwrap", "--host", "continue", "--config", str(path), "--all")[0] == 0
    assert path.read_text() == original


def test_continue_block_file_with_indentless_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy_fixture(tmp_path, "continue.block.yaml")
    original = path.read_bytes()
    assert run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all")[0] == 0
    assert path.read_text() == (
        "name: Browser tools   # a workspace block\nversion: 0.0.1\nschema: v1\nmcpServers:\n"
        f'- name: Browser search\n  command: "{proxy_invocation().command}"\n  args:\n'
        '  - "--name"\n  - "Browser search"\n  - "--"\n  - "npx"\n'
        '  - "@playwright/mcp@latest"\n  - --headless\n  env:\n    DISPLAY: ":0"\n'
    )
    assert run(capsys, "unwrap", "--host", "continue", "--config", str(path), "--all")[0] == 0
    assert path.read_bytes() == original


def test_continue_project_scope_handles_every_file_in_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, folder = continue_project(tmp_path)
    block, claude_style = folder / "playwright-mcp.yaml", folder / "mcp.json"
    originals = {p: p.read_bytes() for p in (block, claude_style)}
    monkeypatch.chdir(project)

    code, _, err = run(capsys, "wrap", "--host", "continue", "--scope", "project", "--server", "nope")
    assert code == 1
    assert f"{folder} (2 files): no server named 'nope' (servers: filesystem, tickets, Browser search)" in err

    code, out, err = run(
        capsys, "wrap", "--host", "continue", "--scope", "project", "--server", "Browser search", "--policy", policy
    )
    assert code == 0, err
    assert f"Continue: {block}" in out and str(claude_style) not in out
    assert claude_style.read_bytes() == originals[claude_style]
    assert is_wrapped(servers_of("continue", block)["Browser search"])

    code, out, err = run(capsys, "wrap", "--host", "continue", "--scope", "project", "--all", "--policy", policy)
    assert code == 0, err
    assert re.search(r"Browser search\s+already wrapped", out) and out.count("backup: ") == 1
    json_servers = servers_of("continue", claude_style)
    assert all(is_wrapped(e) for e in json_servers.values())
    assert json_servers["tickets"]["type"] == "stdio" and "headers" not in json_servers["tickets"]
    assert parse_proxy_args(json_servers["tickets"]["args"]).headers == ["Authorization: Bearer ${TICKETS_TOKEN}"]
    assert sorted(p.name for p in folder.iterdir()) == ["mcp.json", "notes.txt", "playwright-mcp.yaml"]

    code, out, _ = run(capsys, "wrap", "--list", "--host", "continue")
    assert f"Continue (project): {claude_style}: 2 of 2 servers wrapped" in out
    assert f"Continue (project): {block}: 1 of 1 servers wrapped" in out
    code, out, _ = run(capsys, "wrap", "--list", "--host", "continue", "--config", str(folder))
    assert f"Continue (given): {claude_style}: 2 of 2" in out and f"Continue (given): {block}: 1 of 1" in out

    code, out, err = run(capsys, "unwrap", "--host", "continue", "--config", str(folder), "--all")
    assert code == 0, err
    assert out.count("restored exactly") == 3
    assert {p: p.read_bytes() for p in originals} == originals


def test_continue_project_scope_without_server_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".continue" / "mcpServers").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "wrap", "--host", "continue", "--scope", "project", "--all")
    assert code == 1
    assert f"{tmp_path}/.continue/mcpServers: no server files in this folder (*.yaml, *.yml, *.json)" in err


def test_continue_files_are_found_by_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".continue").mkdir(parents=True)
    shutil.copyfile(FIXTURES / "continue.config.yaml", home / ".continue" / "config.yaml")
    project, folder = continue_project(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "CONTINUE_GLOBAL_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.chdir(project)
    code, out, _ = run(capsys, "wrap", "--list")
    assert code == 0
    assert f"Continue (user): {home}/.continue/config.yaml: 0 of 6 servers wrapped" in out
    assert f"Continue (project): {folder}/mcp.json: 0 of 2 servers wrapped" in out
    assert f"Continue (project): {folder}/playwright-mcp.yaml: 0 of 1 servers wrapped" in out
    assert re.search(r"SQLite MCP\s+not wrapped\s+npx -y mcp-sqlite /home/me/data/app.db", out)
    assert re.search(r"old events\s+not wrapped\s+http://localhost:3001/sse \(SSE, cannot be wrapped\)", out)

    monkeypatch.setenv("CONTINUE_GLOBAL_DIR", str(tmp_path / "elsewhere"))
    code, out, _ = run(capsys, "wrap", "--list", "--host", "continue")
    assert f"Continue (user): {tmp_path}/elsewhere/config.yaml: no such file" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "mcpServers:\n  - &base\n    name: a\n    command: x\n  - name: b\n    command: *base\n",
            "x.yaml:2: mcpServers uses a YAML anchor or alias (&base / *base)",
        ),
        (
            "defaults: &env {A: '1'}\nmcpServers:\n  - name: a\n    command: x\n    env: *env\n",
            "x.yaml:5: mcpServers uses a YAML anchor or alias",
        ),
        (
            "mcpServers:\n  - name: a\n    command: x\n  - name: a\n    command: y\n",
            "x.yaml:4: a second server named 'a' (the first is at line 2)",
        ),
        ("mcpServers:\n  - command: x\n", "x.yaml:2: an entry of mcpServers has no name"),
        ("mcpServers:\n  - name: a\n    command: x\n    command: y\n", "x.yaml:2: the key 'command' appears twice"),
        ("mcpServers:\n  - name: 7\n    command: x\n", "x.yaml:2: the entry's name 7 is not a string; quote it"),
        ("mcpServers:\n  a:\n    command: x\n", "x.yaml:2: mcpServers is not a list of server entries"),
        (
            "mcpServers:\n  - name: a\n    command: [x\n",
            "x.yaml:4:1: while parsing a flow sequence, expected ',' or ']'",
        ),
        ("name: a\n---\nname: b\n", "x.yaml:2:1: expected a single document in the stream, but found another document"),
    ],
)
def test_continue_yaml_it_cannot_edit_safely_is_refused_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all")
    assert code == 1
    assert f"{tmp_path}/{message}" in err and "nothing written" in err
    assert path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "state") == ["x.yaml"]


def test_continue_remote_with_request_options_the_proxy_would_drop_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    text = (
        "mcpServers:\n  - name: internal\n    type: streamable-http\n    url: https://10.0.0.5/mcp\n"
        "    requestOptions:\n      verifySsl: false\n"
    )
    path.write_text(text)
    code, out, _ = run(capsys, "wrap", "--host", "continue", "--config", str(path), "--server", "internal")
    assert code == 1
    assert "cannot wrap: its requestOptions has verifySsl, which the proxy would not apply" in out
    assert path.read_text() == text


def test_continue_single_server_json_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "playwright.json"
    path.write_text('{"command": "npx", "args": ["@playwright/mcp@latest"]}\n')
    code, _, err = run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all")
    assert code == 1
    assert f"{path}: holds one server without a name (Continue's single-server JSON)" in err
    assert '{"mcpServers": {"NAME": {...}}}' in err


def test_continue_unwrap_after_edits_keeps_the_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "continue.config.yaml")
    original = path.read_text()
    before = servers_of("continue", path)
    assert run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all", "--policy", policy)[0] == 0
    # a comment added inside an entry: the record no longer matches its text, the values are restored
    edited = path.read_text().replace(
        "    env:\n      LOG_LEVEL: debug\n", "    env:   # set by hand\n      LOG_LEVEL: debug\n"
    )
    # and a value changed while wrapped: kept, the rest rebuilt from the proxy's arguments
    edited = edited.replace("    connectionTimeout: 30000\n", "    connectionTimeout: 60000\n")
    path.write_text(edited)
    code, out, err = run(capsys, "unwrap", "--host", "continue", "--config", str(path), "--all")
    assert code == 0, err
    assert re.search(r"summarizer\s+restored \(its formatting had changed since wrap\)", out)
    assert re.search(r"SQLite MCP\s+rebuilt from the proxy's arguments \(edited since wrap", out)
    assert servers_of("continue", path) == {
        **before,
        "SQLite MCP": {**before["SQLite MCP"], "connectionTimeout": 60000},
    }
    # only the changed values' text differs: a command comes back as a JSON-style quoted string, the
    # block list of arguments loses the proxy's lines and keeps its own, comments stay
    expected = original
    for before_text, after_text in (
        (
            "    command: /usr/bin/python3   # the interpreter\n",
            '    command: "/usr/bin/python3"   # the interpreter\n',
        ),
        ("    env:\n      LOG_LEVEL: debug\n", "    env:   # set by hand\n      LOG_LEVEL: debug\n"),
        ("    type: stdio\n    command: npx\n", '    type: stdio\n    command: "npx"\n'),
        ("    connectionTimeout: 30000\n", "    connectionTimeout: 60000\n"),
    ):
        assert before_text in expected
        expected = expected.replace(before_text, after_text)
    assert path.read_text() == expected


def test_continue_unwrap_without_the_record_rebuilds_a_remote_entry_in_continues_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = copy_fixture(tmp_path, "continue.config.yaml")
    before = servers_of("continue", path)
    assert run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all", "--policy", policy)[0] == 0
    record_path(path).unlink()
    code, out, _ = run(capsys, "unwrap", "--host", "continue", "--config", str(path), "--all")
    assert code == 0 and out.count("no record of the original") == 5
    after = servers_of("continue", path)
    assert after["docs"] == {
        "name": "docs",
        "type": "streamable-http",
        "url": "https://docs.example.com/mcp",
        "requestOptions": {"headers": before["docs"]["requestOptions"]["headers"]},
    }
    assert {k: v for k, v in after.items() if k != "docs"} == {k: v for k, v in before.items() if k != "docs"}
    assert "# the example summarizer, run from a checkout\n" in path.read_text()


def test_continue_windows_line_endings_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    path = tmp_path / "config.yaml"
    original = (FIXTURES / "continue.config.yaml").read_bytes().replace(b"\n", b"\r\n")
    path.write_bytes(original)
    assert run(capsys, "wrap", "--host", "continue", "--config", str(path), "--all", "--policy", policy)[0] == 0
    assert b"\n" not in path.read_bytes().replace(b"\r\n", b"")
    assert run(capsys, "unwrap", "--host", "continue", "--config", str(path), "--all")[0] == 0
    assert path.read_bytes() == original


def test_wrap_writes_sandbox_profiles_into_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    """For servers it knows (here the filesystem server), wrap writes the sandbox.servers entry that grants
    what the server needs into the policy, under the name the proxy will use, keeping the rest of the file
    byte for byte; a second wrap keeps the entry, and an entry the user wrote is never replaced. Started by
    npx, the server needs no network but npm's registry: its own npx cache starts empty."""
    from mcp_sampling_proxy.config.settings import parse_settings

    before = Path(policy).read_text()
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    code, out, _ = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)
    assert code == 0
    assert f"{policy}: sandbox profiles added under sandbox.servers for 'filesystem'" in out
    text = Path(policy).read_text()
    assert text.startswith(before)  # the user's lines as they were
    assert (
        text[len(before) :]
        == '\nsandbox:\n  servers:\n    filesystem: {write: ["/home/me/Documents"], network: [registry.npmjs.org]}\n'
    )
    narrowed = parse_settings(text, policy).sandbox.for_server("filesystem")
    assert narrowed.write == ("/home/me/Documents",) and narrowed.network.mode == "relay"
    assert [str(host) for host in narrowed.network.hosts] == ["registry.npmjs.org"]
    assert parse_settings(text, policy).sandbox.for_server("summarizer").write == ()  # unknown: the safe default
    # the user narrows it further; wrapping again keeps their entry
    Path(policy).write_text(
        text.replace('{write: ["/home/me/Documents"], network: [registry.npmjs.org]}', "{network: false}")
    )
    run(capsys, "unwrap", "--host", "claude-desktop", "--config", str(path), "--all")
    code, out, _ = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)
    assert (
        code == 0 and "every wrapped server has a sandbox entry already (kept your own entry for 'filesystem')" in out
    )
    assert parse_settings(Path(policy).read_text(), policy).sandbox.for_server("filesystem").write == ()


def test_wrap_without_a_policy_file_prints_the_profiles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_SAMPLING_PROXY_CONFIG_DIR", str(tmp_path / "no-config"))
    path = copy_fixture(tmp_path, "claude_desktop_config.json")
    code, out, _ = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all")
    assert code == 0
    assert "there is no policy file at" in out and "`mcp-sampling-proxy init` makes one" in out
    assert '"filesystem": {write: ["/home/me/Documents"], network: [registry.npmjs.org]}' in out


def test_wrap_says_when_the_policys_key_will_not_reach_the_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Desktop starts servers without the shell's variables: a key exported there never reaches
    the proxy, and wrap says so with the ways that work; an entry whose env has it gets no such note."""
    policy = write_policy(
        tmp_path,
        "llm:\n  providers:\n    p:\n      type: openai\n      api_key_env: MY_LLM_KEY\n      models: [m]\n",
    )
    monkeypatch.setenv("MY_LLM_KEY", "sk-in-this-shell-only")
    path = tmp_path / "cfg" / "claude_desktop_config.json"
    path.parent.mkdir()
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "bare": {"command": "/usr/bin/python3", "args": ["a.py"]},
                    "keyed": {"command": "/usr/bin/python3", "args": ["b.py"], "env": {"MY_LLM_KEY": "k"}},
                }
            }
        )
    )
    code, out, _ = run(capsys, "wrap", "--host", "claude-desktop", "--config", str(path), "--all", "--policy", policy)
    assert code == 0
    (note,) = [line for line in out.splitlines() if "will not reach the proxy" in line]
    assert note.startswith("MY_LLM_KEY will not reach the proxy of 'bare': it is not in the entry's env (Claude")
    assert "starts servers with its own environment, not your shell's" in note
    assert "api_key_file (a 0600 file) or api_key_command" in note
    assert f"or add MY_LLM_KEY to the entry's env in {path}" in note
    assert "'keyed'" not in note

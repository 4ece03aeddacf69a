"""The record of a sandboxed start: the facts its plan was made from are noted as the plan's code asks them
and hold again only while the filesystem reads the same (transport/plan_facts.py); the record is believed
only under the state key's seal, for its own start key, in the state directory config/dirs.py names
(transport/start_record.py)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_sampling_proxy.config.dirs import state_dir
from mcp_sampling_proxy.config.policy_file import MAX_POLICY_BYTES
from mcp_sampling_proxy.quotas import integrity
from mcp_sampling_proxy.transport import start_record
from mcp_sampling_proxy.transport.netns import bwrap_child_pid
from mcp_sampling_proxy.transport.plan_facts import (
    FactLog,
    facts_hold,
    files_beside,
    git_scan,
)
from mcp_sampling_proxy.transport.start_record import Record, read_record, write_record

KEY = b"k" * 32


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home with a secret's directory, a granted project holding a link, and a cache to make."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / "project" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "project" / "link").symlink_to(tmp_path / "elsewhere")
    return tmp_path


def plan_like(home: Path) -> list[object]:
    """What a sandbox plan asks of the filesystem, through the calls it uses."""
    os.makedirs(home / "cache" / "npm", exist_ok=True)
    return [
        os.path.lexists(home / ".aws" / "credentials"),
        os.path.isdir(home / ".ssh"),
        os.path.realpath(home / "project" / "link"),
        sorted(p.name for p in (home / ".ssh").iterdir()),
        [e.name for e in os.scandir(home / "project") if e.is_dir(follow_symlinks=False)],
        os.access(home / "project", os.W_OK),
        shutil.which("sh"),
        os.getcwd(),
    ]


def recorded(home: Path) -> FactLog:
    """The facts of a start that made its directories before (as every start but the first)."""
    log = FactLog()
    with log.recording():
        plan_like(home)
    assert not log.spoiled
    return log


def test_facts_hold_until_the_filesystem_reads_otherwise(home: Path) -> None:
    first = recorded(home)
    assert not facts_hold(first.facts)  # that start made the cache directory: it read "missing" first
    log = recorded(home)
    assert {fact[0] for fact in log.facts} >= {"stat", "readlink", "listdir", "scandir", "access", "getcwd", "mkdir"}
    assert facts_hold(log.facts)


def test_a_directory_made_with_its_parents_holds_at_once_and_is_made_again(home: Path) -> None:
    """A first start makes its data directory and the missing parents (`mkdir(parents=True)` fails for want of
    a parent, makes it, tries again): the failures it went past are not facts, so its record holds at once;
    asked again where the directories are gone, they are made in order, as then."""
    data = home / "share" / "proxy" / "servers" / "one"
    log = FactLog()
    with log.recording():
        data.mkdir(mode=0o700, parents=True)
    assert [fact[2] for fact in log.facts] == [("ok",)] * 4
    assert facts_hold(log.facts)
    shutil.rmtree(home / "share")
    assert facts_hold(log.facts) and data.is_dir()


@pytest.mark.parametrize(
    "change",
    [
        lambda home: (home / ".aws").mkdir() or (home / ".aws" / "credentials").write_text("[default]\n"),
        lambda home: (home / "project" / "link").unlink() or (home / "project" / "link").symlink_to(home / ".ssh"),
        lambda home: (home / "project" / "new").mkdir(),
        lambda home: (home / ".ssh" / "id_ed25519").write_text("listed: a file counts"),
        lambda home: (home / "project" / "another-link").symlink_to(home),
        lambda home: (home / "project").chmod(0o500),
        lambda home: shutil.rmtree(home / ".ssh"),
    ],
    ids=[
        "a-secret-appears",
        "a-link-leads-elsewhere",
        "a-directory-holds-more",
        "a-listed-directory-holds-a-file-more",
        "a-link-appears-in-a-scanned-directory",
        "a-mode-changes",
        "one-is-gone",
    ],
)
def test_a_changed_fact_does_not_hold(home: Path, change: Callable[[Path], object]) -> None:
    recorded(home)
    log = recorded(home)
    assert facts_hold(log.facts)
    change(home)
    try:
        assert not facts_hold(log.facts)
    finally:
        (home / "project").chmod(0o700)


def test_a_file_written_where_the_plan_scans_for_directories_changes_nothing(home: Path) -> None:
    """The scan of a write grant looks for directories (.git): a server's files there keep the record."""
    recorded(home)
    log = recorded(home)
    (home / "project" / "notes.txt").write_text("written by the server")
    (home / "project" / "sub" / "data.db").write_text("")
    assert facts_hold(log.facts)


def test_the_git_scan_of_a_write_grant_is_one_fact_its_repositories(home: Path) -> None:
    """What the plan reads of the scan is the repositories it finds: a directory made since in the grant (a
    build's, a new package's) keeps the record holding; a repository made since does not."""
    (home / "project" / ".git" / "hooks").mkdir(parents=True)
    log = FactLog()
    with log.recording():
        found = git_scan([str(home / "project")])
    assert found == [str(home / "project" / ".git" / "hooks")]
    assert [fact[0] for fact in log.facts] == ["git_scan"]  # its listings and looks are not facts of their own
    assert facts_hold(log.facts)
    (home / "project" / "build" / "out").mkdir(parents=True)
    (home / "project" / "sub" / "new").mkdir()
    assert facts_hold(log.facts)
    (home / "project" / "sub" / ".git" / "hooks").mkdir(parents=True)  # a repository in the grant: read-only
    assert not facts_hold(log.facts)


def test_the_files_named_after_one_of_the_proxys_are_one_fact(home: Path) -> None:
    """The plan hides an audit log's rotations, lock and seal with it: what it reads of the folder is the
    files named after the log, so another file made beside it keeps the record holding; a rotation does not."""
    log_file = home / "audit.jsonl"
    (home / "audit.jsonl.lock").write_text("")
    log = FactLog()
    with log.recording():
        alone, found = files_beside(str(log_file))
    assert found == [str(home / "audit.jsonl.lock")] and not alone  # (the home holds more)
    assert [fact[0] for fact in log.facts] == ["beside"]
    (home / "notes.txt").write_text("a file of the user's, beside the log")
    assert facts_hold(log.facts)
    (home / "audit.jsonl.1").write_text("rotated")
    assert not facts_hold(log.facts)


def test_whether_a_log_has_a_folder_of_its_own_is_one_fact(home: Path) -> None:
    """A log alone in its folder (with its rotations) is hidden with the folder: its rotations to come keep
    that so; anything else made there changes the plan (the log is then hidden file by file)."""
    folder = home / "logs"
    folder.mkdir()
    (folder / "audit.jsonl").write_text("")
    (folder / "audit.jsonl.lock").write_text("")
    log = FactLog()
    with log.recording():
        assert files_beside(str(folder / "audit.jsonl"))[0]
    assert [fact[0] for fact in log.facts] == ["beside"]
    (folder / "audit.jsonl.1").write_text("rotated")
    assert facts_hold(log.facts)
    (folder / "other.log").write_text("")
    assert not facts_hold(log.facts)


def test_what_cannot_be_asked_again_spoils_the_log(home: Path) -> None:
    log = FactLog()
    with log.recording():
        fd = os.open(home, os.O_RDONLY)
        try:
            os.stat(fd)
        finally:
            os.close(fd)
    assert log.spoiled


def test_a_question_asked_with_its_defaults_spelled_out_is_noted_and_another_kind_spoils(home: Path) -> None:
    log = FactLog()
    with log.recording():
        os.access(home, os.R_OK, follow_symlinks=True)  # the same question as os.access(home, os.R_OK)
    assert log.facts == [("access", (str(home), os.R_OK), True)] and not log.spoiled
    with log.recording():
        os.access(home, os.R_OK, effective_ids=True)  # not the question a later start asks
    assert log.spoiled


def test_another_threads_questions_are_not_noted_and_os_is_restored(home: Path) -> None:
    originals = (os.stat, os.lstat, os.listdir, os.scandir, os.mkdir, os.access, os.getcwd, os.readlink)
    log = FactLog()
    with pytest.raises(RuntimeError), log.recording():
        worker = threading.Thread(target=lambda: os.path.exists(home / "elsewhere"))
        worker.start()
        worker.join()
        raise RuntimeError("the plan failed")
    assert log.facts == [] and not log.spoiled
    assert (os.stat, os.lstat, os.listdir, os.scandir, os.mkdir, os.access, os.getcwd, os.readlink) == originals


def record(key: str = "a" * 64) -> Record:
    return Record(
        key=key,
        policy=None,
        policy_digest=None,
        facts=[("getcwd", (), "/")],
        words=("/usr/bin/bwrap", "--ro-bind", "/", "/", "--"),
        env=(("HTTPS_PROXY", "http://127.0.0.1:3128"),),
        command=("server",),
        hidden={"OPENAI_API_KEY"},
        relayed=True,
    )


def test_a_record_is_believed_under_the_state_keys_seal_only(tmp_path: Path) -> None:
    (tmp_path / "integrity.key").write_bytes(KEY)
    write_record(str(tmp_path), KEY, record())
    found = read_record(str(tmp_path), "a" * 64)
    assert found is not None and found.plans(record().words, record().env, ["server"], ["OPENAI_API_KEY"])
    assert not found.plans(record().words, (), ["server"], ["OPENAI_API_KEY"])

    stored = tmp_path / "starts" / ("a" * 64)
    (tmp_path / "starts" / ("b" * 64)).write_bytes(stored.read_bytes())
    assert read_record(str(tmp_path), "b" * 64) is None  # another start's record, under this start's name

    blob = bytearray(stored.read_bytes())
    blob[-3] ^= 1
    stored.write_bytes(bytes(blob))
    assert read_record(str(tmp_path), "a" * 64) is None  # changed: its seal no longer fits

    write_record(str(tmp_path), b"x" * 32, record())  # sealed with a key that is not the state key
    assert read_record(str(tmp_path), "a" * 64) is None


def test_only_the_most_recent_records_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_record, "KEEP_RECORDS", 3)
    for index in range(5):
        write_record(str(tmp_path), KEY, record(f"{index}" * 64))
        os.utime(tmp_path / "starts" / (f"{index}" * 64), (index, index))
    assert sorted(p.name[0] for p in (tmp_path / "starts").iterdir()) == ["2", "3", "4"]


def test_a_variable_set_anew_for_each_launch_names_a_start_by_being_set_only() -> None:
    """Claude Code gives each session's servers a new CLAUDE_CODE_SESSION_ID: the next session's start is still
    the same start. Whether it is set, and every other variable's value, still name another."""
    base = {"HOME": "/home/u", "PATH": "/usr/bin"}

    def key(**variables: str) -> str:
        return start_record.start_key(["proxy", "--", "server"], {**base, **variables}, "/project")

    assert key(CLAUDE_CODE_SESSION_ID="one", OLDPWD="/a") == key(CLAUDE_CODE_SESSION_ID="two", OLDPWD="/b")
    window = {"VSCODE_PID": "4242", "VSCODE_IPC_HOOK_EXTHOST": "/run/user/1000/vscode-ipc-1.sock"}
    reopened = {"VSCODE_PID": "5151", "VSCODE_IPC_HOOK_EXTHOST": "/run/user/1000/vscode-ipc-2.sock"}
    assert key(**window) == key(**reopened)  # VS Code's extension host, launched again
    launched = {"DESKTOP_STARTUP_ID": "gnome-shell-1234-host-_TIME5678", "INVOCATION_ID": "a1" * 16}
    again = {"DESKTOP_STARTUP_ID": "gnome-shell-1234-host-_TIME9999", "INVOCATION_ID": "b2" * 16}
    assert key(**launched) == key(**again)  # a desktop host started from its launcher, or as a user service
    assert key(CLAUDE_CODE_SESSION_ID="one") != key()
    assert key(CLAUDE_CODE_SESSION_ID="one", LANG="C") != key(CLAUDE_CODE_SESSION_ID="one", LANG="C.UTF-8")


def test_no_code_but_the_start_key_reads_a_per_launch_variable() -> None:
    """Their values are left out of the start key because no plan reads them: a module that reads one must
    take it out of PER_LAUNCH first."""
    package = Path(start_record.__file__).parents[1]
    readers = {
        (str(source.relative_to(package)), name)
        for source in package.rglob("*.py")
        if source.name != "start_record.py"
        for name in start_record.PER_LAUNCH
        if name in source.read_text(encoding="utf-8")
    }
    assert readers == set()


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"XDG_STATE_HOME": "/srv/state"},
        {"XDG_STATE_HOME": "  "},
        {"MCP_SAMPLING_PROXY_STATE_DIR": "/srv/proxy-state"},
        {"MCP_SAMPLING_PROXY_STATE_DIR": "~/proxy-state"},
    ],
)
def test_the_state_directory_is_the_one_config_dirs_names(
    variables: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("XDG_STATE_HOME", "MCP_SAMPLING_PROXY_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert start_record.state_directory(dict(os.environ)) == str(state_dir(create=False))


def test_a_relative_state_directory_means_no_early_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MCP_SAMPLING_PROXY_STATE_DIR", "state")  # relative to wherever the host starts it
    assert start_record.state_directory(dict(os.environ)) is None


def test_the_pid_bwrap_names() -> None:
    read, write = os.pipe()
    os.write(write, b'{\n    "child-pid": 4242,\n    "cgroup-namespace": 4026531835\n}\n')
    os.close(write)
    assert bwrap_child_pid(read) == 4242


def test_the_lean_copies_are_the_heavy_modules_values() -> None:
    """The record reads the state key and the policy as quotas/integrity.py and config/policy_file.py do,
    without importing them (msgspec, PyYAML)."""
    assert (start_record.STATE_KEY_FILE, start_record.STATE_KEY_BYTES) == (integrity.KEY_FILE, integrity.KEY_BYTES)
    assert start_record.MAX_POLICY_BYTES == MAX_POLICY_BYTES

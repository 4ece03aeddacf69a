"""The warm start's parts that decide, in process: whether a launch may use one, where its socket is, what
names it (a forked proxy must share all of that with its launch), and how a launch crosses the socket (a
warm server takes nothing malformed)."""

from __future__ import annotations

import array
import fcntl
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from mcp_sampling_proxy.system import warm_start
from mcp_sampling_proxy.system.warm_start import _decoded, _encoded, _Launch, _request, enabled, folder, identity

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm start is Linux's")


@linux_only
@pytest.mark.parametrize("value", ["off", "OFF", "0", "no", "false", " off "])
def test_off_is_off(value: str) -> None:
    assert not enabled({warm_start.ENV: value})


def test_the_socket_folder_is_in_the_users_runtime_directory_or_nowhere(tmp_path: Path) -> None:
    """As the console's sockets: the proxy's variable, XDG_RUNTIME_DIR, /run/user/UID (a desktop host passes
    a short environment); never the console's last resort in /tmp."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    runs = tmp_path / "run-user"
    (runs / str(os.getuid())).mkdir(parents=True, mode=0o700)
    assert folder({"XDG_RUNTIME_DIR": str(run)}) == str(run / "mcp-sampling-proxy" / "warm")
    assert folder({warm_start.RUNTIME_ENV: str(tmp_path), "XDG_RUNTIME_DIR": str(run)}) == str(tmp_path / "warm")
    assert folder({}, run_root=str(runs)) == str(runs / str(os.getuid()) / "mcp-sampling-proxy" / "warm")
    assert folder({}, run_root=str(tmp_path / "none")) is None  # no runtime directory of the user's
    assert folder({"XDG_RUNTIME_DIR": str(tmp_path / "missing")}, run_root=str(tmp_path / "none")) is None
    assert folder({warm_start.RUNTIME_ENV: "relative/run"}) is None
    run.chmod(0o755)  # open to others (the XDG spec: 0700): passed over, as the console passes it over
    assert folder({"XDG_RUNTIME_DIR": str(run)}, run_root=str(tmp_path / "none")) is None
    assert folder({"XDG_RUNTIME_DIR": str(run)}, run_root=str(runs)) == str(
        runs / str(os.getuid()) / "mcp-sampling-proxy" / "warm"
    )


@linux_only
def test_the_name_changes_with_what_a_forked_proxy_would_inherit_and_not_with_the_rest() -> None:
    """A key or a working directory is each launch's own (handed over); the locale, PYTHON* and the
    interpreter's state are the warm server's, so they are in its name."""
    base = {"PATH": "/usr/bin", "LANG": "C.UTF-8"}
    name = identity(base)
    assert identity({**base, "OPENAI_API_KEY": "sk-x", "HOME": "/elsewhere"}) == name
    assert identity({**base, "LANG": "de_DE.UTF-8"}) != name
    assert identity({**base, "LC_ALL": "C"}) != name
    assert identity({**base, "PYTHONPATH": "/tmp/other"}) != name


def test_a_launch_crosses_the_socket_whole() -> None:
    launch = _Launch(["--policy", "a=b.yaml", "--", "server", ""], "/bin/mcp-sampling-proxy", {}, 0o022)
    launch.env = {"KEY": "value=with=equals", "EMPTY": "", "BYTES": os.fsdecode(b"\xff\xfe")}
    back = _decoded(_encoded(launch))
    assert back is not None
    assert (back.argv, back.argv0, back.env, back.umask) == (launch.argv, launch.argv0, launch.env, launch.umask)
    empty = _decoded(_encoded(_Launch([], "x", {}, 0)))
    assert empty is not None and empty.argv == [] and empty.env == {}


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"argv0",
        b"argv0\x00umask\x000",
        b"argv0\x00022\x005\x00only-one",
        b"argv0\x0018\x000\x00NOEQUALS",
        b"argv0\x00512\x000",  # a umask past 0o777
        b"argv0\x00-1\x000",
    ],
)
def test_a_malformed_launch_is_refused(payload: bytes) -> None:
    assert _decoded(payload) is None


def hand_over(environ: dict[str, str]) -> int | None:
    """A launch's hand-over, as entry.py makes it."""
    found = warm_start.where(environ)
    assert found is not None, "the warm start is on and has its folder"
    return warm_start.hand_over(["--", "server"], environ, list, found)[0]


def _framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


@linux_only
def test_a_warm_server_takes_a_launch_only_with_its_descriptors(tmp_path: Path) -> None:
    """stdin, stdout, stderr and the working directory, and the terminal when the launch has one: fewer or
    more, and it forks nothing; a length past the limit, the same."""
    payload = _encoded(_Launch(["--", "server"], "proxy", {"A": "1"}, 0o077))
    opened = [os.open(tmp_path, os.O_RDONLY) for _ in range(6)]
    try:
        for fds, data, expected in (
            (opened[:4], _framed(payload), True),
            (opened[:5], _framed(payload), True),
            (opened[:3], _framed(payload), False),
            (opened, _framed(payload), False),
            (opened[:4], (warm_start.MAX_REQUEST + 1).to_bytes(4, "big") + payload, False),
        ):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with ours, theirs:
                theirs.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                received: list[int] = []
                launch = _request(ours, received)
                for fd in received:
                    os.close(fd)
            assert (launch is not None) == expected, (len(fds), expected)
            if launch is not None:
                assert launch.argv == ["--", "server"] and launch.env == {"A": "1"} and launch.umask == 0o077
    finally:
        for fd in opened:
            os.close(fd)


@linux_only
def test_a_socket_in_a_folder_others_could_reach_is_never_connected_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    place = run / "mcp-sampling-proxy" / "warm"
    place.mkdir(mode=0o700, parents=True)
    environ = {warm_start.RUNTIME_ENV: str(run / "mcp-sampling-proxy"), warm_start.ENV: "auto"}
    assert hand_over(environ) is None  # no socket: the usual start
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as planted:
        monkeypatch.chdir(place)  # (a short address: the test's folder may lie deeper than a socket path's limit)
        planted.bind(f"{identity(environ)}.sock")
        planted.listen(1)
        planted.setblocking(False)
        for folder_mode, above_mode in ((0o755, 0o700), (0o700, 0o777)):  # others may read it, or rename it
            place.chmod(folder_mode)
            place.parent.chmod(above_mode)
            assert hand_over(environ) is None
            with pytest.raises(BlockingIOError):
                planted.accept()  # not even a connection was made


def test_the_variables_it_reads_are_the_ones_their_modules_read() -> None:
    """warm_start is lean, so it names them again: they must stay the same."""
    from mcp_sampling_proxy.approval.console.server import RUNTIME_ENV

    assert warm_start.RUNTIME_ENV == RUNTIME_ENV


def test_a_new_warm_server_sweeps_what_dead_ones_left_and_nothing_of_a_live_one(tmp_path: Path) -> None:

    for name in ("dead", "live", "mine"):
        (tmp_path / f"{name}.lock").touch()
        (tmp_path / f"{name}.sock").touch()
    (tmp_path / "notes.txt").touch()
    with open(tmp_path / "live.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live warm server holds its lock for its life
        assert warm_start.sweep(str(tmp_path), "mine") == ["dead"]
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["live.lock", "live.sock", "mine.lock", "mine.sock", "notes.txt"]


def test_the_sweep_takes_a_dead_ones_half_made_socket_and_the_mark_of_a_launch_that_waited(tmp_path: Path) -> None:
    for name in ("dead.lock", "dead.sock", "dead.new", "dead.wanted", "live.lock", "live.wanted"):
        (tmp_path / name).touch()
    with open(tmp_path / "live.lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert warm_start.sweep(str(tmp_path), "mine") == ["dead"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live.lock", "live.wanted"]


@linux_only
def test_a_warm_server_that_does_not_answer_costs_a_launch_its_wait_and_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped (SIGSTOP) or hung: the launch waits READY_SECONDS for its "ready", hands over nothing, starts
    as usual, and tells the host's log which process held it up (every launch will wait for it)."""
    place = tmp_path / "run" / "warm"
    place.mkdir(mode=0o700, parents=True)
    environ = {warm_start.RUNTIME_ENV: str(place.parent), warm_start.ENV: "auto"}
    monkeypatch.setattr(warm_start, "READY_SECONDS", 0.3)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:
        monkeypatch.chdir(place)  # (a short address: the test's folder may lie deeper than a socket path's limit)
        stuck.bind(f"{identity(environ)}.sock")
        stuck.listen(1)
        started = time.monotonic()
        assert hand_over(environ) is None
        assert 0.3 <= time.monotonic() - started < 2.0
        connection, _ = stuck.accept()
        with connection:
            assert connection.recv(16) == b""  # nothing was sent (no descriptor, no environment), and it closed
    said = capsys.readouterr().err
    assert f"the warm start server (process {os.getpid()}) did not answer within 0.3 s" in said, said
    assert f"(`kill -KILL {os.getpid()}`;" in said, said


def _bound_later(path: Path, delay: float) -> threading.Thread:
    """A warm server that listens `delay` seconds from now (its socket made where a dead one's may lie)."""

    def bind() -> None:
        time.sleep(delay)
        path.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(path.name)
            time.sleep(1.0)

    return threading.Thread(target=bind, daemon=True)


@linux_only
def test_a_launch_waits_for_the_warm_server_that_loads_and_not_for_a_dead_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock says a warm server lives and its socket is not there yet: it is loading, and the launch
    waits for it (saying so with the `.wanted` mark, which ends its settling). A dead one's socket left in
    place is not taken for its socket, even where the new one reuses its inode."""
    monkeypatch.chdir(tmp_path)  # (a short address: the test's folder may lie deeper than a socket path's limit)
    monkeypatch.setattr(warm_start, "WAIT_SECONDS", 2.0)
    sock = tmp_path / "key.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(sock.name)  # a SIGKILLed warm server's socket: the file stays, nobody listens
    gone = warm_start._made(str(sock))
    with open(tmp_path / "key.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the warm server, alive
        later = _bound_later(sock, 0.3)
        started = time.monotonic()
        later.start()
        assert warm_start._loading(str(tmp_path), "key", gone, _held_elsewhere, _not_asked)
        assert 0.3 <= time.monotonic() - started < 1.5
        assert (tmp_path / "key.wanted").exists()
        later.join()


def _not_asked() -> None:
    return None  # the host has not asked the launch to stop


def _held_elsewhere() -> bool | None:
    return False  # another launch's warm server holds the lock


@linux_only
def test_a_launch_stops_waiting_when_the_warm_server_takes_too_long_or_the_host_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A warm server that never listens (stopped, hung) is waited for WAIT_SECONDS, and the host's log told
    (each launch will wait for it until it is ended); a launch that need not wait, or is asked to stop,
    says nothing."""
    monkeypatch.setattr(warm_start, "WAIT_SECONDS", 0.4)
    started = time.monotonic()
    assert not warm_start._loading(str(tmp_path), "key", None, _held_elsewhere, _not_asked)  # alive, and never listens
    assert 0.4 <= time.monotonic() - started < 1.5
    said = capsys.readouterr().err
    assert "the warm start server did not start listening within 0.4 s (stopped or hung?)" in said, said
    assert f"(`pkill -KILL -x {warm_start.WARM_COMM}`;" in said, said  # (no process shows its command line here)
    monkeypatch.setattr(warm_start, "WAIT_SECONDS", 3.0)
    started = time.monotonic()
    assert not warm_start._loading(str(tmp_path), "key", None, lambda: None, _not_asked)  # none can be started here
    assert time.monotonic() - started < 1.0  # (not the 3 s wait: a loaded CI machine may take a moment)
    held: list[str] = []
    threading.Timer(0.1, held.append, ["SIGTERM"]).start()  # the host gives up while the launch waits
    started = time.monotonic()
    assert not warm_start._loading(str(tmp_path), "key", None, _held_elsewhere, lambda: held)
    assert time.monotonic() - started < 1.0  # (it then starts as a cold proxy, which stops at once)
    assert capsys.readouterr().err == ""


@linux_only
def test_a_warm_server_that_ends_before_it_listens_is_replaced_by_one_launch_and_waited_for_by_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock a burst's launches saw was an ending warm server's (killed, idle or upgraded): once it is
    free, the first of them to take it starts another and loads the proxy itself; the rest wait for that
    one, their tries at the lock failing while it holds it."""
    monkeypatch.chdir(tmp_path)  # (a short address: the test's folder may lie deeper than a socket path's limit)
    monkeypatch.setattr(warm_start, "WAIT_SECONDS", 3.0)
    lock = tmp_path / "key.lock"
    ending = open(lock, "wb")  # noqa: SIM115
    fcntl.flock(ending, fcntl.LOCK_EX)
    started = time.monotonic()  # (before the timer: the wait is measured from no later than its start)
    threading.Timer(0.1, ending.close).start()
    took: list[int] = []

    def start() -> bool | None:
        """start_server's test: the lock taken, and kept (as the warm server it starts keeps it)."""
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        took.append(fd)
        return True

    assert not warm_start._loading(str(tmp_path), "key", None, start, _not_asked)  # this launch starts the new one
    assert len(took) == 1 and 0.1 <= time.monotonic() - started < 1.0
    later = _bound_later(tmp_path / "key.sock", 0.3)  # which listens a moment later
    later.start()
    assert warm_start._loading(str(tmp_path), "key", None, start, _not_asked)  # another launch waits for it
    assert len(took) == 1
    later.join()
    os.close(took[0])


@linux_only
def test_a_relative_sys_path_entry_puts_the_working_directory_in_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry such as '' (python -c) or a relative PYTHONPATH is read from the working directory: two
    launches from two folders may then load other modules, so they are two names; with absolute entries only,
    the folder does not matter (a fork takes the launch's own)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    identity({})  # (what it imports at first use, imported while sys.path is the real one)
    names = {}
    marker = "__editable__.example.finder.__path_hook__"  # a path hook's: no folder, whatever the cwd
    for entries in (["/usr/lib/python3", marker], ["", "/usr/lib/python3", marker]):
        monkeypatch.setattr(sys, "path", entries)
        for folder_name in ("a", "b"):
            monkeypatch.chdir(tmp_path / folder_name)
            names[(len(entries), folder_name)] = identity({})
    assert names[(2, "a")] == names[(2, "b")]
    assert names[(3, "a")] != names[(3, "b")]


@linux_only
def test_a_launch_sent_a_byte_at_a_time_is_given_up_on_within_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm server serves one launch at a time: a peer that sends its request slowly (each piece within
    the wait) must not hold it past READY_SECONDS in all."""
    import threading

    monkeypatch.setattr(warm_start, "READY_SECONDS", 0.3)
    payload = _encoded(_Launch(["--", "server"], "proxy", {"A": "1"}, 0o077))
    opened = [os.open("/", os.O_RDONLY) for _ in range(4)]
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()

    def drip() -> None:
        theirs.sendmsg([_framed(payload)[:5]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", opened))])
        for byte in _framed(payload)[5:]:
            if stop.wait(0.1):
                return
            theirs.send(bytes([byte]))

    dripping = threading.Thread(target=drip)
    dripping.start()
    received: list[int] = []
    try:
        started = time.monotonic()
        assert _request(ours, received) is None
        assert time.monotonic() - started < 1.0
    finally:
        stop.set()
        dripping.join()
        for fd in [*received, *opened]:
            os.close(fd)
        ours.close()
        theirs.close()


def test_the_warm_folder_is_in_the_console_sockets_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """warm_start finds the runtime directory without platformdirs (it runs before anything is loaded): it
    must find the one the console's sockets use, which the sandbox hides."""
    from mcp_sampling_proxy.approval.console.server import runtime_dir

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.delenv(warm_start.RUNTIME_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    assert folder(dict(os.environ)) == str(runtime_dir() / "warm")
    monkeypatch.setenv(warm_start.RUNTIME_ENV, str(tmp_path / "own"))
    assert folder(dict(os.environ)) == str(runtime_dir() / "warm")


@linux_only
@pytest.mark.parametrize(
    ("said", "status", "why"),
    [
        (b"pid not-a-pid\n", 1, "its proxy did not say its pid"),
        (b"pi", 1, "its proxy did not say its pid"),  # a line cut by the end: something may have run
        (b"", None, ""),  # a clean end with nothing said: no proxy ran (one says its pid first): cold
    ],
)
def test_a_warm_server_that_takes_the_launch_and_names_no_pid_is_an_error_not_a_cold_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    said: bytes,
    status: int | None,
    why: str,
) -> None:
    """Once the launch has handed its stdio over, a proxy may hold it: a cold start beside it would read the
    same pipes. Anything but "pid N" or a clean end with nothing said ends the launch with an error."""
    import threading

    place = tmp_path / "run" / "warm"
    place.mkdir(mode=0o700, parents=True)
    environ = {warm_start.RUNTIME_ENV: str(place.parent), warm_start.ENV: "auto"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as fake:
        monkeypatch.chdir(place)  # (a short address: the test's folder may lie deeper than a socket path's limit)
        fake.bind(f"{identity(environ)}.sock")
        fake.listen(1)

        took: list[object] = []

        def take() -> None:
            connection, _ = fake.accept()
            with connection:
                connection.sendall(b"ready\n")
                received: list[int] = []
                took.append(_request(connection, received))
                for fd in received:
                    os.close(fd)
                connection.sendall(said)
                if said.endswith(b"\n"):
                    while connection.recv(1):  # open until the launch lets go, as a forked proxy keeps it
                        pass

        taking = threading.Thread(target=take)
        taking.start()
        try:
            got = hand_over(environ)
        finally:
            taking.join()
    assert took and took[0] is not None, took  # it was handed the launch
    assert got == status
    err = capsys.readouterr().err
    assert (f"the warm start server took this launch and {why}" in err) if why else err == ""


def test_the_later_load_keeps_the_stamps_of_the_first() -> None:
    """A warm server that loads more once idle (`load_later`) keeps the stamps of what it loaded first: a file
    of those changed meanwhile (an upgrade) ends it, where stamping everything again would take it for the
    installed code and fork proxies running the older."""
    first = (("/p/relay.py", (1, 10)), ("/p/entry.py", (2, 20)))
    assert warm_start._extends(first, (*first, ("/p/providers/openai.py", (3, 30))))
    assert not warm_start._extends(first, (("/p/relay.py", (9, 10)), ("/p/entry.py", (2, 20))))
    assert not warm_start._extends(first, None)  # a file gone
    assert not warm_start._extends(None, first)


@linux_only
def test_a_fifo_where_the_waiting_mark_goes_does_not_hang_the_launch(tmp_path: Path) -> None:
    """The mark is opened for writing: a FIFO there (put by another process of the user's) would block that
    open until someone read it, and the launch with it."""
    os.mkfifo(tmp_path / "key.wanted")
    done: list[bool] = []
    waiting = threading.Thread(
        target=lambda: done.append(warm_start._loading(str(tmp_path), "key", None, lambda: None, _not_asked)),
        daemon=True,
    )
    waiting.start()
    waiting.join(5)
    assert done == [False]  # it went on to the usual start (none can be started here)

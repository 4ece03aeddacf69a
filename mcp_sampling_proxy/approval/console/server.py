"""The proxy's end of the companion console: a Unix socket that `mcp-sampling-proxy console` joins.

A host like Claude Desktop gives the proxy no terminal, so the user runs the console in any
terminal; it attaches to every running proxy of the user. The socket lives in the user's runtime
dir (mode 0700 directory, 0600 socket) and speaks newline-delimited JSON:

proxy -> console   {"type": "hello", "pid", "server", "host"}
                   {"type": "pending", "id", "server", "tool", "host", "rule", "summary", "params", "edit": "prompt"}
                   {"type": "review", "id", "server", "tool", "summary", "prompt_edited_by", "result", "edit": "text"}
                   {"type": "elicit", "id", "mode": "form|url", "server", "host", "tool", "message",
                    "schema"|"url"}
                   {"type": "resolved", "id", "how"}    (the question is closed: "answered" by a console,
                                                         "expired" (approval.timeout), or "withdrawn")
console -> proxy   {"type": "decision", "id", "approve": bool, "scope": "once|session|always",
                    "prompt": str?}                  (prompt: the new text of the last user message)
                   {"type": "review", "id", "accept": bool, "text": str?}       (text: the new answer text)
                   {"type": "elicit", "id", "action": "accept|decline|cancel", "content": {...}?}
                   {"type": "waiting", "id"}  (a console that asks one at a time queued it behind another:
                                               no time counts until one shows it, up to ten times
                                               approval.timeout; older proxies ignore it)
                   {"type": "shown", "id"}    (a console put it on screen: approval.timeout counts from here;
                                               each moves the time limit once per question)

An edit travels as text only and the proxy applies it (`approval/edits.py`): it
replaces the text blocks and keeps every other block (an image in the prompt, a tool call in the
answer), and a console cannot change anything else in the request or the answer. `summary` of a
review describes the prompt as it was sent to the LLM, edited or not. A console from before the
`edit` keys sends the whole edited request (`params`) or answer (`result`): the proxy takes only
their text; and a console that finds no `edit` key answers an older proxy that way.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from msgspec import Struct, field

from mcp_sampling_proxy.approval.channels import ApprovalClock, ChannelGone, clock, closed_how
from mcp_sampling_proxy.approval.console.messages import ConsoleMessage
from mcp_sampling_proxy.config.dirs import APP_DIR, runtime_base
from mcp_sampling_proxy.log import Throttle, get_logger
from mcp_sampling_proxy.protocol.wire_types import JsonObject
from mcp_sampling_proxy.system.hardening import cmdline, is_relay, peer_pid, refusal, relay_subcommands
from mcp_sampling_proxy.text.sanitize import one_line

log = get_logger("mcp_sampling_proxy.console")

RUNTIME_ENV = "MCP_SAMPLING_PROXY_RUNTIME_DIR"
MAX_LINE = 16 * 1024 * 1024  # an edited request can be large; a peer sending more is cut off


class RuntimeDirError(OSError):
    """The runtime dir is unsafe to use; the message names the path and what to do."""


def runtime_dir() -> Path:
    """Per-user directory for console sockets: private to the user, created 0700.

    `$MCP_SAMPLING_PROXY_RUNTIME_DIR`, else `mcp-sampling-proxy` in the user's runtime dir as
    platformdirs finds and vets it (`config.dirs.runtime_base`: `$XDG_RUNTIME_DIR`, else
    `/run/user/UID`, else `$TMPDIR/runtime-UID` on Linux). The proxy and the console must
    agree on it, which is why the fallback is the same `/run/user/UID` a login session's
    `XDG_RUNTIME_DIR` names. Refused (RuntimeDirError): a symlink or a non-directory in its
    place, a directory owned by someone else (in /tmp another user can create it first and
    intercept approvals), and one that others can enter."""
    elsewhere = f"or set {RUNTIME_ENV} to a private directory of yours"
    base = os.environ.get(RUNTIME_ENV)
    if base:
        path = Path(base)
    else:
        try:
            path = runtime_base() / APP_DIR
        except (PermissionError, RuntimeError) as exc:  # even the /tmp fallback is another user's
            raise RuntimeDirError(
                f"no private runtime dir for the console: {exc}; have it removed (by its owner "
                f"or root), set XDG_RUNTIME_DIR to a directory of yours (mode 700) "
                f"{elsewhere}"
            ) from None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        info = path.lstat()
    except OSError as exc:
        raise RuntimeDirError(
            f"cannot create the console runtime dir {path}: {exc.strerror or exc}; "
            f"fix its parent's permissions {elsewhere}"
        ) from None
    if stat.S_ISLNK(info.st_mode):
        raise RuntimeDirError(
            f"the console runtime dir {path} is a symbolic link, which could lead "
            f"elsewhere; remove it (rm {path}) {elsewhere}"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise RuntimeDirError(f"the console runtime dir {path} is not a directory; remove it (rm {path}) {elsewhere}")
    if info.st_uid != os.getuid():
        raise RuntimeDirError(
            f"the console runtime dir {path} belongs to uid {info.st_uid}, not to you "
            f"(uid {os.getuid()}): another user may be trying to intercept approvals; "
            f"have it removed (by its owner or root) {elsewhere}"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise RuntimeDirError(
            f"the console runtime dir {path} is open to other users "
            f"(mode {stat.S_IMODE(info.st_mode):o}); run: chmod 700 {path}"
        )
    return path


def in_temp_fallback(directory: Path) -> bool:
    """Whether `directory` is the last resort of `runtime_dir`: `runtime-UID` in the temporary directory,
    used when neither `XDG_RUNTIME_DIR` nor `/run/user/UID` can be (over ssh, in containers, under cron).
    Every proxy and console of the user that finds no runtime dir meets there, whoever started it."""
    if os.environ.get(RUNTIME_ENV):
        return False
    return directory.parent.name == f"runtime-{os.geteuid()}" and directory.parent.parent == Path(tempfile.gettempdir())


def clean_stale_sockets(directory: Path, own_pid: int | None = None) -> list[Path]:
    """Remove sockets of proxies that are gone (SIGKILLed, crashed): nobody listens on them and
    their pid is not a running proxy. Only sockets are touched, never other files."""
    removed: list[Path] = []
    for path in directory.glob("*.sock"):
        if path.stem == str(own_pid) or not is_stale(path):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def is_stale(path: Path) -> bool:
    """A socket nobody listens on whose pid is not a running proxy (SIGKILLed, crashed)."""
    pid = int(path.stem) if path.stem.isdigit() else None
    if pid is not None and _running(pid) and is_relay(pid, relay_subcommands()):
        return False
    try:
        return stat.S_ISSOCK(path.lstat().st_mode) and not _listening(path)
    except OSError:
        return False


def _running(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return _signalable(pid)
    return state != b"Z"


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # busy or unknown: leave it
    finally:
        probe.close()
    return True


# A running console finds a new proxy's socket at its next scan (every 0.5 s, approval/console/client.py):
# a request in a proxy's first moments waits this long from the socket's creation for one to attach.
ATTACH_GRACE = 1.5


class ConsoleGone(ChannelGone):
    """Every companion console went away (quit with Ctrl-C, closed) before answering."""


class _Pending(Struct):
    message: ConsoleMessage
    clock: ApprovalClock | None  # the approval's time limit (None: an elicitation, which has none)
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: JsonObject | None = None  # the console's answer, of the type the question expects
    # what consoles said of it: each moves its clock once (a console that says it again moves nothing)
    queued: bool = False
    seen: bool = False


class ConsoleServer:
    """Accepts console connections and routes questions to them and answers back."""

    def __init__(self, server_name: Any, host_name: Any):
        self._server_name = server_name  # callables: the names are known only after initialize
        self._host_name = host_name
        self._clients: set[anyio.abc.SocketStream] = set()
        self._pending: dict[str, _Pending] = {}
        self._counter = 0
        self.path: Path | None = None
        self._refusals = Throttle()  # a connect loop must not bury the log (11 MB in 8 s, unthrottled)
        self._listening_since: float | None = None  # monotonic; None: no socket
        self._arrived: anyio.Event | None = None  # set when a console attaches (made on the event loop)

    def host_name(self) -> str | None:
        """The host's name as it introduced itself (None before initialize): questions carry it."""
        name = self._host_name()
        return str(name) if name else None

    @property
    def available(self) -> bool:
        return bool(self._clients)

    async def settle(self) -> None:
        """Wait for a console on its way: within ATTACH_GRACE of the socket's creation, until one
        attaches; at once when one is attached, the grace is over, or there is no socket. A host that
        calls a tool right after starting the proxy is not refused while the user's console is about
        to find it."""
        if self._clients or self._listening_since is None or self._arrived is None:
            return
        left = ATTACH_GRACE - (time.monotonic() - self._listening_since)
        if left > 0:
            with anyio.move_on_after(left):
                await self._arrived.wait()

    async def serve(self, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        own: tuple[int, int] | None = None
        try:
            directory = runtime_dir()
            clean_stale_sockets(directory, os.getpid())
            self.path = directory / f"{os.getpid()}.sock"
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            old_umask = os.umask(0o177)
            try:
                listener = await anyio.create_unix_listener(self.path)
            finally:
                os.umask(old_umask)
            info = self.path.lstat()
            own = (info.st_dev, info.st_ino)
            self._listening_since = time.monotonic()
            self._arrived = anyio.Event()
        except OSError as exc:
            log.warning(
                "companion console unavailable; approvals can use the terminal or the host only", error=str(exc)
            )
            task_status.started()
            return
        log.debug("companion console socket ready", path=str(self.path))
        task_status.started()
        try:
            async with listener:
                await listener.serve(self._handle)
        finally:
            remove_socket(self.path, own)

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        if not self._admit(stream):
            await stream.aclose()
            return
        self._clients.add(stream)
        if self._arrived is not None:
            self._arrived.set()
        try:
            await self._send(
                stream, {"type": "hello", "pid": os.getpid(), "server": self._server_name(), "host": self._host_name()}
            )
            for pending in list(self._pending.values()):
                if not pending.done.is_set():
                    await self._send(stream, pending.message)
            buffer = b""
            async for chunk in stream:
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._receive(line)
                if len(buffer) > MAX_LINE:
                    log.warning("companion console sent an oversized message; disconnected", size=len(buffer))
                    break
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            self._clients.discard(stream)
            await stream.aclose()
            if not self._clients:  # nobody is left to answer what is pending: end those questions now
                for pending in self._pending.values():
                    pending.done.set()

    def _admit(self, stream: anyio.abc.SocketStream) -> bool:
        """Only a console outside every proxy's process tree may answer: never our upstream or
        anything it started, never a process below another proxy (see hardening.refusal)."""
        try:
            pid = peer_pid(stream.extra(anyio.abc.SocketAttribute.raw_socket))
        except (OSError, anyio.TypedAttributeLookupError):
            pid = None
        why = refusal(pid, own_pid=os.getpid())
        if why is None:
            return True
        held = self._refusals.admit()
        if held is not None:
            log.warning(
                "refused a companion console connection",
                reason=why,
                peer_pid=pid,
                peer_command=one_line(" ".join(cmdline(pid)), 300) if pid else "",
                **({"refused_unlogged_before": held} if held else {}),
            )
        elif self._refusals.quieted():
            log.warning(
                f"refusing many companion console connections: logging at most {self._refusals.burst} a "
                f"minute (a process of yours connects in a loop; the last one logged names it)",
                peer_pid=pid,
            )
        return False

    def _receive(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("companion console sent a line that is not JSON; ignored")
            return
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            log.warning("companion console sent a malformed message; ignored")
            return
        pending = self._pending.get(str(message.get("id")))
        if pending is not None and not pending.done.is_set() and message.get("type") in ("shown", "waiting"):
            if pending.clock is not None and not pending.seen:  # once shown, no console moves it again
                if message["type"] == "shown":
                    pending.seen = True
                    pending.clock.shown()
                elif not pending.queued:
                    pending.queued = True
                    pending.clock.waiting()
            return
        expected = {"pending": "decision"}.get(pending.message["type"], pending.message["type"]) if pending else ""
        if pending is None or pending.done.is_set() or message.get("type") != expected:
            return
        pending.answer = message
        pending.done.set()

    async def ask(self, message: ConsoleMessage) -> JsonObject:
        """Send a question to every attached console; return the first answer. Raises ConsoleGone
        when the last console goes away before anyone answered."""
        self._counter += 1
        request_id = str(self._counter)
        pending = _Pending({**message, "id": request_id}, clock())
        self._pending[request_id] = pending
        try:
            await self._broadcast(pending.message)
            if not self._clients:
                raise ConsoleGone
            await pending.done.wait()
            if pending.answer is None:
                raise ConsoleGone
            return pending.answer
        finally:
            self._pending.pop(request_id, None)
            # the approval's time limit as the approver set it, or as a console's `shown` moved it
            how = closed_how(pending.answer is not None, anyio.current_effective_deadline())
            with anyio.CancelScope(shield=True):
                await self._broadcast({"type": "resolved", "id": request_id, "how": how})

    async def _broadcast(self, message: ConsoleMessage) -> None:
        for client in list(self._clients):
            try:
                await self._send(client, message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self._clients.discard(client)

    @staticmethod
    async def _send(stream: anyio.abc.SocketStream, message: ConsoleMessage) -> None:
        await stream.send(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")


def remove_socket(path: Path | None, own: tuple[int, int] | None) -> None:
    """Unlink our socket, but not a file someone put in its place meanwhile."""
    if path is None or own is None:
        return
    with contextlib.suppress(OSError):
        info = path.lstat()
        if (info.st_dev, info.st_ino) == own:
            path.unlink()

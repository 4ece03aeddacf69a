"""`console --web --no-open` as a process, for the tests that drive its page in Chromium: started with the
test's own directories, its URL read from the first line it prints, stopped with Ctrl-C's signal as a
person stops it."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from helpers.support import PY, proxy_env


class WebConsole:
    """`console --web --no-open` as a process; `url` is the first line it prints."""

    def __init__(self, dirs: dict[str, str], *options: str, stderr: Path):
        self.proc = subprocess.Popen(
            [PY, "-m", "mcp_sampling_proxy", "console", "--web", "--no-open", *options],
            env=proxy_env(**dirs),
            stdout=subprocess.PIPE,
            stderr=stderr.open("wb"),
            stdin=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().strip()
        assert self.url.startswith("http://127.0.0.1:"), f"first line is not the URL: {self.url!r}"
        parts = urlsplit(self.url)
        self.port = parts.port
        self.token = parts.path.strip("/")

    def close(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> WebConsole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

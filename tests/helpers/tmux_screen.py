"""A command in a tmux pane of its own tmux server, read as the person in front of it sees it (`Screen`),
and the `screens` fixture that closes them."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class Screen:
    """A command in a tmux pane of its own server, read as the person in front of it sees it."""

    def __init__(self, tmp_path: Path, command: list[str], env: dict[str, str], width: int = 220):
        self.name = f"t-{uuid.uuid4().hex[:8]}"
        self.tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
        shown = " ".join(_shell_quote(word) for word in command)
        subprocess.run(
            [*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(width), "-y", "50", f"{shown}; sleep 60"],
            env=env,
            check=True,
        )

    def lines(self) -> list[str]:
        text = subprocess.run(
            [*self.tmux, "capture-pane", "-p", "-J", "-t", self.name, "-S", "-500"],  # -J: a wrapped line as one
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line.rstrip() for line in text.splitlines() if line.strip()]

    def last_line(self) -> str:
        lines = self.lines()
        return lines[-1] if lines else ""

    def wait_for(self, text: str, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.lines()
            if any(text in line for line in lines):
                return lines
            time.sleep(0.1)
        raise AssertionError(f"{text!r} not shown:\n" + "\n".join(self.lines()))

    def wait_until(self, shows: Callable[[list[str]], bool], timeout: float = 30.0) -> list[str]:
        """The screen's lines once `shows` holds for them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.lines()
            if lines and shows(lines):
                return lines
            time.sleep(0.1)
        raise AssertionError("not shown as expected:\n" + "\n".join(self.lines()))

    def type(self, text: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, text, "Enter"], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False, capture_output=True)


def _shell_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


@pytest.fixture
def screens() -> Iterator[list[Screen]]:
    opened: list[Screen] = []
    yield opened
    for screen in opened:
        screen.close()

"""The checklist `doctor` prints: sections of checks, each ok, failed, a warning or a note, with its fix."""

from __future__ import annotations

from msgspec import Struct, field


class Check(Struct):
    status: str  # ok | fail | warn | info
    text: str
    fix: str = ""


class Section(Struct):
    title: str
    checks: list[Check] = field(default_factory=list)

    def add(self, status: str, text: str, fix: str = "") -> None:
        self.checks.append(Check(status, text, fix))

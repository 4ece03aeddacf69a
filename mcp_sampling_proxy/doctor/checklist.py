"""The checklist `doctor` prints: sections of checks, each ok, failed, a warning or a note, with its fix."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Check:
    status: str  # ok | fail | warn | info
    text: str
    fix: str = ""


@dataclass
class Section:
    title: str
    checks: list[Check] = field(default_factory=list)

    def add(self, status: str, text: str, fix: str = "") -> None:
        self.checks.append(Check(status, text, fix))

"""The command line's parser: argparse, with a "did you mean" for an option it does not know.

argparse answers a mistyped option with "unrecognized arguments: --polcy" and nothing more. Every command
builds its parser from `Parser`, which names the nearest option of the command that was run (a subcommand's
own, for `policy check`), or the one meant for a name another command takes (`serve --port`, where
`--listen HOST:PORT` is meant), and where the whole list is.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose error for an unknown option suggests the one meant. `meant` maps an option
    this command does not take, but a user would try, to what to give instead."""

    def __init__(self, *args: Any, meant: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.meant = dict(meant or {})

    def parse_args(  # type: ignore[override]  # argparse's overloads: this one returns a Namespace
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = chosen(self, parsed)
            if isinstance(command, Parser):
                command.unknown(extras)
            command.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def unknown(self, extras: list[str]) -> NoReturn:
        """Exit 2 naming the unknown arguments, with a suggestion for each unknown option."""
        hints = [hint for word in extras if (hint := self.suggestion(word))]
        advice = "; ".join(hints) if hints else f"`{self.prog} --help` lists the options"
        self.error(f"unrecognized arguments: {' '.join(extras)}; {advice}")

    def suggestion(self, word: str) -> str | None:
        """What `word` (an argument this parser did not take) was probably meant to be, said; None: no guess."""
        if not word.startswith("-") or word == "-" or word.lstrip("-").replace(".", "").isdigit():
            return None
        name = word.split("=", 1)[0]
        if name in self.meant:
            return f"{name}: did you mean {self.meant[name]}?"
        # start-up: difflib is for this error only
        from difflib import get_close_matches

        options = [option for action in self._actions for option in action.option_strings]
        close = get_close_matches(name, options, n=1, cutoff=0.6)
        if close:
            return f"{name}: did you mean {close[0]}?"
        return f"{name}: no such option of {self.prog} (`{self.prog} --help` lists them)"


def chosen(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `parsed` ran: `policy check`'s for `policy check --strcit`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(parsed, action.dest, None) if action.dest != argparse.SUPPRESS else None
            sub = action.choices.get(name) if isinstance(name, str) else None
            if isinstance(sub, argparse.ArgumentParser):
                return chosen(sub, parsed)
    return parser

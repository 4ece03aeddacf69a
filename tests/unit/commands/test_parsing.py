"""Every command's parser answers a mistyped option with the option meant, in process: the whole matrix
of commands and options (tests/e2e/test_command_line_errors.py runs the real command for a few)."""

from __future__ import annotations

import argparse

import pytest
from helpers.support import run_subcommand

from mcp_sampling_proxy.commands import reference
from mcp_sampling_proxy.commands.parsing import Parser

COMMANDS = list(reference.commands())


def typo(option: str) -> str:
    """The option with one letter of its name left out, as fingers do: --policy -> --polcy."""
    name = option.lstrip("-")
    middle = len(name) // 2
    return option[: len(option) - len(name)] + name[:middle] + name[middle + 1 :]


def long_options(parser: argparse.ArgumentParser) -> list[str]:
    return [
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and len(option) > 5 and option not in ("--help", "--version")
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c.words) or "proxy" for c in COMMANDS])
def test_each_option_of_each_command_mistyped_is_named(command: reference.Command) -> None:
    parser = command.parser
    assert isinstance(parser, Parser), f"{command.line}: built from argparse.ArgumentParser, not commands.parsing"
    for option in long_options(parser):
        assert parser.suggestion(typo(option)) == f"{typo(option)}: did you mean {option}?", command.line


def test_a_subcommands_unknown_option_is_judged_by_that_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    """`audit tail --folow`: the option of `audit tail` is named, with `audit tail`'s usage."""
    done = run_subcommand(["audit", "tail", "--folow", "audit.jsonl"])
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()
    assert last[0].startswith("usage: mcp-sampling-proxy audit tail ")
    assert last[-1] == (
        "mcp-sampling-proxy audit tail: error: unrecognized arguments: --folow; --folow: did you mean --follow?"
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--port", "8000", "--", "server"], "--port: did you mean --listen HOST:PORT (e.g. --listen "),
        (["serve", "--host", "0.0.0.0", "--", "server"], "--host: did you mean --listen HOST:PORT"),
        (["console", "--listen", "8000"], "--listen: did you mean --web --port PORT"),
        (["doctor", "--zzz"], "--zzz: no such option of mcp-sampling-proxy doctor (`mcp-sampling-proxy doctor --help`"),
        (["doctor", "--polcy=p.yaml"], "--polcy: did you mean --policy?"),
    ],
)
def test_an_option_another_command_takes_names_the_one_meant_here(argv: list[str], said: str) -> None:
    done = run_subcommand(argv)
    assert done.returncode == 2
    assert said in done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["doctor", "--polcy", "policy.yaml"],
            "mcp-sampling-proxy doctor: error: unrecognized arguments: --polcy policy.yaml; --polcy: did you mean "
            "--policy?",
        ),
        (
            ["serve", "--port", "8000", "--", "python3", "server.py"],
            "mcp-sampling-proxy serve: error: unrecognized arguments: --port; --port: did you mean --listen "
            "HOST:PORT (e.g. --listen 127.0.0.1:8765)?",
        ),
        (
            ["policy", "explain", "policy.yaml", "--servr", "notes"],
            "mcp-sampling-proxy policy explain: error: unrecognized arguments: --servr notes; --servr: did you mean "
            "--server?",
        ),
    ],
    ids=["doctor", "serve --port", "policy explain"],
)
def test_a_mistyped_option_of_a_subcommand_is_answered_in_one_line(argv: list[str], said: str) -> None:
    """The line a user sees last, whole: the command, what was not recognized, and the option meant."""
    done = run_subcommand(argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == said

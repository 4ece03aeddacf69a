"""The suite's own directories reach what is made before a test's own (tests/conftest.py): a fixture wider
than one test (a module's one proxy, `serve` or LLM server) starts its processes with the environment of
that moment, and must not find the user's home or directories in it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.untouched_home import real_home

PLACES = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR")


@pytest.fixture(scope="module")
def seen_by_a_module_fixture() -> dict[str, str]:
    return {name: os.environ.get(name, "") for name in PLACES}


def test_a_fixture_wider_than_a_test_sees_none_of_the_users_directories(
    seen_by_a_module_fixture: dict[str, str],
) -> None:
    home = real_home().resolve()
    for name, value in seen_by_a_module_fixture.items():
        assert value, f"{name} unset: a process would fall back to the user's own"
        place = Path(value).resolve()
        assert place != home and home not in place.parents, f"{name}={value} is the user's"


def test_each_test_has_directories_of_its_own(seen_by_a_module_fixture: dict[str, str]) -> None:
    assert all(os.environ[name] != seen_by_a_module_fixture[name] for name in PLACES)

"""The web console's state in process: a flood of audit records costs one snapshot per change for every
page, the usage says which records it counts and why its budgets table is empty, and only the budgets a
proxy sealed are shown."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import pytest

from mcp_sampling_proxy.approval.console.client import Event
from mcp_sampling_proxy.config.settings import parse_settings
from mcp_sampling_proxy.front.web_console.app import WebConsole
from mcp_sampling_proxy.front.web_console.server import page_sources
from mcp_sampling_proxy.front.web_console.state import KEEP_RECORDS, WebState, usage_view
from mcp_sampling_proxy.front.web_console.views import PolicyFacts, read_budgets
from mcp_sampling_proxy.quotas.integrity import prepare
from mcp_sampling_proxy.quotas.limiters import TokenBudget

BUDGET = "rules:\n  - name: ask-first\n    action: prompt\n    budget: {tokens: 200000, per: 1d}\n"
NO_BUDGET = "rules:\n  - name: ask-first\n    action: prompt\n"

if TYPE_CHECKING:
    from mcp_sampling_proxy.approval.console.client import ConsoleClient


def test_a_flood_of_audit_records_costs_one_snapshot_per_state_change_for_all_pages() -> None:
    """A server that floods the proxy fills the audit log: each new record used to rebuild every
    open page's state (budgets read, pending images checked) once per page. Now records are only
    a count for the pages, a state change is rebuilt once for all of them, and a page gets at most
    one event per 0.1 s. The real state and event stream, three pages reading it."""

    reads: list[float] = []

    def budgets() -> dict[str, Any]:
        reads.append(time.monotonic())
        return {}

    state = WebState(PolicyFacts(), budgets, None)
    console = WebConsole(state, client=cast("ConsoleClient", None), port=0)
    last_count: dict[int, int] = {}

    async def page(index: int) -> None:
        async for chunk in console.events():
            if chunk.startswith(b"event: audit"):
                last_count[index] = json.loads(chunk.split(b"data: ", 1)[1])["count"]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for index in range(3):
                tg.start_soon(page, index)
            await anyio.sleep(0.3)
            for i in range(1000):  # over about 2 s, as a flooding server's refusals arrive
                state.add_records([{"event": "decision", "n": i}], None)
                await anyio.sleep(0.002)
                if i % 250 == 0:  # now and then a real change of state: a proxy's notice
                    state.on_event(Event("refused", Path(f"/run/{i}.sock"), why="not ours"))
            with anyio.move_on_after(10):
                while last_count != {0: 1000, 1: 1000, 2: 1000}:
                    await anyio.sleep(0.05)
            await console.stop()

    anyio.run(main)
    assert last_count == {0: 1000, 1: 1000, 2: 1000}  # every page saw the final count
    assert len(reads) <= 6, f"{len(reads)} snapshots for 4 state changes and 1000 records"


def test_usage_says_which_records_its_counts_cover() -> None:
    """The usage table counts the records the console holds (the last 20,000), not the whole
    log: the answer says how many and since when, so the page can say so."""

    state = WebState(PolicyFacts(), dict, None)
    state.add_records(
        [
            {
                "event": "decision",
                "ts": f"2026-11-23T10:0{i}:00.000Z",
                "server": "s",
                "decision": "allow",
                "input_tokens": 10,
                "output_tokens": 5,
            }
            for i in range(3)
        ],
        None,
    )
    usage = anyio.run(usage_view, state, {})
    assert usage["covers"] == {"records": 3, "since": "2026-11-23T10:00:00.000Z", "kept": KEEP_RECORDS}
    assert [(s["server"], s["input_tokens"]) for s in usage["servers"]] == [("s", 30)]


def test_the_budgets_shown_are_the_ones_a_proxy_sealed(tmp_path: Path) -> None:
    """The page shows the budgets file only when its seal verifies: a file something else wrote (or an
    emptied one) is what a proxy refuses, so it is not shown as the budgets either."""

    prepare(tmp_path)  # the key a proxy makes at start
    TokenBudget(tmp_path / "budgets.json", durable=False).reserve("ask@x", 1000, 86400, 100)
    shown = read_budgets(tmp_path / "budgets.json")
    assert shown["ask@x"]["reserved"] == 100
    forged = json.loads((tmp_path / "budgets.json").read_text())["sealed"]  # the data without its seal
    (tmp_path / "budgets.json").write_text(json.dumps(forged))
    assert read_budgets(tmp_path / "budgets.json") == {}


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        pytest.param(NO_BUDGET, "none: no rule of this policy has a budget", id="no-budget"),
        pytest.param(BUDGET, "none used yet: 1 rule with a budget (ask-first)", id="unused"),
        pytest.param(None, "none: no policy to read budgets from (console --web --policy FILE)", id="no-policy"),
    ],
)
def test_an_empty_budgets_table_says_why(tmp_path: Path, rules: str | None, says: str) -> None:
    """No budget row: the page is told why (`console --web` with this policy, or none), so that an empty
    table is not taken for one that failed to load."""
    settings = parse_settings(rules, str(tmp_path / "policy.yaml")) if rules else None
    usage = anyio.run(usage_view, page_sources(settings, None).state, {})
    assert usage["budgets"] == [] and usage["servers"] == []
    assert usage["no_budgets"] == says

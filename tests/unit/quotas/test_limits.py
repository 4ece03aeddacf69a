"""Rate limits, concurrency limits, token budgets and the shared state file."""

from __future__ import annotations

import json
import random
import stat
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest
from helpers.budget_windows import DAY, T0, use_state_dir
from structlog.testing import capture_logs

from mcp_sampling_proxy.policy.survey import survey
from mcp_sampling_proxy.policy.token_bound import (
    BLOCK_OVERHEAD,
    IMAGE_MAX_TOKENS,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    TOOLS_OVERHEAD,
)
from mcp_sampling_proxy.quotas.limiters import (
    ConcurrencyLimiter,
    RateLimiter,
    TokenBudget,
    limit_key,
)
from mcp_sampling_proxy.quotas.refusals import Refusal, Reservation, format_period, format_wait
from mcp_sampling_proxy.quotas.state import STATE_DIR_ENV, JsonStateFile, state_dir


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_state_dir(tmp_path, monkeypatch)


# --- state directory and JSON store ---------------------------------------------------------


def test_state_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the XDG variables and the home come from the process environment (platformdirs reads them)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", "/x")
    assert state_dir({STATE_DIR_ENV: str(tmp_path / "s")}) == tmp_path / "s"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir({}) == tmp_path / "xdg" / "mcp-sampling-proxy"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    fallback = state_dir({}, create=False)
    if sys.platform == "darwin":
        assert fallback == tmp_path / "home" / "Library" / "Application Support" / "mcp-sampling-proxy"
    else:
        assert fallback == tmp_path / "home" / ".local" / "state" / "mcp-sampling-proxy"


def test_state_dir_and_budget_file_are_private(state: Path) -> None:
    budget = TokenBudget()
    assert budget.store.path == state / "budgets.json"
    budget.settle(Reservation("k", "r", 5, DAY, T0 + 900), None, now=T0)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "budgets.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "budgets.json.lock").stat().st_mode) == 0o600


def test_json_state_file_update_returns_and_persists(tmp_path: Path) -> None:
    store = JsonStateFile(tmp_path / "s.json")
    assert store.update(lambda data: data.setdefault("n", 41) + 1) == 42
    assert json.loads((tmp_path / "s.json").read_text()) == {"n": 41}
    assert JsonStateFile(tmp_path / "s.json").read() == {"n": 41}


def test_json_state_file_writes_nothing_when_fn_raises(tmp_path: Path) -> None:
    store = JsonStateFile(tmp_path / "s.json")
    store.update(lambda data: data.update(n=1))

    def boom(data: dict[str, Any]) -> NoReturn:
        data["n"] = 2
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.update(boom)
    assert store.read() == {"n": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json", "s.json.lock"]  # no temp files left


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "\xff\xfe", "   \n"])
def test_json_state_file_corrupt_starts_empty_with_a_warning(tmp_path: Path, content: str) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content.encode("latin-1"))
    with capture_logs() as logs:
        assert JsonStateFile(path).update(lambda data: dict(data)) == {}
    assert any(entry["log_level"] == "warning" for entry in logs)
    assert json.loads(path.read_text()) == {}  # repaired
    if content.strip():
        assert (tmp_path / "s.json.corrupt").read_bytes() == content.encode("latin-1")


# --- rate limits ----------------------------------------------------------------------------


def test_rate_limit_third_request_in_window_is_refused_then_allowed_after_it() -> None:
    limiter = RateLimiter()
    key = limit_key("trusted", "summarizer")
    assert limiter.try_acquire(key, 2, 60, now=1000.0, rule="trusted") is None
    assert limiter.try_acquire(key, 2, 60, now=1001.0, rule="trusted") is None
    refusal = limiter.try_acquire(key, 2, 60, now=1019.0, rule="trusted")
    assert refusal == Refusal(
        "rate_limit", 41.0, "rate limit of rule 'trusted' exceeded: 2 requests per 1m; retry in 41 s", key
    )
    refusal = limiter.try_acquire(key, 2, 60, now=1059.5, rule="trusted")
    assert isinstance(refusal, Refusal) and refusal.retry_after == pytest.approx(0.5)
    assert refusal.message.endswith("retry in 1 s")
    assert limiter.try_acquire(key, 2, 60, now=1060.0, rule="trusted") is None  # the first one left the window
    refusal = limiter.try_acquire(key, 2, 60, now=1060.5, rule="trusted")
    assert isinstance(refusal, Refusal) and refusal.retry_after == pytest.approx(0.5)
    assert limiter.try_acquire(key, 2, 60, now=1061.0, rule="trusted") is None


def test_rate_limit_keys_are_independent_and_refusals_do_not_count() -> None:
    limiter = RateLimiter()
    assert limiter.try_acquire("a", 1, 10, now=0.0) is None
    assert limiter.try_acquire("b", 1, 10, now=0.0) is None
    for t in range(1, 10):
        refusal = limiter.try_acquire("a", 1, 10, now=float(t))
        assert refusal is not None and refusal.message == (
            f"rate limit 'a' exceeded: 1 request per 10s; retry in {10 - t} s"
        )
    assert limiter.try_acquire("a", 1, 10, now=10.0) is None


def test_rate_limit_is_exact_over_any_window() -> None:
    limiter = RateLimiter()
    rng = random.Random(7)
    admitted = []
    t = 0.0
    for _ in range(2000):
        t += rng.expovariate(1.0)
        if limiter.try_acquire("k", 5, 30, now=t) is None:
            admitted.append(t)
    # at most 5 admissions in any half-open interval of 30 s, and the limiter kept only 5 timestamps
    assert all(admitted[i + 5] - admitted[i] >= 30 for i in range(len(admitted) - 5))
    assert len(limiter._log["k"]) <= 5
    assert len(admitted) > 300  # and it did admit: roughly 5 per 30 s over ~2000 s


# --- concurrency ----------------------------------------------------------------------------


def test_concurrency_limit() -> None:
    limiter = ConcurrencyLimiter()
    assert limiter.acquire("k", 2, rule="busy") is None
    assert limiter.acquire("k", 2, rule="busy") is None
    refusal = limiter.acquire("k", 2, rule="busy")
    assert refusal == Refusal(
        "concurrent",
        0.0,
        "concurrency limit of rule 'busy' reached: 2 requests are already in progress (concurrent: 2); "
        "retry when one finishes",
        "k",
    )
    assert limiter.acquire("other", 2) is None
    limiter.release("k")
    assert limiter.in_use("k") == 1
    assert limiter.acquire("k", 2) is None


def test_concurrency_hold_releases_on_error_and_never_goes_negative() -> None:
    limiter = ConcurrencyLimiter()
    with pytest.raises(RuntimeError), limiter.hold("k", 1) as refusal:
        assert refusal is None and limiter.in_use("k") == 1
        with limiter.hold("k", 1) as second:
            assert second is not None  # refused, and leaving this block must not release our slot
        assert limiter.in_use("k") == 1
        raise RuntimeError
    assert limiter.in_use("k") == 0
    with capture_logs() as logs:
        limiter.release("k")
    assert limiter.in_use("k") == 0 and logs[0]["log_level"] == "warning"


# --- token budgets --------------------------------------------------------------------------


def test_budget_reserve_settle_cancel(state: Path) -> None:
    budget = TokenBudget()
    first = budget.reserve("k", 10_000, DAY, 1_000, now=T0 + 10)
    assert isinstance(first, Reservation) and first.tokens == 1_000
    assert budget.status("k", DAY, now=T0 + 11).reserved == 1_000
    budget.settle(first, 300, now=T0 + 20)
    status = budget.status("k", DAY, now=T0 + 21)
    assert (status.used, status.reserved, status.window_start, status.resets_at) == (300, 0, T0, T0 + DAY)

    second = budget.reserve("k", 10_000, DAY, 2_000, now=T0 + 30)
    assert isinstance(second, Reservation)
    budget.settle(second, None, now=T0 + 40)  # provider reported no usage: the worst case is charged
    assert budget.status("k", DAY, now=T0 + 41).used == 2_300

    third = budget.reserve("k", 10_000, DAY, 5_000, now=T0 + 50)
    assert isinstance(third, Reservation)
    budget.cancel(third, now=T0 + 60)
    assert (budget.status("k", DAY, now=T0 + 61).used, budget.status("k", DAY, now=T0 + 61).reserved) == (2_300, 0)


def test_budget_refusal_says_which_budget_what_is_left_and_when_it_resets(state: Path) -> None:
    budget = TokenBudget()
    spent = budget.reserve("x@srv", 10_000, DAY, 9_800, now=T0 + 100)
    assert isinstance(spent, Reservation)
    budget.settle(spent, 9_800, now=T0 + 200)
    now = T0 + DAY - (3 * 3600 + 12 * 60)
    refusal = budget.reserve("x@srv", 10_000, DAY, 1_200, now=now, rule="x")
    assert refusal == Refusal(
        "budget",
        3 * 3600 + 12 * 60,
        "token budget of rule 'x' exhausted: 9,800 of 10,000 tokens used in this 1d window; 200 left and this "
        "request may need up to 1,200; resets in 3 h 12 min",
        "x@srv",
    )
    assert isinstance(budget.reserve("x@srv", 10_000, DAY, 200, now=now), Reservation)  # exactly what is left


def test_budget_counts_reservations_in_progress(state: Path) -> None:
    budget = TokenBudget()
    held = budget.reserve("k", 1_000, 3600, 600, now=T0)
    assert isinstance(held, Reservation)
    refusal = budget.reserve("k", 1_000, 3600, 500, now=T0 + 60, rule="r")
    assert isinstance(refusal, Refusal)
    assert refusal.message == (
        "token budget of rule 'r' exhausted: 0 of 1,000 tokens used and 600 reserved by requests in progress in "
        "this 1h window; 400 left and this request may need up to 500; resets in 59 min"
    )
    budget.settle(held, 100, now=T0 + 120)
    assert isinstance(budget.reserve("k", 1_000, 3600, 500, now=T0 + 130), Reservation)


def test_budget_larger_than_the_whole_limit_is_refused_for_good(state: Path) -> None:
    refusal = TokenBudget().reserve("k", 1_000, DAY, 1_001, now=T0, rule="tiny")
    assert isinstance(refusal, Refusal) and refusal.permanent and refusal.retry_after == 0
    assert refusal.message == (
        "token budget of rule 'tiny' is too small for this request: it may need up to 1,001 tokens (input estimate "
        "plus maxTokens) and the budget is 1,000 tokens per 1d; lower maxTokens or raise the budget"
    )


def test_budget_window_resets_on_the_epoch_aligned_boundary(state: Path) -> None:
    budget = TokenBudget()
    spent = budget.reserve("k", 1_000, DAY, 1_000, now=T0 + DAY - 1)
    assert isinstance(spent, Reservation)
    budget.settle(spent, 1_000, now=T0 + DAY - 1)
    assert isinstance(budget.reserve("k", 1_000, DAY, 1, now=T0 + DAY - 0.5), Refusal)
    fresh = budget.reserve("k", 1_000, DAY, 1_000, now=T0 + DAY)  # 00:00 UTC: a new window
    assert isinstance(fresh, Reservation)
    assert budget.status("k", DAY, now=T0 + DAY).window_start == T0 + DAY


def test_budget_usage_survives_a_restart(state: Path) -> None:
    spent = TokenBudget().reserve("k", 10_000, DAY, 4_000, now=T0)
    assert isinstance(spent, Reservation)
    TokenBudget().settle(spent, 3_500, now=T0 + 1)  # settled by a new instance: reservations are in the file
    again = TokenBudget()  # a restarted proxy
    assert again.status("k", DAY, now=T0 + 2).used == 3_500
    refusal = again.reserve("k", 10_000, DAY, 7_000, now=T0 + 3, rule="k")
    assert isinstance(refusal, Refusal) and "3,500 of 10,000 tokens used" in refusal.message


def test_stale_reservations_of_a_crashed_proxy_expire(state: Path) -> None:
    crashed = TokenBudget(reservation_ttl=900)
    assert isinstance(crashed.reserve("k", 1_000, DAY, 900, now=T0), Reservation)  # never settled
    other = TokenBudget(reservation_ttl=900)
    assert isinstance(other.reserve("k", 1_000, DAY, 200, now=T0 + 899), Refusal)
    with capture_logs() as logs:
        assert isinstance(other.reserve("k", 1_000, DAY, 200, now=T0 + 900), Reservation)
    assert any("expired token reservation" in entry["event"] for entry in logs)
    data = budgets_file(state)
    assert [r["tokens"] for r in data["budgets"]["k"]["reservations"].values()] == [200]


def test_settling_an_expired_reservation_still_charges_it(state: Path) -> None:
    budget = TokenBudget(reservation_ttl=60)
    slow = budget.reserve("k", 1_000, DAY, 500, now=T0)
    assert isinstance(slow, Reservation)
    assert budget.status("k", DAY, now=T0 + 61).reserved == 0
    budget.settle(slow, 400, now=T0 + 120)
    assert budget.status("k", DAY, now=T0 + 121).used == 400


def test_idle_keys_are_removed_from_the_file(state: Path) -> None:
    budget = TokenBudget()
    used = budget.reserve("old", 1_000, 3600, 10, now=T0)
    assert isinstance(used, Reservation)
    budget.settle(used, 10, now=T0)
    budget.reserve("new", 1_000, 3600, 10_000, now=T0 + 7200)  # refused; still tidies the file
    assert budgets_file(state)["budgets"] == {}


def test_malformed_budget_entries_are_dropped(state: Path) -> None:
    """Entries a proxy wrote and a later version cannot read (the file's seal is good)."""
    state.mkdir(mode=0o700)
    JsonStateFile(state / "budgets.json", sealed="budgets").update(
        lambda data: data.update(
            {
                "version": 1,
                "budgets": {"bad": {"per": "1d"}, "good": {"per": DAY, "window": T0, "used": 5, "reservations": {}}},
            }
        )
    )
    budget = TokenBudget()
    assert budget.status("good", DAY, now=T0 + 1).used == 5
    assert "bad" not in budgets_file(state)["budgets"]


def budgets_file(state: Path) -> dict[str, Any]:
    """What budgets.json holds, checked as the proxy checks it (it is sealed)."""
    return JsonStateFile(state / "budgets.json", sealed="budgets").read()


# (exact across processes, four of them reserving on one file at once: tests/e2e/test_budget_across_processes.py)


# --- worst case and formatting --------------------------------------------------------------


def test_worst_case_counts_text_images_and_max_tokens() -> None:
    params = {
        "systemPrompt": "abc",  # 3 bytes
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "héllo"},  # 6 bytes
                    {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                ],
            },
            {"role": "assistant", "content": {"type": "text", "text": "ok"}},  # 2 bytes
        ],
        "maxTokens": 100,
    }
    # every UTF-8 byte may be a token (a true bound, also for CJK); an unreadable image counts as the
    # most any image costs; fixed overheads per request, message and block; then maxTokens
    assert survey(params).worst_case().tokens == (
        REQUEST_OVERHEAD + 2 * MESSAGE_OVERHEAD + 3 * BLOCK_OVERHEAD + 11 + IMAGE_MAX_TOKENS + 100
    )


def test_worst_case_includes_tool_results_and_tools() -> None:
    tools = [{"name": "fetch", "inputSchema": {"type": "object"}}]
    params = {
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "a" * 8}},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "fetch", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "toolUseId": "c1",
                        "content": [
                            {"type": "text", "text": "b" * 40},
                            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                        ],
                    }
                ],
            },
        ],
        "tools": tools,
        "maxTokens": 1000,
    }
    text_bytes = 8 + (len("{}") + len("fetch")) + 40 + len(json.dumps(tools, separators=(",", ":")))
    blocks = 5  # text, tool_use, tool_result, and the text and image inside it
    assert survey(params).worst_case().tokens == (
        REQUEST_OVERHEAD
        + 3 * MESSAGE_OVERHEAD
        + blocks * BLOCK_OVERHEAD
        + text_bytes
        + TOOLS_OVERHEAD
        + IMAGE_MAX_TOKENS
        + 1000
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (0.2, "1 s"),
        (41, "41 s"),
        (41.0000001, "41 s"),
        (59.5, "1 min"),
        (125, "2 min 5 s"),
        (3600, "1 h"),
        (3 * 3600 + 11 * 60 + 1, "3 h 12 min"),
        (DAY - 1, "1 d"),
        (2 * DAY + 4 * 3600, "2 d 4 h"),
    ],
)
def test_format_wait(seconds: float, shown: str) -> None:
    assert format_wait(seconds) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (60, "1m"),
        (86400, "1d"),
        (3600.0, "1h"),
        (5400, "90m"),
        (90, "90s"),
        (1.5, "1.5s"),
        (7 * 86400, "7d"),
    ],
)
def test_format_period(seconds: float, shown: str) -> None:
    assert format_period(seconds) == shown

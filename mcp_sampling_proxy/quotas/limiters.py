"""Rate limits, concurrency limits and token budgets for sampling requests.

The caller builds each limit's key (`limit_key(rule, server)`) and passes the limit's
numbers and the current time (`now`, seconds since the epoch; default `time.time()`), so
everything here is deterministic under test. Refusals come back as values, not exceptions:
the caller decides the JSON-RPC error and the audit record.

- `RateLimiter`: N requests per `per` seconds, a sliding window log (exact: at most N
  admitted in any interval of length `per`; memory is at most N timestamps per key). In memory,
  so per proxy process: two proxies of the same server each allow N.
- `ConcurrencyLimiter`: at most N requests of a key in progress at once, per proxy process.
- `TokenBudget`: tokens per fixed window (`per` seconds, aligned to the Unix epoch, so a `1d`
  budget resets at 00:00 UTC), persisted in `state_dir()/budgets.json` and shared by every
  proxy of the user on this machine. A request reserves its worst case before the LLM call
  and settles to the real usage after it. Reservations expire (default 15 min) so a crashed
  proxy's reservations stop counting; expired ones are dropped, not charged. The same class keeps
  `usd` budgets (unit USD), in whole micro-dollars in the file's `spend` mapping: a request's worst
  case is priced at its model's price (config/prices.py), and settles to what its usage cost.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeGuard

import anyio
from msgspec import Struct

from mcp_sampling_proxy.config.prices import Price
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.policy.survey import WorstCase
from mcp_sampling_proxy.quotas.redis_store import RedisQuotas, StateUnavailable, shown_url
from mcp_sampling_proxy.quotas.refusals import (
    RESERVATION_TTL,
    TOKENS,
    USD,
    Refusal,
    Reservation,
    budget_refusal,
    concurrency_refusal,
    rate_refusal,
    state_file_refusal,
    unpriced_refusal,
)
from mcp_sampling_proxy.quotas.state import StateFile, StateGone, TamperedState, state_dir

if TYPE_CHECKING:
    from mcp_sampling_proxy.config.settings import StateSettings
    from mcp_sampling_proxy.policy.rules import Rule

log = get_logger("mcp_sampling_proxy.quotas.limiters")

BUDGETS_FILE = "budgets.json"


def limit_key(rule: str, server: str) -> str:
    """The key of a rule's limits for one server. Budget keys are shared through the state file,
    so every proxy must build them the same way: use this."""
    return f"{rule}@{server}"


def _now(now: float | None) -> float:
    return time.time() if now is None else now


class RateLimiter:
    """N requests per `per` seconds per key; a sliding window log, in memory (per proxy)."""

    def __init__(self) -> None:
        self._log: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def try_acquire(
        self, key: str, requests: int, per: float, now: float | None = None, *, rule: str | None = None
    ) -> Refusal | None:
        """Admit one request (None) or refuse it. A request at time t counts until t + per."""
        if requests < 1 or per <= 0:
            raise ValueError(f"rate limit needs requests >= 1 and per > 0, got {requests} per {per}")
        now = _now(now)
        with self._lock:
            window = self._log.setdefault(key, deque())
            while window and window[0] <= now - per:
                window.popleft()
            if len(window) >= requests:
                # the request that makes room is the one N places from the newest
                retry_after = max(0.0, min(per, window[len(window) - requests] + per - now))
                return rate_refusal(key, requests, per, retry_after, rule)
            window.append(now)
            while len(window) > requests:  # only the newest N can ever decide; bounded memory
                window.popleft()
            return None

    def reset(self, key: str | None = None) -> None:
        with self._lock:
            if key is None:
                self._log.clear()
            else:
                self._log.pop(key, None)


class ConcurrencyLimiter:
    """At most N requests of a key in progress at once, in memory (per proxy)."""

    def __init__(self) -> None:
        self._active: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str, limit: int, *, rule: str | None = None) -> Refusal | None:
        """Take a slot (None; call `release` when done) or refuse."""
        if limit < 1:
            raise ValueError(f"concurrency limit needs limit >= 1, got {limit}")
        with self._lock:
            active = self._active.get(key, 0)
            if active >= limit:
                return concurrency_refusal(key, limit, active, rule)
            self._active[key] = active + 1
            return None

    def release(self, key: str) -> None:
        with self._lock:
            active = self._active.get(key, 0)
            if active <= 1:
                self._active.pop(key, None)
                if active == 0:
                    log.warning("concurrency slot released that was not held", key=key)
            else:
                self._active[key] = active - 1

    @contextmanager
    def hold(self, key: str, limit: int, *, rule: str | None = None) -> Iterator[Refusal | None]:
        """`with limiter.hold(key, n) as refusal:` — refusal is None when a slot is held for the
        block (released on exit, also on error or cancellation), else the Refusal."""
        refusal = self.acquire(key, limit, rule=rule)
        try:
            yield refusal
        finally:
            if refusal is None:
                self.release(key)

    def in_use(self, key: str) -> int:
        with self._lock:
            return self._active.get(key, 0)


class SamplingGate:
    """At most `max_concurrent` LLM calls of one proxy at once, and at most `max_queued` waiting.

    A server can send a thousand sampling requests in one burst; without this every one of them
    opens a provider connection at once, the HTTP pool's bookkeeping grows faster than linearly
    and the relay (pings, every other message) stalls behind it. Waiting requests cost a task
    each; past the queue bound a request is refused at once, which the server can retry."""

    def __init__(self, max_concurrent: int, max_queued: int):
        if max_concurrent < 1 or max_queued < 0:
            raise ValueError(f"need max_concurrent >= 1 and max_queued >= 0, got {max_concurrent}, {max_queued}")
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self._slots = anyio.Semaphore(max_concurrent)
        self.waiting = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Refusal | None]:
        """`async with gate.slot() as refusal:` -- None once a slot is held (released on exit,
        also on error or cancellation), else the Refusal of a full queue, without waiting."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            if self.waiting >= self.max_queued:
                yield Refusal(
                    "queue",
                    0.0,
                    f"the proxy is busy: {self.max_concurrent} LLM calls are in progress (sampling.max_concurrent) "
                    f"and {self.waiting} more are waiting (sampling.max_queued: {self.max_queued}); retry later",
                )
                return
            self.waiting += 1
            try:
                await self._slots.acquire()
            finally:
                self.waiting -= 1
        try:
            yield None
        finally:
            self._slots.release()


class BudgetStatus(Struct, frozen=True):
    used: int
    reserved: int
    window_start: float
    resets_at: float


class TokenBudget:
    """Token budgets per key in fixed windows, persisted and shared across proxy processes.

    Every call is one locked read-modify-write of the JSON file (see `state.JsonStateFile`),
    which also drops expired reservations and finished windows of every key.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        reservation_ttl: float = RESERVATION_TTL,
        durable: bool = True,
        unit: str = TOKENS,
    ):
        self.store: StateFile[BudgetsDocument] = StateFile(
            path if path is not None else state_dir() / BUDGETS_FILE, durable=durable, sealed="budgets"
        )
        self.reservation_ttl = reservation_ttl
        self.unit = unit  # tokens, or usd (micro-dollars), kept in the file's `budgets` or `spend` mapping
        self.section = SECTIONS[unit]

    def reserve(
        self,
        key: str,
        limit_tokens: int,
        per_seconds: float,
        worst_case_tokens: int,
        now: float | None = None,
        *,
        rule: str | None = None,
    ) -> Reservation | Refusal:
        """Set aside worst_case_tokens in the current window, unless used + reserved + worst case
        would exceed limit_tokens."""
        if per_seconds <= 0:
            raise ValueError(f"budget window must be > 0 seconds, got {per_seconds}")
        now = _now(now)
        worst = max(0, int(worst_case_tokens))

        def change(data: BudgetsDocument) -> Reservation | Refusal:
            budgets = _budgets(data, now, self.section)
            entry = _current(budgets, key, per_seconds, now)
            used, reserved = entry["used"], _reserved(entry)
            resets_in = max(0.0, entry["window"] + per_seconds - now)
            if worst > limit_tokens or used + reserved + worst > limit_tokens:
                _drop_if_idle(budgets, key)
                return budget_refusal(
                    key,
                    limit_tokens,
                    per_seconds,
                    worst,
                    used,
                    reserved,
                    resets_in,
                    rule,
                    too_small=worst > limit_tokens,
                    unit=self.unit,
                )
            reservation = Reservation(
                key, uuid.uuid4().hex[:16], worst, float(per_seconds), now + self.reservation_ttl, self.unit
            )
            entry["reservations"][reservation.id] = {"tokens": worst, "expires": reservation.expires}
            return reservation

        return self.store.update(change)

    def settle(self, reservation: Reservation, actual_tokens: int | None, now: float | None = None) -> None:
        """Replace the reservation with the real usage (None: charge the worst case reserved).

        Usage is charged to the window current at settle time, when the tokens were spent; it is
        charged even when the reservation had already expired (a very slow request)."""
        now = _now(now)
        charge = reservation.tokens if actual_tokens is None else max(0, int(actual_tokens))

        def change(data: BudgetsDocument) -> None:
            budgets = _budgets(data, now, self.section)
            entry = _current(budgets, reservation.key, reservation.per, now)
            if entry["reservations"].pop(reservation.id, None) is None:
                log.info("settling a reservation that had expired", key=reservation.key, tokens=charge)
            entry["used"] += charge
            _drop_if_idle(budgets, reservation.key)

        self.store.update(change)

    def cancel(self, reservation: Reservation, now: float | None = None) -> None:
        """Release the reservation without charging anything (the request never reached the LLM)."""
        now = _now(now)

        def change(data: BudgetsDocument) -> None:
            budgets = _budgets(data, now, self.section)
            entry = budgets.get(reservation.key)
            if entry is not None:
                entry["reservations"].pop(reservation.id, None)
                _drop_if_idle(budgets, reservation.key)

        self.store.update(change)

    def status(self, key: str, per_seconds: float, now: float | None = None) -> BudgetStatus:
        """Usage of key in the current window (also tidies the file, like every call)."""
        now = _now(now)

        def change(data: BudgetsDocument) -> BudgetStatus:
            budgets = _budgets(data, now, self.section)
            entry = _current(budgets, key, per_seconds, now)
            status = BudgetStatus(entry["used"], _reserved(entry), entry["window"], entry["window"] + per_seconds)
            _drop_if_idle(budgets, key)
            return status

        return self.store.update(change)


class Held(TypedDict):
    """A reservation: what a request in flight may still spend, until when."""

    tokens: int  # (micro-dollars in `spend`)
    expires: float


class BudgetWindow(TypedDict):
    """One budget's current window."""

    per: float  # the window's length, seconds
    window: float  # its start
    used: int
    reservations: dict[str, Held]


class BudgetsDocument(TypedDict, total=False):
    """`budgets.json`: windows by budget key, in tokens (`budgets`) and in micro-dollars (`spend`)."""

    version: int
    budgets: dict[str, BudgetWindow]
    spend: dict[str, BudgetWindow]


Section = Literal["budgets", "spend"]
SECTIONS: dict[str, Section] = {TOKENS: "budgets", USD: "spend"}


def _window_start(now: float, per: float) -> float:
    return math.floor(now / per) * per


def _budgets(data: BudgetsDocument, now: float, section: Section = "budgets") -> dict[str, BudgetWindow]:
    """The budgets mapping (`section`: budgets in tokens, spend in micro-dollars), with malformed
    entries, expired reservations and idle finished windows removed."""
    data.setdefault("version", 1)
    budgets = data.get(section)
    if not isinstance(budgets, dict):
        budgets = data[section] = {}
    for key in list(budgets):
        entry = budgets[key]
        if not _well_formed(entry):
            log.warning("dropping malformed budget entry", key=key)
            del budgets[key]
            continue
        for rid, res in list(entry["reservations"].items()):
            if res["expires"] <= now:
                log.warning(
                    "dropping an expired token reservation (its proxy crashed or stalled)",
                    key=key,
                    tokens=res["tokens"],
                )
                del entry["reservations"][rid]
        if entry["window"] + entry["per"] <= now:
            entry["used"] = 0
        _drop_if_idle(budgets, key)
    return budgets


def _well_formed(entry: object) -> TypeGuard[BudgetWindow]:
    if not isinstance(entry, dict):
        return False
    number = (int, float)
    if not (
        isinstance(entry.get("per"), number)
        and entry["per"] > 0
        and isinstance(entry.get("window"), number)
        and isinstance(entry.get("used"), int)
        and isinstance(entry.get("reservations"), dict)
    ):
        return False
    return all(
        isinstance(r, dict) and isinstance(r.get("tokens"), int) and isinstance(r.get("expires"), number)
        for r in entry["reservations"].values()
    )


def _current(budgets: dict[str, BudgetWindow], key: str, per: float, now: float) -> BudgetWindow:
    """key's entry, moved to the window containing now (usage reset when the window or the
    configured period changed; reservations carry over: they are requests still in progress)."""
    start = _window_start(now, per)
    entry = budgets.get(key)
    if entry is None:
        entry = budgets[key] = {"per": per, "window": start, "used": 0, "reservations": {}}
    elif entry["per"] != per or entry["window"] < start:
        entry["per"], entry["window"], entry["used"] = per, start, 0
    return entry


def _reserved(entry: BudgetWindow) -> int:
    return sum(r["tokens"] for r in entry["reservations"].values())


def _drop_if_idle(budgets: dict[str, BudgetWindow], key: str) -> None:
    entry = budgets.get(key)
    if entry is not None and not entry["used"] and not entry["reservations"]:
        del budgets[key]


def usd_micros(dollars: float) -> int:
    """A budget's dollars as micro-dollars (0.1 is 100,000, not 100,000.00000000001)."""
    return int(Decimal(str(dollars)) * 1_000_000)


# Human-friendly durations


class SharedState:
    """Limits shared with other proxies (a `RedisQuotas`), and what to do when they cannot be
    reached: `deny` refuses the request with an error naming the store, `allow_local` falls back
    to this proxy's own limits (rate and concurrency in memory, budgets in the local state file)."""

    def __init__(self, store: Any, on_error: str, where: str):
        self.store = store
        self.on_error = on_error
        self.where = where  # the store's URL without its password

    def refusal(self, error: Exception) -> Refusal:
        return Refusal(
            "state",
            0.0,
            f"the shared limits store {self.where} could not be used ({error}); the request is refused "
            "(state.on_state_error: deny). Check that Redis is running and reachable, or set "
            "state.on_state_error: allow_local to fall back to this proxy's own limits",
        )

    def falls_back(self, error: Exception) -> bool:
        """True when the caller should use the local limits; logs either way."""
        log.warning("shared limits store unavailable", store=self.where, error=str(error), on_state_error=self.on_error)
        return self.on_error == "allow_local"


def shared_state(settings: StateSettings) -> SharedState | None:
    """The Redis store the policy's `state:` section names, or None for the local store."""
    if settings.backend != "redis":
        return None
    if not settings.url:
        raise ValueError("state.url_env has not been resolved (config.settings.resolve_state)")
    return SharedState(RedisQuotas(settings.url, settings.prefix), settings.on_state_error, shown_url(settings.url))


class Limiters:
    """A rule's rate limit, concurrency limit and token budget, applied to one proxy's requests
    (sampling and elicitation alike): on this machine, or shared on Redis (`shared`)."""

    def __init__(
        self, budget: TokenBudget | None = None, shared: SharedState | None = None, max_in_hand: int | None = None
    ):
        self.max_in_hand = max_in_hand  # server requests the proxy holds at once, whatever they wait for
        self.in_hand = 0
        self.rate = RateLimiter()
        self.concurrency = ConcurrencyLimiter()
        self._budget = budget
        self._spend: TokenBudget | None = None  # usd budgets, in the same state file as `budget`
        self.shared = shared
        self._shared_full_until: dict[str, float] = {}  # key -> when the shared window said it has room again
        self._counting: set[Any] = set()  # tasks counting host-answered admissions in the shared window

    def sharing(self, max_in_hand: int | None) -> Limiters:
        """Limiters for one more session of the same proxy process (`serve` runs many): the same rate and
        concurrency windows and shared store, so a limit counts per process as the policy says, not per
        session a caller can open again; a hand of its own (`max_in_hand` counts one server's requests).
        Budgets live in the state file (or the shared store), which every holder reads."""
        other = Limiters(shared=self.shared, max_in_hand=max_in_hand)
        other.rate, other.concurrency = self.rate, self.concurrency
        other._shared_full_until, other._counting = self._shared_full_until, self._counting
        return other

    @asynccontextmanager
    async def hold(self, rule: Rule | None, key: str) -> AsyncIterator[Refusal | None]:
        """Rate limit and concurrency slot for the duration of one request."""
        limit = rule.rate_limit if rule else None
        if rule is None or limit is None:
            yield None
            return
        if limit.requests is not None and limit.per is not None:
            refusal = await self._rate(key, limit.requests, limit.per, rule.name)
            if refusal is not None:
                yield refusal
                return
        if limit.concurrent is None:
            yield None
            return
        lease = await self._shared_slot(key, limit.concurrent, rule.name)
        if isinstance(lease, Refusal):
            yield lease
        elif lease is not None:
            try:
                yield None
            finally:
                assert self.shared is not None
                with anyio.CancelScope(shield=True):
                    await self.shared.store.release_slot(key, lease)
        else:
            with self.concurrency.hold(key, limit.concurrent, rule=rule.name) as refusal:
                yield refusal

    @contextmanager
    def holding(self) -> Iterator[Refusal | None]:
        """`with limiters.holding() as refusal:` for the whole life of one served request (sampling or
        elicitation): None while it counts against `max_in_hand`, else the Refusal of a full hand. The
        sampling gate bounds LLM calls; this bounds what waits before them (a human's approval, the
        host's answer), which a flood of requests under a `prompt` rule would otherwise pile up."""
        if self.max_in_hand is not None and self.in_hand >= self.max_in_hand:
            yield Refusal(
                "queue",
                0.0,
                f"the proxy is busy: it holds {self.in_hand} requests of this server "
                "already (waiting for approval, the host or the LLM: twice "
                "sampling.max_concurrent + sampling.max_queued); retry later",
            )
            return
        self.in_hand += 1
        try:
            yield None
        finally:
            self.in_hand -= 1

    def admit_now(self, rule: Rule | None, key: str) -> Refusal | None:
        """The rule's rate limit for a request that is not held here (sampling the host answers in a
        2026-07-28 round): decided in this proxy's own window at once, as the check cannot wait for
        a shared store. With one, the admission is then counted there too (other proxies' checks see
        it), and while the shared window last said it is full, nothing is admitted here: the proxy
        serves the request and its own shared check refuses it. None when admitted (or no limit)."""
        limit = rule.rate_limit if rule else None
        if rule is None or limit is None or limit.requests is None or limit.per is None:
            return None
        if self.shared is not None and time.monotonic() < self._shared_full_until.get(key, 0.0):
            return rate_refusal(
                key, limit.requests, limit.per, self._shared_full_until[key] - time.monotonic(), rule.name
            )
        refusal = self.rate.try_acquire(key, limit.requests, limit.per, rule=rule.name)
        if refusal is None and self.shared is not None:
            self._count_shared(key, limit.requests, limit.per, rule.name)
        return refusal

    def _count_shared(self, key: str, requests: int, per: float, rule: str) -> None:
        """Count an admission made without the shared store in it, once the store answers."""
        assert self.shared is not None
        shared = self.shared

        async def count() -> None:
            try:
                refusal = await shared.store.try_rate(key, requests, per, rule=rule)
            except StateUnavailable as exc:
                log.warning(
                    "could not count sampling the host answered in the shared rate window",
                    key=key,
                    store=shared.where,
                    error=str(exc),
                )
                return
            if refusal is not None:  # others filled it: admit nothing more here until it has room
                self._shared_full_until[key] = time.monotonic() + refusal.retry_after
                log.warning(
                    "the shared rate window was full when this proxy let the host answer a request",
                    key=key,
                    rule=rule,
                    retry_after=round(refusal.retry_after, 1),
                )

        task = asyncio.get_running_loop().create_task(count())
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def _rate(self, key: str, requests: int, per: float, rule: str) -> Refusal | None:
        if self.shared is not None:
            try:
                refusal: Refusal | None = await self.shared.store.try_rate(key, requests, per, rule=rule)
                return refusal
            except StateUnavailable as exc:
                if not self.shared.falls_back(exc):
                    return self.shared.refusal(exc)
        return self.rate.try_acquire(key, requests, per, rule=rule)

    async def _shared_slot(self, key: str, limit: int, rule: str) -> str | Refusal | None:
        """A shared slot's lease, a Refusal, or None: use the local limiter."""
        if self.shared is None:
            return None
        try:
            lease: str | Refusal = await self.shared.store.take_slot(key, limit, rule=rule)
            return lease
        except StateUnavailable as exc:
            return None if self.shared.falls_back(exc) else self.shared.refusal(exc)

    @asynccontextmanager
    async def budget(
        self, rule: Rule | None, key: str, worst_case: WorstCase, priced: PricedModel | None = None
    ) -> AsyncIterator[BudgetHold | Refusal]:
        """`async with limiters.budget(rule, key, worst_case, priced) as hold:` reserves the request's
        worst case (its survey's token bound, policy/survey.py) under the rule's budget, in tokens
        and/or in dollars at `priced`'s price (a Refusal when it does not fit, or when a usd budget
        meets a model without a price), and settles it when the block ends with what `hold` says was
        spent: nothing unless an LLM call was made. `priced`: the model our own LLM would answer with
        (None: none can, the host answers)."""
        hold = BudgetHold()
        if rule is None or rule.budget is None:
            yield hold
            return
        budget = rule.budget
        wanted: list[tuple[str, int, int]] = []  # (unit, limit, worst case)
        if budget.tokens is not None:
            wanted.append((TOKENS, budget.tokens, worst_case.tokens))
        if budget.usd is not None and priced is not None:
            if priced.price is None:
                yield unpriced_refusal(key, rule.name, priced.provider, priced.model, command=priced.command)
                return
            wanted.append(
                (
                    USD,
                    usd_micros(budget.usd),
                    priced.price.cost_micros(worst_case.input_tokens, worst_case.output_tokens),
                )
            )
        held: list[_Held] = []
        try:
            for unit, limit, need in wanted:
                got = await self._reserve(key, unit, limit, budget.per, need, rule.name)
                if isinstance(got, Refusal):
                    yield got
                    return
                held.append(got)
            yield hold
        finally:
            with anyio.CancelScope(shield=True):
                for one in held:
                    await self._settle(one, hold.tokens if one.reservation.unit == TOKENS else hold.cost_micros)

    async def _reserve(self, key: str, unit: str, limit: int, per: float, worst: int, rule: str) -> _Held | Refusal:
        """One reservation, on the shared store or in the state file (of this machine's proxies)."""
        if self.shared is not None:
            try:
                shared: Reservation | Refusal = await self.shared.store.reserve(
                    key, limit, per, worst, rule=rule, unit=unit
                )
            except StateUnavailable as exc:
                if not self.shared.falls_back(exc):
                    return self.shared.refusal(exc)
            else:
                return shared if isinstance(shared, Refusal) else _Held(shared, None)
        local = self._local(unit)
        # The state file is shared with the user's other proxies (and reachable by the server): its lock
        # and fsync are waited for in a worker thread, never on the event loop that relays messages.
        try:
            got = await anyio.to_thread.run_sync(functools.partial(local.reserve, key, limit, per, worst, rule=rule))
        except OSError as exc:
            tampered, gone = isinstance(exc, TamperedState), isinstance(exc, StateGone)
            return state_file_refusal(local.store.path, exc, key, tampered=tampered, gone=gone)
        return got if isinstance(got, Refusal) else _Held(got, local)

    def _local(self, unit: str) -> TokenBudget:
        if unit == TOKENS:
            if self._budget is None:
                self._budget = TokenBudget()
            return self._budget
        if self._spend is None:
            self._spend = TokenBudget(self._budget.store.path if self._budget else None, unit=USD)
        return self._spend

    async def _settle(self, held: _Held, spent: int | None) -> None:
        """Charge what was spent (None: the worst case reserved; 0: nothing, the reservation is released)."""
        reservation = held.reservation
        try:
            if held.local is None:
                assert self.shared is not None
                if spent == 0:
                    await self.shared.store.cancel(reservation)
                else:
                    await self.shared.store.settle(reservation, spent)
            elif spent == 0:
                await anyio.to_thread.run_sync(held.local.cancel, reservation)
            else:
                await anyio.to_thread.run_sync(held.local.settle, reservation, spent)
        except (StateUnavailable, OSError) as exc:  # the reservation expires by itself (RESERVATION_TTL)
            where = str(held.local.store.path) if held.local is not None else self.shared.where if self.shared else ""
            log.error(
                "could not settle a budget reservation; it expires by itself and this request's usage is not charged",
                where=where,
                key=reservation.key,
                unit=reservation.unit,
                error=str(exc),
            )

    async def aclose(self) -> None:
        if self.shared is not None:
            if self._counting:  # admissions still being counted in the shared window
                await asyncio.wait(self._counting, timeout=2.0)
            await self.shared.store.aclose()


class PricedModel(Struct, frozen=True):
    """The provider and model a request would be answered with, and its price (None: unpriced)."""

    provider: str
    model: str
    price: Price | None
    command: bool = False  # the provider runs a CLI (its spending is priced only by the policy)


class _Held(Struct, frozen=True):
    """A reservation and where it lives: a local state file, or (None) the shared store."""

    reservation: Reservation
    local: TokenBudget | None


class BudgetHold:
    """What one request has cost its budget: 0 until an LLM call starts, then unknown (charged at
    the reserved worst case) until the provider reports its usage; in tokens and in micro-dollars."""

    def __init__(self) -> None:
        self.tokens: int | None = 0
        self.cost_micros: int | None = 0

    def calling(self) -> None:
        self.tokens = None
        self.cost_micros = None

    def spent(self, tokens: int | None, cost_micros: int | None = None) -> None:
        self.tokens = tokens
        self.cost_micros = cost_micros

"""Rate limits, concurrency limits and token budgets shared on Redis by every proxy that points at it.

Each check-and-change is one Lua script, so it is atomic across proxies and machines, and each
script reads the clock with Redis's `TIME`, so machines whose clocks disagree still share one
window. Nothing lives forever: rate-limit logs expire with their window, concurrency slots and
token reservations carry an expiry (a proxy that dies mid-call stops holding them once it passes),
and every key gets a TTL.

Keys (PREFIX is `state.prefix`; the braces are a Redis Cluster hash tag, so a limit's keys share
a slot): `PREFIX{rate:KEY}`, `PREFIX{slots:KEY}`, `PREFIX{budget:KEY}` (hash: per, window, used)
with `PREFIX{budget:KEY}:res` (reservation id -> expiry) and `PREFIX{budget:KEY}:tok` (id -> tokens);
a usd budget's are the same under `PREFIX{spend:KEY}`, in micro-dollars.

The `redis` package is imported only when a policy asks for this backend.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.quotas.refusals import (
    RESERVATION_TTL,
    TOKENS,
    USD,
    BudgetUse,
    Refusal,
    Reservation,
    budget_refusal,
    concurrency_refusal,
    rate_refusal,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = get_logger("mcp_sampling_proxy.quotas.redis_store")

MAX_CONNECTIONS = 8  # per proxy
KINDS = {TOKENS: "budget", USD: "spend"}  # a budget's keys by its unit: PREFIX{budget:KEY}, PREFIX{spend:KEY}
SLOT_TTL = RESERVATION_TTL  # seconds a concurrency slot counts before it is presumed abandoned

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS[1] log; ARGV: requests, per, member. Returns {admitted (1/0), retry_after as a string}.
_RATE = (
    _NOW
    + """
local requests, per = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - per)
local n = redis.call('ZCARD', KEYS[1])
if n >= requests then
  local oldest = redis.call('ZRANGE', KEYS[1], n - requests, n - requests, 'WITHSCORES')
  return {0, tostring(tonumber(oldest[2]) + per - now)}
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(per * 1000))
return {1, '0'}
"""
)

# KEYS[1] slots; ARGV: limit, lease id, ttl. Returns {taken (1/0), slots in use}.
_SLOT = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[1]) then return {0, n} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3]) * 1000))
return {1, n + 1}
"""
)

# The budget's entry moved to the window holding `now`, expired reservations dropped: used, reserved.
_BUDGET_WINDOW = (
    _NOW
    + """
local per = tonumber(ARGV[1])
local start = math.floor(now / per) * per
local entry = redis.call('HMGET', KEYS[1], 'per', 'window', 'used')
local used = tonumber(entry[3]) or 0
if tonumber(entry[1]) ~= per or (tonumber(entry[2]) or -1) < start then
  used = 0
  redis.call('HSET', KEYS[1], 'per', ARGV[1], 'window', tostring(start), 'used', '0')
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  redis.call('HDEL', KEYS[3], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local reserved = 0
for _, tokens in ipairs(redis.call('HVALS', KEYS[3])) do reserved = reserved + tonumber(tokens) end
local resets_in = start + per - now
local function keep(ttl)
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], math.ceil(ttl * 1000)) end
end
"""
)

# ARGV: per, limit, worst, id, ttl. Returns {status, used, reserved, resets_in}.
_RESERVE = (
    _BUDGET_WINDOW
    + """
local limit, worst, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if worst > limit then return {'too_small', used, reserved, tostring(resets_in)} end
if used + reserved + worst > limit then return {'exhausted', used, reserved, tostring(resets_in)} end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
redis.call('HSET', KEYS[3], ARGV[4], ARGV[3])
keep(math.max(resets_in, ttl) + 60)
return {'ok', used, reserved + worst, tostring(resets_in)}
"""
)

# ARGV: per, id, tokens to charge ('' = cancel, charge nothing). Returns 1 when the reservation was held.
_SETTLE = (
    _BUDGET_WINDOW
    + """
local held = redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HINCRBY', KEYS[1], 'used', tonumber(ARGV[3]))
end
keep(math.max(resets_in, 1) + 60)
return held
"""
)


class StateUnavailable(Exception):
    """The shared store could not be reached or answered with an error."""


def shown_url(url: str) -> str:
    """The URL without its password, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


class RedisQuotas:
    """The three limits on one Redis, each check atomic; raises StateUnavailable when Redis fails."""

    def __init__(self, url: str, prefix: str, *, timeout: float = 2.0, reservation_ttl: float = RESERVATION_TTL):
        # start-up: redis costs ~0.4 s, only a redis store needs it
        from redis.asyncio import BlockingConnectionPool, Redis

        self.url = url
        self.prefix = prefix
        self.reservation_ttl = reservation_ttl
        # A few connections, and a request waits its turn for one (a plain pool refuses past its size
        # when a server fires hundreds of requests at once); each check is one short script.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            decode_responses=True,
        )
        self._pool = pool
        self._redis: Redis = Redis(connection_pool=pool)
        self._rate = self._redis.register_script(_RATE)
        self._slot = self._redis.register_script(_SLOT)
        self._reserve = self._redis.register_script(_RESERVE)
        self._settle = self._redis.register_script(_SETTLE)

    def _key(self, kind: str, key: str) -> str:
        return f"{self.prefix}{{{kind}:{key}}}"

    def _budget_keys(self, key: str, unit: str = TOKENS) -> list[str]:
        base = self._key(KINDS[unit], key)
        return [base, base + ":res", base + ":tok"]

    async def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        from redis.exceptions import RedisError  # start-up: redis costs ~0.4 s, only a redis store needs it

        try:
            return await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            raise StateUnavailable(f"{type(exc).__name__}: {exc}") from None

    async def try_rate(self, key: str, requests: int, per: float, *, rule: str | None) -> Refusal | None:
        admitted, retry_after = await self._run(self._rate, [self._key("rate", key)], [requests, per, uuid.uuid4().hex])
        if int(admitted):
            return None
        return rate_refusal(key, requests, per, max(0.0, min(per, float(retry_after))), rule)

    async def take_slot(self, key: str, limit: int, *, rule: str | None) -> str | Refusal:
        """A lease id to give back with `release_slot`, or the Refusal of a full limit."""
        lease = uuid.uuid4().hex
        taken, in_use = await self._run(self._slot, [self._key("slots", key)], [limit, lease, SLOT_TTL])
        return lease if int(taken) else concurrency_refusal(key, limit, int(in_use), rule)

    async def release_slot(self, key: str, lease: str) -> None:
        from redis.exceptions import RedisError  # start-up: redis costs ~0.4 s, only a redis store needs it

        try:
            await self._redis.zrem(self._key("slots", key), lease)
        except (RedisError, OSError) as exc:  # the lease expires on its own
            log.warning(
                "could not release a shared concurrency slot; it expires by itself",
                key=key,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def reserve(
        self, key: str, limit: int, per: float, worst: int, *, rule: str | None, unit: str = TOKENS
    ) -> Reservation | Refusal:
        """Set aside `worst` (tokens, or micro-dollars for a usd budget) unless the window has no room."""
        rid = uuid.uuid4().hex[:16]
        status, used, reserved, resets_in = await self._run(
            self._reserve, self._budget_keys(key, unit), [per, limit, worst, rid, self.reservation_ttl]
        )
        if status == "ok":
            return Reservation(key, rid, worst, float(per), 0.0, unit)
        return budget_refusal(
            key,
            limit,
            per,
            worst,
            int(used),
            int(reserved),
            float(resets_in),
            rule,
            too_small=status == "too_small",
            unit=unit,
        )

    async def settle(self, reservation: Reservation, tokens: int | None) -> None:
        """Charge the real usage (None: the worst case reserved), or with `cancel` nothing."""
        charge = reservation.tokens if tokens is None else max(0, int(tokens))
        keys = self._budget_keys(reservation.key, reservation.unit)
        held = await self._run(self._settle, keys, [reservation.per, reservation.id, charge])
        if not int(held):
            log.info("settling a reservation that had expired", key=reservation.key, tokens=charge)

    async def cancel(self, reservation: Reservation) -> None:
        await self._run(
            self._settle, self._budget_keys(reservation.key, reservation.unit), [reservation.per, reservation.id, ""]
        )

    async def aclose(self) -> None:
        await self._redis.aclose()
        await self._pool.disconnect()


def read_budgets(url: str, prefix: str, *, timeout: float = 2.0, unit: str = TOKENS) -> dict[str, BudgetUse]:
    """The shared budgets' current windows, for a console to show (read only, never changed here):
    KEY -> used, reserved (reservations not yet expired), per, resets_at (None once the window ended);
    `unit`: the token budgets, or the usd ones (micro-dollars).
    Empty when Redis cannot be reached: a display must not fail for it."""
    from redis import Redis  # start-up: redis costs ~0.4 s, only a redis store needs it
    from redis.exceptions import RedisError  # start-up: redis costs ~0.4 s, only a redis store needs it

    # Any: redis-py's sync stubs type every reply as a union of what any command could return
    client: Any = Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True)
    found: dict[str, BudgetUse] = {}
    head = f"{prefix}{{{KINDS[unit]}:"
    pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in head) + "*}"
    try:
        seconds, micros = client.time()
        now = seconds + micros / 1_000_000
        for base in client.scan_iter(match=pattern, count=500):
            per, window, used = client.hmget(base, "per", "window", "used")
            try:
                per_s, window_s, used_n = float(per), float(window), int(used or 0)
            except (TypeError, ValueError):
                continue
            live = client.zrangebyscore(base + ":res", f"({now}", "+inf")
            reserved = sum(int(t) for t in client.hmget(base + ":tok", live) if t) if live else 0
            ended = window_s + per_s <= now
            found[base[len(head) : -1]] = {
                "used": 0 if ended else used_n,
                "reserved": reserved,
                "per": per_s,
                "resets_at": None if ended else window_s + per_s,
            }
    except (RedisError, OSError) as exc:
        log.warning("could not read the shared budgets", store=shown_url(url), error=f"{type(exc).__name__}: {exc}")
        return {}
    finally:
        client.close()
    return found

"""Mutated MCP messages for the relay fuzz tests (and the hostile fuzz server fixture).

Seeds are valid messages of every kind the relay routes differently; mutations work on bytes
(flips, cuts, splices, inserted garbage) and on structure (a node replaced by a hostile value:
odd ids, deep nesting, lone surrogates, huge numbers, wrong types). Deterministic for a seed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any, cast

PROGRESS = {"progressToken": "p1"}
SAMPLING_PARAMS = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}],
    "maxTokens": 20,
    "systemPrompt": "be brief",
    "modelPreferences": {"hints": [{"name": "gpt"}]},
}
META_2026 = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz-host", "version": "1"},
}

HOST_SEEDS: list[Any] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}, "elicitation": {}},
            "clientInfo": {"name": "fuzz-host", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": PROGRESS},
    },
    {
        "jsonrpc": "2.0",
        "id": "r3",
        "method": "tools/call",
        "params": {"name": "t", "arguments": {}, "_meta": META_2026},
    },
    {"jsonrpc": "2.0", "id": 4, "method": "ping"},
    {"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {"_meta": META_2026}},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "fuzz"}},
    {
        "jsonrpc": "2.0",
        "id": "s1",
        "result": {
            "role": "assistant",
            "content": {"type": "text", "text": "hi"},
            "model": "m",
            "stopReason": "endTurn",
        },
    },
    {"jsonrpc": "2.0", "id": "e1", "result": {"action": "accept", "content": {"name": "x"}}},
    {"jsonrpc": "2.0", "id": 9, "error": {"code": -32601, "message": "nope"}},
    {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "tools/call",
        "params": {"name": "t", "arguments": {}, "inputResponses": {"a": {"result": {}}}, "requestState": "st"},
    },
    [{"jsonrpc": "2.0", "id": 11, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/initialized"}],
]

UPSTREAM_SEEDS: list[Any] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fuzz-server", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "ok"}], "isError": False}},
    {"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": SAMPLING_PARAMS},
    {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "sampling/createMessage",
        "params": {
            **SAMPLING_PARAMS,
            "tools": [{"name": "f", "inputSchema": {"type": "object"}}],
            "toolChoice": {"mode": "auto"},
        },
    },
    {
        "jsonrpc": "2.0",
        "id": "e1",
        "method": "elicitation/create",
        "params": {
            "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    },
    {
        "jsonrpc": "2.0",
        "id": "e2",
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "Sign in", "url": "https://example.com/x", "elicitationId": "u1"},
    },
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p1", "progress": 1}},
    {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "log"}},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "s1"}},
    {"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": "u1"}},
    {
        "jsonrpc": "2.0",
        "id": "r3",
        "result": {
            "resultType": "input_required",
            "requestState": "st",
            "inputRequests": {
                "a": {"method": "sampling/createMessage", "params": SAMPLING_PARAMS},
                "b": {"method": "roots/list", "params": {}},
            },
        },
    },
    {"jsonrpc": "2.0", "id": 12, "method": "ping"},
    {"jsonrpc": "2.0", "id": 4, "error": {"code": -32603, "message": "boom"}},
]

HOSTILE_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    2**63,
    2**80,
    -(2**70),
    1e308,
    "",
    "\ud800",
    "\udfff",
    "\u202e\u200b",
    "\x1b[2J",
    [],
    {},
    [[[]]],
    {"a": {"b": {}}},
    "x" * 300,
    "sampling/createMessage",
    "elicitation/create",
    "mcp-sampling-proxy:00000000:1",
]
GARBAGE = [b"\xff", b"\xc0\xaf", b"\\ud800", b"NaN", b"Infinity", b"\x00", b"\n", b'"', b"{", b"]", b"\\", b"\x1b"]


DEEP = "__deep__"
DEPTHS = (100, 1023, 1100, 5000)  # on both sides of the 1024 levels orjson reads, and far past them

# where a value sits in a message: the keys and list indexes from the top
NodePath = tuple[str | int, ...]


def _nodes(value: Any, path: NodePath = ()) -> list[NodePath]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _nodes(item, (*path, index))
    return found


def _replace(value: Any, path: NodePath, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    copy = list(value)
    index = cast(int, head)  # below a list, a path holds indexes
    copy[index] = _replace(copy[index], rest, new)
    return copy


def encode(value: Any) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")


# a seed's encoding and its nodes, by its id (the seeds live as long as the module): the fuzz test mutates
# seeds 200,000 times, and walking and encoding the same seed each time was a third of its time
_SEEN: dict[int, tuple[Any, bytes, list[NodePath]]] = {}


def _seed_facts(seed: Any) -> tuple[bytes, list[NodePath]]:
    found = _SEEN.get(id(seed))
    if found is None or found[0] is not seed:
        found = _SEEN[id(seed)] = (seed, encode(seed), _nodes(seed))
    return found[1], found[2]


def _nested(seed: Any, path: NodePath, depth: int) -> bytes:
    """`seed` with the node at `path` replaced by `depth` nested empty lists (no encoder writes them)."""
    return encode(_replace(seed, path, DEEP)).replace(b'"__deep__"', b"[" * depth + b"]" * depth)


def every_replacement(seeds: list[Any]) -> Iterator[bytes]:
    """Each node of each seed replaced by each hostile value, and nested past every depth limit, once: the
    structural mutations in full, which a random run of any length only samples."""
    for seed in seeds:
        for path in _seed_facts(seed)[1]:
            for value in HOSTILE_VALUES:
                yield encode(_replace(seed, path, value))
            for depth in DEPTHS:
                yield _nested(seed, path, depth)


def mutate(rng: random.Random, seeds: list[Any]) -> bytes:
    """One hostile line (no newline inside: a line is what the relay receives)."""
    seed = rng.choice(seeds)
    encoded, paths = _seed_facts(seed)
    kind = rng.randrange(10)
    if kind < 4:  # structural: a node gets a hostile value, or a key is dropped or added
        path = rng.choice(paths)
        roll = rng.random()
        if roll < 0.1:  # nesting deeper than any encoder would write
            return _nested(seed, path, rng.choice(DEPTHS))
        elif roll < 0.2 and isinstance(seed, dict):
            key = rng.choice(["id", "method", "params", "result", "error", "jsonrpc", "requestState"])
            return encode({**seed, key: rng.choice(HOSTILE_VALUES)})
        return encode(_replace(seed, path, rng.choice(HOSTILE_VALUES)))
    raw = bytearray(encoded)
    if kind == 4:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif kind == 5:  # cut
        raw = raw[: rng.randrange(len(raw))]
    elif kind == 6:  # insert garbage
        at = rng.randrange(len(raw) + 1)
        raw[at:at] = rng.choice(GARBAGE)
    elif kind == 7:  # splice two messages
        other = _seed_facts(rng.choice(seeds))[0]
        raw = raw[: rng.randrange(len(raw) + 1)] + other[rng.randrange(len(other) + 1) :]
    elif kind == 8:  # duplicate a key with another value
        if isinstance(seed, dict) and seed:
            key = rng.choice(list(seed))
            extra = b',"' + key.encode() + b'":' + encode(rng.choice(HOSTILE_VALUES)) + b"}"
            raw = bytearray(encoded[:-1] + extra)
    else:  # valid as it is: keeps the relay in realistic states
        pass
    return bytes(raw).replace(b"\n", b" ")

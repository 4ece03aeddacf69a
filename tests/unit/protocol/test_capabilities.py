"""What the upstream is told the client can do (protocol/capabilities.py `augment`): the host's capabilities
plus what the proxy serves, without the host's task capability for what the proxy answers itself; the host's
own capabilities and the proxy's offer never changed by it, nor through the levels of its result it made."""

from __future__ import annotations

import copy
from typing import Any

from mcp_sampling_proxy.protocol.capabilities import augment, offered_elicitation, offered_sampling, offers

SDK_CLIENT = {
    "sampling": {"tools": {}},
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
    "tasks": {"requests": {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}}, "list": {}},
}
OFFERED = offers(offered_sampling(route="auto", tools=True), offered_elicitation(route="auto", url_mode=False))


def test_what_the_proxy_serves_is_added_and_the_tasks_it_cannot_honour_removed() -> None:
    merged = augment({"roots": {}, "tasks": copy.deepcopy(SDK_CLIENT["tasks"])}, OFFERED, {})
    assert merged["sampling"] == {"tools": {}} and merged["elicitation"] == {"form": {}}
    assert merged["tasks"] == {"requests": {}, "list": {}}  # the proxy answers both itself: no task for either
    assert merged["roots"] == {}


def test_an_empty_elicitation_capability_is_form_mode_and_a_host_that_samples_keeps_its_task() -> None:
    tasks: dict[str, Any] = {"requests": {"sampling": {"createMessage": {}}}}
    host: dict[str, Any] = {"sampling": {}, "elicitation": {}, "tasks": tasks}
    merged = augment(host, OFFERED, {})
    assert merged["elicitation"] == {"form": {}}
    assert merged["sampling"] == {"tools": {}}
    assert merged["tasks"]["requests"] == {"sampling": {"createMessage": {}}}  # routed to the host: its task stays


def test_neither_the_hosts_capabilities_nor_the_offer_change_with_the_result() -> None:
    host: dict[str, Any] = copy.deepcopy(SDK_CLIENT)
    offered = copy.deepcopy(OFFERED)
    merged = augment(host, offered, {"sampling": "proxy", "elicitation": "proxy"})
    assert "sampling" not in merged["tasks"]["requests"] and "elicitation" not in merged["tasks"]["requests"]
    assert host == SDK_CLIENT and offered == OFFERED  # the host's tasks kept whole
    for name in ("sampling", "elicitation", "tasks"):  # the levels it made are its own
        merged[name]["added-later"] = True
    merged["tasks"]["requests"]["added-later"] = {}
    assert host == SDK_CLIENT and offered == OFFERED


def test_nothing_offered_leaves_the_capabilities_as_they_are() -> None:
    host = copy.deepcopy(SDK_CLIENT)
    assert augment(host, {}, {}) is host


def test_what_the_offer_adds_is_the_results_own() -> None:
    offered = copy.deepcopy(OFFERED)
    merged = augment({}, offered, {})
    merged["sampling"]["tools"]["added-later"] = True
    merged["elicitation"]["form"]["added-later"] = True
    assert offered == OFFERED and augment({}, offered, {})["sampling"] == {"tools": {}}

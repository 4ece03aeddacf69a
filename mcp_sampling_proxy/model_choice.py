"""Pick the provider and model for a sampling request from its model preferences.

Order: each hint in the server's order, matched first as a case-insensitive substring of a
configured model name and then through the policy's alias map (the spec ranks hints by
preference, so an alias for the first hint beats a substring hit for the second); then, when
priorities are given, the best score over the per-model ratings; else the default model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_sampling_proxy.llm.base import ModelSpec, ProviderConfig

_PRIORITIES = (("costPriority", "cost"), ("speedPriority", "speed"), ("intelligencePriority", "intelligence"))


@dataclass(frozen=True)
class Choice:
    provider: str
    model: str
    reason: str


def choose_model(
    providers: Sequence[ProviderConfig],
    preferences: Mapping[str, Any] | None,
    *,
    aliases: Mapping[str, str] | None = None,
    default_provider: str | None = None,
) -> Choice:
    """Resolve preferences against the configured models; providers must not be empty."""
    candidates = [(p.name, m) for p in providers for m in p.models]
    preferences = preferences or {}
    aliases = aliases or {}
    for hint in preferences.get("hints") or []:
        name = (hint or {}).get("name") if isinstance(hint, Mapping) else None
        if not name:
            continue
        wanted = name.lower()
        for provider, model in candidates:
            if wanted in model.name.lower():
                return Choice(provider, model.name, f"hint '{name}' matches model '{model.name}'")
        target = aliases.get(wanted)
        if target:
            for provider, model in candidates:
                if model.name == target:
                    return Choice(provider, model.name, f"hint '{name}' is an alias for '{target}'")
    weights = {
        attr: float(preferences[key])
        for key, attr in _PRIORITIES
        if isinstance(preferences.get(key), int | float) and preferences[key] > 0
    }
    # Scoring applies once any model is rated on a weighted axis; then every model competes, with
    # its unrated axes neutral, so a model rated low never beats an unrated one on that axis.
    rated = any(getattr(m, attr) is not None for _, m in candidates for attr in weights)
    if weights and rated:
        provider, model = max(candidates, key=lambda pm: _score(pm[1], weights))  # ties: configured order
        shown = ", ".join(f"{attr}={w:g}" for attr, w in weights.items())
        return Choice(provider, model.name, f"best score {_score(model, weights):.2f} for priorities {shown}")
    provider_config = next((p for p in providers if p.name == default_provider), providers[0])
    hint_note = " (no hint matched)" if preferences.get("hints") else ""
    return Choice(
        provider_config.name,
        provider_config.models[0].name,
        f"default model of provider '{provider_config.name}'{hint_note}",
    )


def _score(model: ModelSpec, weights: Mapping[str, float]) -> float:
    """Weighted sum of ratings; an unrated axis counts as neutral (0.5)."""
    return sum(w * (getattr(model, attr) if getattr(model, attr) is not None else 0.5) for attr, w in weights.items())

"""Pick the provider and model for a sampling request from its model preferences.

Order: each hint in the server's order (the spec ranks hints by preference, so any match for
the first hint beats every match for the second). Within one hint the match grades are, best
first: exact name, the policy's alias for the hint, name prefix, substring (all case-insensitive;
a model name written `vendor/model`, as on OpenRouter, also matches on its part after the last
`/`). The spec says hints are substrings, so a substring hit still counts; a better grade just
wins over it. Among the models of the best grade, the request's priorities
(costPriority/speedPriority/intelligencePriority) over the policy's ratings break the tie, then
the configured order. Without a matching hint: the best priority score when any model is rated
on a weighted axis, else the default model. The reason names each step, for the log and
`policy explain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msgspec import Struct

from mcp_sampling_proxy.config.providers import ModelSpec, ProviderConfig
from mcp_sampling_proxy.protocol.sampling_request import ModelPreferences

# (the request's field, the policy's rating axis)
_PRIORITIES = (("cost_priority", "cost"), ("speed_priority", "speed"), ("intelligence_priority", "intelligence"))
# match grades within one hint, best first (index = rank)
_GRADES = ("exactly", "as an alias", "by prefix", "as a substring")

Candidate = tuple[str, ModelSpec]


class Choice(Struct, frozen=True):
    provider: str
    model: str
    reason: str


def choose_model(
    providers: Sequence[ProviderConfig],
    preferences: ModelPreferences | None,
    *,
    aliases: Mapping[str, str] | None = None,
    default_provider: str | None = None,
) -> Choice:
    """Resolve preferences against the configured models; providers must not be empty."""
    candidates = [(p.name, m) for p in providers for m in p.models]
    aliases = aliases or {}
    weights = _weights(preferences)
    steps: list[str] = []
    for hint in (preferences.hints if preferences else None) or []:
        name = hint.name
        if not name:
            continue
        graded = [(g, c) for c in candidates if (g := _grade(name, c[1].name, aliases)) is not None]
        if not graded:
            steps.append(f"hint '{name}' matched no model")
            continue
        best = min(g for g, _ in graded)
        tied = [c for g, c in graded if g == best]
        provider, model = _best(tied, weights)
        if best == 1:
            step = f"hint '{name}' is an alias for '{provider}/{model.name}'"
        else:
            step = f"hint '{name}' matched {_GRADES[best]} '{provider}/{model.name}'"
        if len(tied) > 1:
            step += f"; {len(tied)} models matched {_GRADES[best]}, {_tie_break(tied, weights)}"
        return Choice(provider, model.name, "; ".join([*steps, step]))
    # Scoring applies once any model is rated on a weighted axis; then every model competes, with
    # its unrated axes neutral, so a model rated low never beats an unrated one on that axis.
    rated = any(getattr(m, attr) is not None for _, m in candidates for attr in weights)
    if weights and rated:
        provider, model = _best(candidates, weights)
        steps.append(f"best score {_score(model, weights):.2f} for priorities {_shown(weights)}")
        return Choice(provider, model.name, "; ".join(steps))
    provider_config = next((p for p in providers if p.name == default_provider), providers[0])
    steps.append(f"default model of provider '{provider_config.name}'")
    return Choice(provider_config.name, provider_config.models[0].name, "; ".join(steps))


def _grade(hint: str, model: str, aliases: Mapping[str, str]) -> int | None:
    """The rank of `model` as a match for `hint` (see _GRADES), or None when it does not match."""
    wanted = hint.lower()
    full = model.lower()
    short = full.rsplit("/", 1)[-1]
    if wanted in (full, short):
        return 0
    if aliases.get(wanted) == model:
        return 1
    if full.startswith(wanted) or short.startswith(wanted):
        return 2
    if wanted in full:
        return 3
    return None


def _weights(preferences: ModelPreferences | None) -> dict[str, float]:
    """The request's priorities above zero, by rating axis (validation checked they are numbers)."""
    if preferences is None:
        return {}
    return {
        attr: float(value)
        for field, attr in _PRIORITIES
        if (value := getattr(preferences, field)) is not None and value > 0
    }


def _best(candidates: Sequence[Candidate], weights: Mapping[str, float]) -> Candidate:
    """The highest score; max() keeps the first of equals, so ties go to the configured order."""
    if not weights:
        return candidates[0]
    return max(candidates, key=lambda pm: _score(pm[1], weights))


def _tie_break(tied: Sequence[Candidate], weights: Mapping[str, float]) -> str:
    scores = [_score(m, weights) for _, m in tied] if weights else []
    if not weights or len(set(scores)) == 1:
        why = "no priorities given" if not weights else f"equal scores for priorities {_shown(weights)}"
        return f"first in the configured order ({why})"
    return f"best score {max(scores):.2f} for priorities {_shown(weights)}"


def _shown(weights: Mapping[str, float]) -> str:
    return ", ".join(f"{attr}={w:g}" for attr, w in weights.items())


def _score(model: ModelSpec, weights: Mapping[str, float]) -> float:
    """Weighted sum of ratings; an unrated axis counts as neutral (0.5)."""
    return sum(w * (getattr(model, attr) if getattr(model, attr) is not None else 0.5) for attr, w in weights.items())

"""A collection keeps the choices its documents were indexed with: an upgrade that changes a default (the encoder,
the chunking) applies it to new collections, never to one that already has documents, which would otherwise
refuse every search until someone reindexed it. Its owner changes the choice by setting it and reindexing."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from citerag.chunk import strategy_params
from citerag.settings import Settings
from citerag.store.base import Store

# The chunking parameters a stamp's strategy_params records (citerag.chunk.strategy_params), by setting.
_PARAMS = {"target": "target", "overlap": "overlap", "semantic_percentile": "percentile"}


@dataclass(frozen=True)
class Kept:
    """The settings a collection is opened with, and the defaults it does not follow (setting → newer default)."""

    settings: Settings
    newer_defaults: dict[str, Any] = field(default_factory=dict)


def _most_common(values: list[Any]) -> Any:
    """The most common value (dicts compared by content), or None when there is none."""
    counts = Counter(json.dumps(v, sort_keys=True) for v in values if v is not None)
    return json.loads(counts.most_common(1)[0][0]) if counts else None


def keep_indexed_choices(settings: Settings, store: Store) -> Kept:
    """`settings` with each stamped choice that nobody set explicitly (file, environment, flag) taken from the
    collection's indexed documents (the most common stamp), where it differs from the default."""
    explicit = settings.model_fields_set
    if {"embedding_model", "strategy", *_PARAMS} <= explicit:
        return Kept(settings)
    stamps = [d.stamps for d in store.documents() if d.status == "indexed" and d.stamps]
    if not stamps:
        return Kept(settings)
    changes: dict[str, Any] = {}
    for name in ("embedding_model", "strategy"):
        value = _most_common([s.get(name) for s in stamps])
        if name not in explicit and value is not None and value != getattr(settings, name):
            changes[name] = value
    # A parameter counts where the stamp records another value than these settings would (so overlap, stamped 0
    # under a strategy without overlap, is no choice of the collection's).
    params = _most_common([s.get("strategy_params") for s in stamps])
    now = strategy_params(changes.get("strategy", settings.strategy), settings.target, settings.overlap,
                          settings.semantic_percentile)
    if isinstance(params, dict):
        for name, key in _PARAMS.items():
            if name not in explicit and key in params and key in now and params[key] != now[key]:
                changes[name] = params[key]
    if not changes:
        return Kept(settings)
    return Kept(settings.with_changes(**changes), {name: getattr(settings, name) for name in changes})

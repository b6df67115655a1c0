"""A collection keeps the choices its documents were indexed with: an upgrade that changes a default (the encoder,
the chunking) applies it to new collections, never to one that already has documents, which would otherwise
refuse every search until someone reindexed it. Its owner changes the choice by setting it and reindexing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from citerag.chunk import strategy_params
from citerag.settings import Settings
from citerag.store.base import Store

# Settings stamped on every indexed document (citerag.ingest.Indexer.stamps_for), with where the stamp keeps them.
_STAMPED = {"embedding_model": ("embedding_model", None), "strategy": ("strategy", None),
            "target": ("strategy_params", "target"), "overlap": ("strategy_params", "overlap"),
            "semantic_percentile": ("strategy_params", "percentile")}


@dataclass(frozen=True)
class Kept:
    """The settings a collection is opened with, and the defaults it does not follow (setting → newer default)."""

    settings: Settings
    newer_defaults: dict[str, Any] = field(default_factory=dict)


def _stamped(stamps: dict[str, Any], setting: str) -> Any:
    key, inner = _STAMPED[setting]
    value = stamps.get(key)
    return value.get(inner) if inner is not None and isinstance(value, dict) else value


def keep_indexed_choices(settings: Settings, store: Store) -> Kept:
    """`settings` with each stamped choice that nobody set explicitly (file, environment, flag) taken from the
    collection's indexed documents (the most common stamp), when those differ from the default."""
    unset = [s for s in _STAMPED if s not in settings.model_fields_set]
    if not unset:
        return Kept(settings)
    stamps = [d.stamps for d in store.documents() if d.status == "indexed" and d.stamps]
    if not stamps:
        return Kept(settings)
    changes: dict[str, Any] = {}
    for setting in unset:
        values = Counter(v for v in (_stamped(s, setting) for s in stamps) if v is not None)
        if values:
            value = values.most_common(1)[0][0]
            if value != getattr(settings, setting):
                changes[setting] = value
    # A parameter the stamped strategy does not use (overlap under E is stamped 0) is no choice of the collection.
    strategy = changes.get("strategy", settings.strategy)
    params = ("target", "overlap", "semantic_percentile")
    now = [getattr(settings, n) for n in params]
    for i, setting in enumerate(params):
        if setting in changes:
            other = [changes[setting] if j == i else v for j, v in enumerate(now)]
            if strategy_params(strategy, *now) == strategy_params(strategy, *other):
                changes.pop(setting)
    if not changes:
        return Kept(settings)
    newer = {name: getattr(settings, name) for name in changes}
    return Kept(settings.with_changes(**changes), newer)

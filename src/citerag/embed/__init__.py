"""Embedding: an Encoder protocol, one module per backend; `load_encoder` picks one and caches it."""

from __future__ import annotations

from functools import lru_cache

from citerag.embed.base import Encoder, check_unit


@lru_cache(maxsize=4)
def load_encoder(name: str) -> Encoder:
    from citerag.embed.sentence_transformer import SentenceTransformerEncoder

    return SentenceTransformerEncoder(name)


__all__ = ["Encoder", "check_unit", "load_encoder"]

"""Embedding: an Encoder protocol, one module per backend; `load_encoder` picks one and caches it."""

from __future__ import annotations

import logging
from functools import lru_cache

from citerag.embed import onnx_minilm
from citerag.embed.base import Encoder, check_unit, encode_queries
from citerag.errors import CiteragError

log = logging.getLogger("citerag")


@lru_cache(maxsize=8)
def load_encoder(name: str, threads: int = 0) -> Encoder:
    """A packaged model by name (all-MiniLM-L6-v2, use-multilingual-v3, multilingual-e5-small), a fusion of them
    (minilm+use, the default; minilm+e5+use: citerag.embed.fused) or a local
    sentence-transformers folder. An encoder may also have `encode_queries(texts)` for models that embed
    questions differently from passages (E5's prefixes); the retriever uses it when present.

    `threads` (Settings.encoder_threads; 0 = every core): the cores one encode call may keep busy. MiniLM runs that
    many batches at once; USE runs on one thread, beside MiniLM in a fused encoder (the fusion's parts run at once
    when threads > 1). Vectors do not depend on it."""
    from citerag.embed import e5_small, fused, use_multilingual

    if (parts := fused.part_names(name)) is not None:
        return fused.FusedEncoder(name, [load_encoder(p, threads) for p in parts],
                                  parallel=onnx_minilm.resolve_threads(threads) > 1)
    if name in use_multilingual.ALIASES:
        return use_multilingual.UseMultilingualEncoder(use_multilingual.NAME)
    if name in e5_small.ALIASES:
        return e5_small.E5SmallEncoder(e5_small.NAME)
    if name == onnx_minilm.NAME:
        # The packaged MiniLM runs on ONNX Runtime: the same vectors (cosine >= 0.9999999, tested) without a
        # torch import per process. Where the one-off export cannot be made or loaded, torch serves instead.
        try:
            return onnx_minilm.OnnxMiniLMEncoder(threads=threads)
        except (CiteragError, OSError, ImportError, RuntimeError) as exc:
            log.warning("ONNX encoder unavailable (%s); using sentence-transformers", exc)
    from citerag.embed.sentence_transformer import SentenceTransformerEncoder

    return SentenceTransformerEncoder(name)


__all__ = ["Encoder", "check_unit", "encode_queries", "load_encoder"]

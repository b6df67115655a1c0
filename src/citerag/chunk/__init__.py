"""Chunking: one module per cutting rule; strategies.py composes them into A-G."""

from citerag.chunk.strategies import STRATEGIES, chunk_extracted, header_for, strategy_params

__all__ = ["STRATEGIES", "chunk_extracted", "header_for", "strategy_params"]

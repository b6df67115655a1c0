"""Generators behind one interface; the extractive default needs no language model."""

from citerag.answer.generators.base import Generator
from citerag.answer.generators.extractive import ExtractiveGenerator

__all__ = ["ExtractiveGenerator", "Generator"]

"""Search: dense, BM25, fusion, the gate, and a retriever that composes them."""

from citerag.search.bm25 import BM25, tokenize
from citerag.search.fuse import rrf
from citerag.search.gate import gate
from citerag.search.retriever import Retriever

__all__ = ["BM25", "Retriever", "gate", "rrf", "tokenize"]

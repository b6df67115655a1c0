"""Request bodies, validated by FastAPI: a bad field is a 422 that names it (see errors.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

COLLECTION_NAME = r"^[A-Za-z0-9._-]{1,64}$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is an error, not silently ignored


class CollectionSettings(_Body):
    threshold: float | None = Field(default=None, gt=0, le=2)
    refusal: Literal["calibrated", "threshold"] | None = None
    max_sources: int | None = Field(default=None, ge=1, le=20)
    mode: Literal["dense", "bm25", "hybrid", "adaptive"] | None = None
    k: int | None = Field(default=None, ge=1, le=1000)
    rrf_k: int | None = Field(default=None, ge=1, le=10000)
    strategy: Literal["A", "B", "C", "D", "E", "F", "G"] | None = None
    target: int | None = Field(default=None, ge=16, le=100000)
    overlap: int | None = Field(default=None, ge=0, le=100000)
    semantic_percentile: float | None = Field(default=None, gt=0, le=100)
    vector_index: Literal["exact", "hnsw"] | None = None


class CreateCollection(_Body):
    name: str = Field(pattern=COLLECTION_NAME)
    settings: CollectionSettings = Field(default_factory=CollectionSettings)


class SearchRequest(_Body):
    query: str = Field(min_length=1, max_length=4000)
    mode: Literal["dense", "bm25", "hybrid", "adaptive"] | None = None
    k: int | None = Field(default=None, ge=1, le=100)


class AskRequest(_Body):
    question: str = Field(min_length=1, max_length=4000)
    mode: Literal["dense", "bm25", "hybrid", "adaptive"] | None = None
    k: int | None = Field(default=None, ge=1, le=100)
    threshold: float | None = Field(default=None, gt=0, le=2)
    max_sources: int | None = Field(default=None, ge=1, le=20)
    stream: bool = Field(default=False, description="Answer as server-sent events: retrieval, citation, delta, "
                                                    "final or refusal, error, done.")


class SessionRequest(_Body):
    key: str = Field(min_length=1, max_length=200)

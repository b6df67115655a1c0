"""Cache keys: each names everything its value depends on, so an entry written before a change is never found
after it (the store generation is in every retrieval and answer key) and nothing needs invalidating."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# What a generator is built from: two collections that agree on these share one (a local LLM loads once).
GENERATOR_SETTINGS = {"generator", "embedding_model", "llm_model_path", "llm_context", "llm_max_tokens",
                      "llm_temperature", "openai_base_url", "openai_model", "openai_api_key_env", "openai_stream",
                      "generator_timeout", "generator_retries"}
# What a retrieval's result depends on besides the store's generation; an answer also on the gate and the generator.
RETRIEVAL_SETTINGS = {"mode", "lexical_weight", "k", "rrf_k", "rerank_model", "rerank_shortlist", "embedding_model",
                      "vector_index", "lexical"}
ANSWER_SETTINGS = {"threshold", "lexical_threshold", "max_sources", "refusal"} | GENERATOR_SETTINGS


def cache_key(level: str, parts: dict[str, Any]) -> str:
    """A key naming everything the cached value depends on, hashed (a question never appears in Redis' keys)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"citerag:v1:{level}:{digest}"

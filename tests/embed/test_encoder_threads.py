"""encoder_threads: how many cores one process's embedding keeps busy. MiniLM's batches at once, the fused encoder's
parts side by side, USE on one BLAS thread; the vectors are the same whatever the count, on real dev-set text."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from citerag.app.home import Citerag
from citerag.chunk import chunk_extracted
from citerag.embed import load_encoder
from citerag.embed.fused import FusedEncoder
from citerag.embed.onnx_minilm import OnnxMiniLMEncoder, all_cores, resolve_threads
from citerag.embed.use_multilingual import UseMultilingualEncoder
from citerag.extract.html import HtmlExtractor
from citerag.settings import Settings
from corpus_paths import DEV_CORPUS


@pytest.fixture(scope="module")
def chapter_chunks() -> list[str]:
    """Every strategy-E chunk of one dev-set chapter as ingest makes them (short and long, some over the window)."""
    path = DEV_CORPUS / "ch03.en.html"
    texts = [c.text for c in chunk_extracted(HtmlExtractor().extract(path.read_bytes(), path), "E")]
    assert len(texts) >= 40
    return texts


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def test_zero_means_every_core_the_process_may_use() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert all_cores() == cores
    assert resolve_threads(0) == resolve_threads(None) == cores
    assert resolve_threads(3) == 3


def test_minilm_vectors_do_not_depend_on_threads(chapter_chunks: list[str]) -> None:
    one = OnnxMiniLMEncoder(threads=1)
    three = OnnxMiniLMEncoder(threads=3)
    assert (one.threads, three.threads) == (1, 3)
    a, b = one.encode(chapter_chunks), three.encode(chapter_chunks)
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (len(chapter_chunks), 384)
    assert cosines(a, b).min() >= 0.9999999
    # One text alone (a question) runs in the calling thread; the same vector as in the batch.
    assert cosines(three.encode(chapter_chunks[5:6]), a[5:6]).min() >= 0.9999999


def test_use_runs_on_one_blas_thread_whatever_the_setting() -> None:
    for threads in (0, 1, 4):
        fused = load_encoder("minilm+use", threads)
        assert isinstance(fused, FusedEncoder)
        use = fused.parts[1]
        assert isinstance(use, UseMultilingualEncoder)
        assert use._model.threads == 1 and use._model._backend.threads == 1
    assert UseMultilingualEncoder()._model.threads == 1


def test_fused_parts_run_side_by_side_with_the_same_vectors(chapter_chunks: list[str]) -> None:
    serial, parallel = load_encoder("minilm+use", 1), load_encoder("minilm+use", 2)
    assert isinstance(serial, FusedEncoder) and isinstance(parallel, FusedEncoder)
    assert (serial.parallel, parallel.parallel) == (False, True)
    a, b = serial.encode(chapter_chunks), parallel.encode(chapter_chunks)
    assert a.shape == b.shape == (len(chapter_chunks), 896)
    assert cosines(a, b).min() >= 0.9999999
    questions = ["How do I pin a package version with apt?", "Wie ändere ich das Passwort eines Benutzers?"]
    assert cosines(serial.encode_queries(questions), parallel.encode_queries(questions)).min() >= 0.9999999
    assert parallel.encode([]).shape == (0, 896)


def test_a_process_takes_the_setting_of_its_first_collection(tmp_path: Path) -> None:
    app = Citerag.open(Settings(index_dir=tmp_path / "a", encoder_threads=1), create=True)
    try:
        assert app.encoder_threads == 1
        app.open_collection(Settings(index_dir=tmp_path / "b", collection="b", encoder_threads=3), create=True)
        assert app.encoder_threads == 1  # one process, one setting
        encoder = app.encoder("minilm+use")
        assert encoder is load_encoder("minilm+use", 1)
        assert isinstance(encoder, FusedEncoder) and isinstance(encoder.parts[0], OnnxMiniLMEncoder)
        assert encoder.parts[0].threads == 1 and not encoder.parallel
    finally:
        app.close()

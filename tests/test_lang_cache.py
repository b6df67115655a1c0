"""citerag.lang's cache of py3langid's model: the same labels and probabilities as the package's own loader on
real text, a damaged file rebuilt, and a cache that cannot be written costing nothing but time."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from py3langid.langid import LanguageIdentifier
from tests.corpus_paths import ROOT

from citerag import lang

# Written for these tests: the corpora hold no French or Polish prose.
FRENCH = ["Pourquoi mon service ne démarre-t-il plus après la mise à jour du système ?",
          "Le gestionnaire de paquets télécharge les archives depuis les miroirs configurés dans sources.list."]
POLISH = ["Dlaczego moja usługa nie uruchamia się po aktualizacji systemu?",
          "Menedżer pakietów pobiera archiwa z serwerów lustrzanych wskazanych w pliku sources.list."]
SHORT = ["", " ", "a", "ls -l", "apt-get", "Über", "12345 67890", "ÉCRIT EN MAJUSCULES SEULEMENT", "\ud800 lone"]


def _real_texts() -> list[str]:
    """Slices of the English, German and XQuAD corpora (markup stripped): short, paragraph and document length."""
    files = [*sorted((ROOT / "eval" / "debian-reference" / "corpus").glob("ch0*.html"))[:3],
             *sorted((ROOT / "eval" / "debian-reference-de" / "corpus").glob("ch0*.html"))[:3],
             *sorted((ROOT / "eval" / "xquad-en" / "corpus").glob("*.txt"))[:3],
             *sorted((ROOT / "eval" / "xquad-de" / "corpus").glob("*.txt"))[:3]]
    texts = []
    for path in files:
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))
        for start in range(0, min(len(text), 60_000), 6_000):
            texts += [text[start:start + 40], text[start:start + 400], text[start:start + 20_000]]
    assert len(texts) > 100
    return texts


@pytest.fixture(scope="module")
def package() -> LanguageIdentifier:
    return lang._package_identifier()


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A fresh cache folder, and a process that has loaded no identifier yet."""
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(lang, "_loaded", [])
    yield lang.cache_path()


def _same(a: LanguageIdentifier, b: LanguageIdentifier, texts: list[str] | list[str | bytes]) -> None:
    for text in texts:
        assert a.rank(text) == b.rank(text), text[:60]
        assert a.classify(text) == b.classify(text), text[:60]


def test_mapped_model_gives_the_packages_labels_and_probabilities(cache: Path, package: LanguageIdentifier) -> None:
    texts: list[str | bytes] = [*_real_texts(), *FRENCH, *POLISH, *SHORT, b"bytes, not str", b"\xff\xfe broken utf-8"]
    identifier, mapped = lang._load()
    assert not mapped and cache.is_file()  # the first process decompresses and writes the file
    identifier, mapped = lang._load()
    assert mapped and isinstance(identifier.nb_ptc, np.ndarray) and not identifier.nb_ptc.flags.writeable
    _same(identifier, package, texts)
    labels = {identifier.classify(t)[0] for t in texts}
    assert {"en", "de"} <= labels
    assert [package.classify(t)[0] for t in FRENCH + POLISH] == ["fr", "fr", "pl", "pl"]


def test_detect_reads_the_cache_file(cache: Path) -> None:
    assert lang.detect("Wie richte ich einen Drucker unter Debian ein?") == "de"
    assert cache.is_file() and lang._loaded[0][1] is False
    lang._loaded.clear()  # a later process
    assert lang.detect("Wie richte ich einen Drucker unter Debian ein?") == "de"
    assert lang.detect(FRENCH[0]) == "fr" and lang.detect("ls -l") == "en" and lang.detect("") == "en"
    assert lang._loaded[0][1] is True


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble_header(path: Path) -> None:
    with path.open("r+b") as f:
        f.write(b"\x00" * 64)


def _row_out_of_range(path: Path) -> None:
    """A DFA row table pointing past the transition table: the load-time checks catch it."""
    records = lang._read_cache(path)
    row = np.array(records["row"])
    row[7] = np.iinfo(row.dtype).max
    _rewrite(path, records, row=row)


def _rewrite(path: Path, records: dict[str, np.ndarray], **changed: np.ndarray) -> None:
    arrays = [changed.get(name, np.array(records[name])) for name in lang._RECORDS]
    tmp = path.with_suffix(".new")
    with tmp.open("wb") as f:
        for array in arrays:
            np.save(f, array)
    tmp.replace(path)


@pytest.mark.parametrize("damage", [_truncate, _garble_header, _row_out_of_range,
                                    lambda p: p.write_bytes(b""), lambda p: p.write_bytes(b"junk" * 100)])
def test_a_damaged_cache_file_is_rebuilt(cache: Path, package: LanguageIdentifier, damage: Callable[[Path], object],
                                         caplog: pytest.LogCaptureFixture) -> None:
    lang._load()
    size = cache.stat().st_size
    damage(cache)
    identifier, mapped = lang._load()
    assert not mapped and "rebuilding" in caplog.text
    assert cache.stat().st_size == size
    identifier, mapped = lang._load()
    assert mapped
    _same(identifier, package, [*FRENCH, *POLISH])


def test_a_damaged_transition_table_falls_back_and_drops_the_file(cache: Path, package: LanguageIdentifier) -> None:
    """The transition table is not read whole on open: a state out of range shows when a text walks into it."""
    lang._load()
    records = lang._read_cache(cache)
    nextmove = np.array(records["nextmove"])
    nextmove[:] = np.iinfo(nextmove.dtype).max
    _rewrite(cache, records, nextmove=nextmove)
    lang._loaded.clear()
    assert lang.detect(POLISH[0]) == "pl"
    assert not cache.exists() and lang._loaded[0][1] is False
    _same(lang._loaded[0][0], package, POLISH)


def test_an_unwritable_cache_still_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # mkdir under a file fails, whoever runs the tests (root included)
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(lang, "_loaded", [])
    assert lang.detect(POLISH[1]) == "pl"
    assert "not written" in caplog.text and lang._loaded[0][1] is False
    assert blocker.read_text() == "not a folder"

"""The language of a text: a document's stamp, a question's route, the language of a refusal.

py3langid (a maintained fork of langid.py, its model in the wheel, numpy only) rather than a hand-written
detector. Its labels are restricted to the languages a Snowball stemmer exists for, which is what the
lexical index can serve, and which makes short questions far less likely to come out as Breton or Latin.

The package's model is an LZMA-compressed npz: decompressing it costs a fresh process (a question asked from the
command line) about 0.4 s of CPU. So its arrays, restricted to those languages, are written once to a cache file
(consecutive .npy records, written to a temporary file and renamed into place) that later processes memory-map:
a few milliseconds, and the pages are shared between processes. The file's name carries the package's version, a
digest of its model file and the languages, so an upgrade gets a new file. A cache that cannot be read is rebuilt;
one that cannot be written costs only the decompression: a text's language never fails because of the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import py3langid
from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

log = logging.getLogger(__name__)

# ISO 639-1 code -> Snowball (PyStemmer) algorithm: the languages citerag detects and stems.
SNOWBALL = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german", "el": "greek",
    "en": "english", "es": "spanish", "et": "estonian", "eu": "basque", "fi": "finnish", "fr": "french",
    "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian", "it": "italian",
    "lt": "lithuanian", "ne": "nepali", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil", "tr": "turkish",
}
DEFAULT = "en"
# Below this many letters a guess is noise ("apt-get", "ls -l"): the default language stands.
_MIN_LETTERS = 12
# A text is read in slices this long: a document's language is its opening's, detection stays O(1).
_SAMPLE = 20_000
_LETTERS = re.compile(r"[^\W\d_]")


# Bump when what _write_cache writes changes.
_CACHE_FORMAT = "1"
# The cache file's records, in order: the arrays LanguageIdentifier takes.
_RECORDS = ("ptc", "pc", "classes", "nextmove", "row", "output")
# This process's identifier and whether it reads the cache file, loaded on first use (see _classify).
_loaded: list[tuple[LanguageIdentifier, bool]] = []


def _package_identifier() -> LanguageIdentifier:
    """The package's own way: decompress the model, then restrict it to the Snowball languages."""
    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(sorted(SNOWBALL))
    return identifier


def cache_path() -> Path:
    """The cache file for the installed model. The folder follows citerag.embed.onnx_minilm.cache_dir's rule
    ($CITERAG_CACHE_DIR, $XDG_CACHE_HOME/citerag, ~/.cache/citerag), restated here because lang sits below embed."""
    if os.environ.get("CITERAG_CACHE_DIR"):
        folder = Path(os.environ["CITERAG_CACHE_DIR"]).expanduser()
    elif os.environ.get("XDG_CACHE_HOME"):
        folder = Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "citerag"
    else:
        folder = Path.home() / ".cache" / "citerag"
    key = hashlib.sha256()
    key.update(py3langid.__version__.encode())  # not importlib.metadata: its look-up costs more than the rest
    key.update((MODEL_DIR / MODEL_FILE).read_bytes())  # 4.5 MB, read and hashed in about 5 ms
    key.update(",".join(sorted(SNOWBALL)).encode())
    return folder / f"langid-{key.hexdigest()[:16]}-v{_CACHE_FORMAT}.npys"


def _write_cache(path: Path, identifier: LanguageIdentifier) -> None:
    arrays = [np.ascontiguousarray(identifier.nb_ptc), np.asarray(identifier.nb_pc), np.array(identifier.nb_classes),
              np.frombuffer(identifier.tk_nextmove, dtype=identifier.tk_nextmove.typecode),
              np.frombuffer(identifier.tk_row, dtype=identifier.tk_row.typecode),
              np.asarray(identifier.tk_output, dtype=np.int32)]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for array in arrays:
                np.save(f, array, allow_pickle=False)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_cache(path: Path) -> dict[str, np.ndarray]:
    """The records of a cache file as read-only arrays over its memory map; ValueError unless the file is whole."""
    with path.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # ValueError for an empty file
        records: dict[str, np.ndarray] = {}
        for name in _RECORDS:
            version = np.lib.format.read_magic(f)
            if version != (1, 0):
                raise ValueError(f"npy format {version}")
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            if fortran or dtype.hasobject:
                raise ValueError(f"record {name} is not a plain array")
            start = f.tell()
            count = int(np.prod(shape))
            if start + count * dtype.itemsize > len(mapped):
                raise ValueError(f"record {name} runs past the end")
            records[name] = np.frombuffer(mapped, dtype=dtype, count=count, offset=start).reshape(shape)
            f.seek(start + count * dtype.itemsize)
        if f.tell() != len(mapped):
            raise ValueError("bytes after the last record")
    return records


def _check(ptc: np.ndarray, pc: np.ndarray, classes: np.ndarray, nextmove: np.ndarray, row: np.ndarray,
           output: np.ndarray) -> None:
    """ValueError unless the records can be a model: types and shapes, and that the DFA's row and output tables
    point inside the model. The 39 MB transition table is not read whole (that would undo the map); an index out
    of range from it is caught in _classify."""
    records = (ptc, pc, classes, nextmove, row, output)
    if not all(a.dtype.isnative and a.ndim == (2 if a is ptc else 1) for a in records):
        raise ValueError("records of the wrong rank or byte order")
    if ptc.dtype != np.float16 or pc.dtype != np.float32 or classes.dtype.kind != "U" or output.dtype != np.int32:
        raise ValueError("records of the wrong types")
    if nextmove.dtype not in (np.uint16, np.uint32) or row.dtype not in (np.uint16, np.uint32):
        raise ValueError("a DFA table of the wrong type")
    if not len(pc) == len(classes) == ptc.shape[1] or not len(row) == len(output) > 0 or len(nextmove) % 256:
        raise ValueError("records of mismatched sizes")
    if int(row.max()) >= len(nextmove) // 256 or int(output.min()) < -1 or int(output.max()) >= len(ptc):
        raise ValueError("a DFA table points outside the model")


def _mapped_identifier(path: Path) -> LanguageIdentifier:
    """An identifier over the cache file's arrays, as the package's own loader would build it."""
    records = _read_cache(path)
    ptc, pc, classes, nextmove, row, output = (records[name] for name in _RECORDS)
    _check(ptc, pc, classes, nextmove, row, output)

    def ints(array: np.ndarray) -> Any:
        # As the package's loader gives them: indexing yields Python ints (numpy scalars would slow its DFA walk).
        fmt: Any = array.dtype.char
        return array.data.cast("B").cast(fmt)

    return LanguageIdentifier(ptc, pc, classes.tolist(), ints(nextmove), ints(output), norm_probs=True,
                              tk_row=ints(row))


def _load() -> tuple[LanguageIdentifier, bool]:
    """(identifier, whether it maps the cache file). Any failure of the cache, whatever its type, falls back to the
    package's own loader: a text's language must not fail because of the cache."""
    try:
        path = cache_path()
    except Exception as exc:  # e.g. RuntimeError: no home folder
        log.warning("language model cache unavailable (%s); loading the package's model", exc)
        return _package_identifier(), False
    try:
        return _mapped_identifier(path), True
    except FileNotFoundError:
        pass
    except Exception as exc:  # mostly ValueError: a truncated or garbled file
        log.warning("language model cache %s unusable (%s); rebuilding it", path, exc)
    identifier = _package_identifier()
    try:
        _write_cache(path, identifier)
    except Exception as exc:  # mostly OSError: a read-only or full disk
        log.warning("language model cache not written (%s); each process will decompress the model", exc)
    return identifier, False


def _classify(sample: str) -> tuple[str, float]:
    if not _loaded:
        _loaded.append(_load())
    identifier, mapped = _loaded[0]
    try:
        code, probability = identifier.classify(sample)
    except IndexError:
        if not mapped:  # the package's own model: not the cache's doing
            raise
        # A damaged transition table in the cache file: drop the file (the next process rebuilds it) and
        # answer from the package's model for the rest of this process.
        log.warning("language model cache damaged; removing it")
        with contextlib.suppress(Exception):
            cache_path().unlink(missing_ok=True)
        _loaded[:] = [(_package_identifier(), False)]
        code, probability = _loaded[0][0].classify(sample)
    return str(code), float(probability)


def detect(text: str, default: str = DEFAULT) -> str:
    """ISO 639-1 code of the text's language; `default` when the text has too few letters to tell."""
    sample = text[:_SAMPLE]
    if len(_LETTERS.findall(sample)) < _MIN_LETTERS:
        return default
    code, probability = _classify(sample)
    return code if probability >= 0.5 else default


def stemmer_name(code: str) -> str | None:
    """The Snowball algorithm for a language code, None where there is none."""
    return SNOWBALL.get(code)

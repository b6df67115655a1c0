"""Tesseract against RapidOCR on the scanned two-column sample page: error rates and time per page.

    .venv/bin/python benchmarks/ocr_engines.py [--runs 3]

Needs the `tesseract` binary (`apt-get install tesseract-ocr`) and, for the second engine,
`pip install rapidocr-onnxruntime==1.4.4` (its ONNX models ship inside the wheel; nothing is downloaded
at run time); an engine that is missing is reported as such and left out.

The page (tests/data/samples/pdf-scanned-2col-linn.pdf) is rendered as PdfExtractor renders it for OCR
(300 dpi, grayscale) and read by:

- tesseract: `citerag.extract.ocr.ocr_image`, exactly what the PDF extractor runs (psm 1, one thread),
  paragraphs in Tesseract's own block order;
- rapidocr: RapidOCR with its defaults (PP-OCRv4 det/rec models, the page scaled to 2000 px on its long
  side, onnxruntime on all cores), its line boxes put in reading order here (two columns read band by
  band, left column before right, as the extractor orders a text layer), so that order does not count
  against it.

Scores are over the whole page text against pdf-scanned-2col-linn.groundtruth.txt, edit distance over
reference length: CER over characters, WER over whitespace-separated words.
"raw" collapses whitespace only. The reference is itself an old OCR output: it reads the bullets as
"0", has "0r defeated", "ﬁrst‘track", "FOOTSWIT CH", em dashes where the scan has hyphens. "fair" also
normalises, in reference and output alike, what no engine should be charged for: NFKC (ligatures),
dashes to "-", curly quotes to straight, bullet glyphs and bullets misread as a lone "0"/"e" at a line
start dropped, no space before closing punctuation or after "/". "words" is the measure of
tests/extract/test_pdf.py: the share of the reference's distinct words of 4+ letters found.

Measured on the project's machine (2 cores, Debian 12; tesseract 5.3.0 from Debian, rapidocr-onnxruntime
1.4.4 with onnxruntime 1.32.0; run under `unshare -n`, so with no network at all), 3 runs, time the median
(the first run, which for RapidOCR includes loading its models, in brackets):

    engine      raw CER  raw WER fair CER fair WER    words  conf  s/page (first run)
    tesseract    0.0103   0.0587   0.0034   0.0183    0.997  94.7     2.9 (3.0)
    rapidocr     0.0302   0.1583   0.0203   0.1069    0.964  98.0     7.5 (10.1)

(Times depend on the load: a later run, with other work busy on the same two cores, gave 4.7 s for
Tesseract and 22.5 s for RapidOCR; the error rates do not change from run to run.)

RapidOCR's recogniser (PP-OCRv4, a Chinese/English model: the only one in the wheel) drops the spaces
between tightly set words ("Anyadditional notesplayedwill be addedintothe track",
"tracksmaybeoverdubbed!AllMIDIeffects"), reads "MIDI" as "MlDI", and its detector misses the page's last
line; hence three times Tesseract's CER and WER raw, six times fair. Its line scores stay near 1 on the
merged lines, so its confidence says less. Tesseract is also 2.6 times faster per page, on one thread
against RapidOCR's two. So Tesseract stays citerag's OCR engine (issue 8).
RapidOCR would not have installed cleanly either: rapidocr-onnxruntime 1.4.4 requires opencv-python, the
GUI build, whose bundled Qt5Gui links the system's libGL.so.1 (Debian package libgl1, not on a clean
Debian), and it adds about 300 MB to the environment (opencv 190 MB, onnxruntime 80 MB, models 16 MB).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "data" / "samples"
PDF = SAMPLES / "pdf-scanned-2col-linn.pdf"
TRUTH = SAMPLES / "pdf-scanned-2col-linn.groundtruth.txt"
OCR_DPI = 300


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two sequences (characters or words), one numpy row at a time."""
    if not a or not b:
        return max(len(a), len(b))
    vocab = {x: i for i, x in enumerate(set(a) | set(b))}
    bb = np.array([vocab[x] for x in b])
    steps = np.arange(len(b) + 1)
    prev = steps.copy()
    for i, x in enumerate(a, 1):
        cur = np.empty_like(prev)
        cur[0] = i
        cur[1:] = np.minimum(prev[1:] + 1, prev[:-1] + (bb != vocab[x]))  # deletion, substitution
        prev = np.minimum.accumulate(cur - steps) + steps  # insertion: cur[j] = min(cur[j], cur[j-1] + 1)
    return int(prev[-1])


def raw(s: str) -> str:
    return " ".join(s.split())


def fair(s: str) -> str:
    s = unicodedata.normalize("NFKC", s)
    s = re.sub("[\u2010-\u2015\u2212]", "-", s)
    s = re.sub("[\u2018\u2019\u201a\u201b`]", "'", s)
    s = re.sub("[\u201c\u201d\u201e\u201f]", '"', s)
    s = re.sub("[•·¢©®°*]", " ", s)
    s = re.sub(r"(?m)^\s*[0e]\s+", "", s)
    s = re.sub(r"\s+([!,.;:)])", r"\1", s)
    s = re.sub(r"/\s+", "/", s)
    return " ".join(s.split())


def scores(hyp: str, truth: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, norm in (("raw", raw), ("fair", fair)):
        t, h = norm(truth), norm(hyp)
        out[f"{name} CER"] = edit_distance(h, t) / len(t)
        out[f"{name} WER"] = edit_distance(h.split(), t.split()) / len(t.split())
    want = set(re.findall(r"[A-Za-z]{4,}", truth))
    out["words"] = len(want & set(re.findall(r"[A-Za-z]{4,}", hyp))) / len(want)
    return out


def render() -> Any:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(PDF)
    try:
        page = doc[0]
        image = page.render(scale=OCR_DPI / 72, grayscale=True).to_pil()
        page.close()
        return image
    finally:
        doc.close()


def tesseract_engine() -> Callable[[Any], tuple[str, float]] | str:
    from citerag.extract.ocr import ocr_image, tesseract_available

    if not tesseract_available():
        return "not installed: apt-get install tesseract-ocr"

    def run(image: Any) -> tuple[str, float]:
        page = ocr_image(image)
        return "\n\n".join(page.paragraphs), page.confidence

    return run


def rapidocr_engine() -> Callable[[Any], tuple[str, float]] | str:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError as exc:
        return f"not installed ({exc}): pip install rapidocr-onnxruntime==1.4.4"
    engine: list[Any] = []  # built on the first call, so that the first run's time includes loading the models

    def run(image: Any) -> tuple[str, float]:
        if not engine:
            engine.append(RapidOCR())
        result, _ = engine[0](np.asarray(image.convert("RGB")))
        boxes = [(min(p[0] for p in box), max(p[0] for p in box), min(p[1] for p in box), text, float(score))
                 for box, text, score in result or []]
        ordered = two_columns(boxes, image.size[0])
        # The page confidence: the mean of the line scores (0-1) times 100, over lines (RapidOCR scores lines).
        confidence = 100 * statistics.fmean(b[4] for b in boxes) if boxes else 0.0
        return "\n".join(b[3] for b in ordered), confidence

    return run


def two_columns(boxes: list[tuple[float, float, float, str, float]], width: float
                ) -> list[tuple[float, float, float, str, float]]:
    """(left, right, top, text, score) lines in reading order: a line spanning the middle ends a band;
    within a band the left column, top to bottom, then the right one."""
    mid, slack = width / 2, width / 100

    def spans(b: tuple[float, float, float, str, float]) -> bool:
        return b[0] < mid - slack and b[1] > mid + slack

    out: list[tuple[float, float, float, str, float]] = []
    floor = -1.0
    for cut in [*sorted((b for b in boxes if spans(b)), key=lambda b: b[2]), None]:
        ceiling = cut[2] if cut else float("inf")
        band = [b for b in boxes if floor <= b[2] < ceiling and not spans(b)]
        out += sorted((b for b in band if b[0] < mid - slack), key=lambda b: b[2])
        out += sorted((b for b in band if b[0] >= mid - slack), key=lambda b: b[2])
        if cut:
            out.append(cut)
            floor = cut[2]
    return out if len(out) == len(boxes) else sorted(boxes, key=lambda b: (b[2], b[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="OCR runs per engine (time: the median)")
    args = parser.parse_args()
    truth = TRUTH.read_text(encoding="utf-8")
    image = render()
    cols = ["raw CER", "raw WER", "fair CER", "fair WER", "words"]
    print(f"{'engine':<10} " + " ".join(f"{c:>8}" for c in cols) + f" {'conf':>5} {'s/page':>7} (first run)")
    for name, make in (("tesseract", tesseract_engine), ("rapidocr", rapidocr_engine)):
        engine = make()
        if isinstance(engine, str):
            print(f"{name:<10} {engine}")
            continue
        times, text, conf = [], "", 0.0
        for _ in range(max(1, args.runs)):
            t = time.perf_counter()
            text, conf = engine(image)
            times.append(time.perf_counter() - t)
        s = scores(text, truth)
        print(f"{name:<10} " + " ".join(f"{s[c]:8.4f}" for c in cols[:4]) + f" {s['words']:8.3f} {conf:5.1f}"
              f" {statistics.median(times):7.1f} ({times[0]:.1f})")


if __name__ == "__main__":
    main()

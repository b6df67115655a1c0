"""Pictures for report.html: matplotlib (Agg) figures returned as PNG bytes."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def recall_curves(report: dict[str, Any]) -> bytes:
    """Recall@k for k = 1..20, one panel per retriever, one line per strategy (and embedder)."""
    retrievers = list(dict.fromkeys(c["retriever"] for c in report["configurations"]))
    fig, axes = plt.subplots(1, len(retrievers), figsize=(5 * len(retrievers), 4), sharey=True, squeeze=False)
    for ax, retriever in zip(axes[0], retrievers, strict=True):
        for c in report["configurations"]:
            if c["retriever"] != retriever:
                continue
            ks = range(1, len(c["recall_curve"]) + 1)
            label = c["strategy"] if len(report["settings"]["embedders"]) == 1 else f"{c['strategy']} {c['embedder']}"
            ax.plot(ks, c["recall_curve"], marker=".", label=label)
        ax.set_title(retriever)
        ax.set_xlabel("k")
        ax.set_xticks([1, 4, 8, 12, 16, 20])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("Recall@k")
    axes[0][0].set_ylim(0, 1)
    return _png(fig)


def distance_histograms(conf: dict[str, Any], reference: float) -> bytes:
    cal = conf["calibration"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    values = cal["in_domain_best"] + cal["ood_best"]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    bins = [lo + (hi - lo) * i / 30 for i in range(31)]
    ax.hist(cal["in_domain_best"], bins=bins, alpha=0.6, label=f"in-domain ({len(cal['in_domain_best'])})")
    ax.hist(cal["ood_best"], bins=bins, alpha=0.6, label=f"out-of-domain ({len(cal['ood_best'])})")
    rec = cal["recommended"]["threshold"]
    ax.axvline(rec, color="black", linestyle="-", label=f"recommended {rec:.3f}")
    ax.axvline(reference, color="grey", linestyle="--", label=f"configured {reference:.3f}")
    ax.set_xlabel("cosine distance of the best hit")
    ax.set_ylabel("queries")
    ax.set_title(conf["id"])
    ax.legend(fontsize=8)
    return _png(fig)


def sweep_curve(conf: dict[str, Any], queries: int, ood: int) -> bytes:
    cal = conf["calibration"]
    ts = [r["threshold"] for r in cal["sweep"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(ts, [r["refused"] / max(queries, 1) for r in cal["sweep"]], label="answerable refused")
    ax.plot(ts, [r["bluffs"] / max(ood, 1) for r in cal["sweep"]], label="out-of-domain answered (bluffs)")
    ax.plot(ts, [r["supported"] / max(queries, 1) for r in cal["sweep"]], linestyle=":",
            label="answerable, needle among the kept hits")
    ax.axvline(cal["recommended"]["threshold"], color="black", label="recommended")
    ax.set_xlabel("threshold (cosine distance)")
    ax.set_ylabel("share of queries")
    ax.set_ylim(0, 1)
    ax.set_title(conf["id"])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)

"""PNG plots of a comparison (matplotlib, Agg backend: no display needed). The functions
return PNG bytes; the CLI writes them."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import Result


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_summary(results: Sequence[Result]) -> bytes:
    """Bars: makespan, average JCT, p99 JCT, average slowdown, per policy."""
    plt = _plt()
    names = [r.policy for r in results]
    panels = [
        ("makespan_h", "makespan (h)"),
        ("avg_jct_h", "average JCT (h)"),
        ("p99_jct_h", "p99 JCT (h)"),
        ("avg_slowdown", "average slowdown"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (attr, title) in zip(axes, panels):
        vals = [getattr(r, attr) for r in results]
        ax.bar(range(len(vals)), vals, color=[_color(n) for n in names])
        ax.set_xticks(range(len(vals)), names, rotation=40, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return _png(plt, fig)


def plot_slowdown_cdf(results: Sequence[Result]) -> bytes:
    """Per-job slowdown (JCT / solo duration), cumulative distribution per policy."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        s = np.sort(r.per_job["slowdown"])
        ax.plot(s, np.arange(1, len(s) + 1) / len(s), label=r.policy, color=_color(r.policy))
    ax.set_xscale("log")
    ax.set_xlabel("slowdown (JCT / solo duration), log scale")
    ax.set_ylabel("share of jobs")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(plt, fig)


def plot_class_slowdown(results: Sequence[Result]) -> bytes:
    """Mean slowdown per job class and policy (fairness between classes)."""
    plt = _plt()
    classes = sorted(set(results[0].per_job["cls"]))
    fig, ax = plt.subplots(figsize=(10, 4))
    w = 0.8 / max(1, len(results))
    for k, r in enumerate(results):
        cls, slow = r.per_job["cls"], r.per_job["slowdown"]
        means = [float(slow[cls == c].mean()) if (cls == c).any() else 0.0 for c in classes]
        ax.bar(np.arange(len(classes)) + k * w, means, w, label=r.policy, color=_color(r.policy))
    ax.set_xticks(np.arange(len(classes)) + 0.4, classes, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("mean slowdown")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    return _png(plt, fig)


_COLORS = {
    "exclusive-fifo": "#7f7f7f",
    "exclusive-backfill": "#bcbd22",
    "slurm-shard": "#d62728",
    "gandiva-random": "#ff7f0e",
    "ours": "#1f77b4",
    "oracle": "#2ca02c",
}


def _color(name: str) -> str:
    return _COLORS.get(name, "#9467bd")


def _png(plt: Any, fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_plots(results: Sequence[Result]) -> dict[str, bytes]:
    """File name -> PNG bytes of every plot."""
    return {
        "summary.png": plot_summary(results),
        "slowdown_cdf.png": plot_slowdown_cdf(results),
        "class_slowdown.png": plot_class_slowdown(results),
    }

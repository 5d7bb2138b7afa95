"""PNG plots of a comparison (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .metrics import Result


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_summary(results: Sequence[Result], path: Path) -> Path:
    """Bars: makespan, average JCT, p99 JCT, average slowdown, per policy."""
    plt = _plt()
    names = [r.policy for r in results]
    panels = [("makespan_h", "makespan (h)"), ("avg_jct_h", "average JCT (h)"),
              ("p99_jct_h", "p99 JCT (h)"), ("avg_slowdown", "average slowdown")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (attr, title) in zip(axes, panels):
        vals = [getattr(r, attr) for r in results]
        ax.bar(range(len(vals)), vals, color=[_color(n) for n in names])
        ax.set_xticks(range(len(vals)), names, rotation=40, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_slowdown_cdf(results: Sequence[Result], path: Path) -> Path:
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_class_slowdown(results: Sequence[Result], path: Path) -> Path:
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_COLORS = {"exclusive-fifo": "#7f7f7f", "exclusive-backfill": "#bcbd22", "slurm-shard": "#d62728",
           "gandiva-random": "#ff7f0e", "ours": "#1f77b4", "oracle": "#2ca02c"}


def _color(name: str) -> str:
    return _COLORS.get(name, "#9467bd")


def write_plots(results: Sequence[Result], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [plot_summary(results, out_dir / "summary.png"),
            plot_slowdown_cdf(results, out_dir / "slowdown_cdf.png"),
            plot_class_slowdown(results, out_dir / "class_slowdown.png")]

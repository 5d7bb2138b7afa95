"""Views of a score table: every pair with S and delta, a class x class matrix, a short text
report. Pure (the CLI draws the heatmap)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..scores import ScoreTable


def table_classes(table: ScoreTable) -> list[str]:
    return sorted(table.known_classes())


def export_rows(table: ScoreTable) -> list[dict[str, Any]]:
    """Every pair (a <= b) of known classes: n of each member, S, delta, uncertainty."""
    cl = table_classes(table)
    rows = []
    for i, a in enumerate(cl):
        for b in cl[i:]:
            p = table.pair(a, b)
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "n_a": round(p.n_a, 4),
                    "n_b": round(p.n_b, 4),
                    "S": round(p.combined, 4),
                    "delta": round(0.0 if p.never else p.delta, 4),
                    "sd": round(p.sd, 4),
                    "observed": p.observed,
                    "never": p.never,
                }
            )
    return rows


def matrix(table: ScoreTable, metric: str = "delta") -> tuple[list[str], np.ndarray]:
    """(classes, k x k matrix) of ``delta`` or ``S`` (NaN for never pairs)."""
    cl = table_classes(table)
    m = np.full((len(cl), len(cl)), np.nan)
    for i, a in enumerate(cl):
        for j, b in enumerate(cl):
            p = table.pair(a, b)
            if not p.never:
                m[i, j] = p.delta if metric == "delta" else p.combined
    return cl, m


def text_report(table: ScoreTable, top: int = 5) -> str:
    rows = export_rows(table)
    ok = [r for r in rows if not r["never"]]
    lines = [
        f"score set {table.id} ({table.gpu_model or 'any GPU'}, created {table.created or '?'}): "
        f"{len(table_classes(table))} classes, {len(rows)} pairs, "
        f"{sum(r['observed'] for r in rows)} observed, {sum(r['never'] for r in rows)} never"
    ]
    if ok:
        gain = sum(r["delta"] > 1.0 for r in ok)
        lines.append(
            f"pairs predicted to gain (delta > 1): {gain} of {len(ok)}; "
            f"median uncertainty (sd of n) {float(np.median([r['sd'] for r in ok])):.3f}"
        )
        best = sorted(ok, key=lambda r: -r["delta"])[:top]
        worst = sorted(ok, key=lambda r: r["delta"])[:top]
        lines.append(
            "best pairs:  " + "; ".join(f"{r['a']}+{r['b']} {r['delta']:.2f}" for r in best)
        )
        lines.append(
            "worst pairs: " + "; ".join(f"{r['a']}+{r['b']} {r['delta']:.2f}" for r in worst)
        )
    if table.metrics:
        lines.append(
            "metrics: "
            + ", ".join(
                f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                for k, v in table.metrics.items()
            )
        )
    return "\n".join(lines)

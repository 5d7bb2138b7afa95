"""Observations -> fitted pairwise model -> :class:`~slurm_colo.scores.ScoreTable`. Pure.

Rules applied on top of the GP (documented in docs/model.md):

- *never*: out-of-memory pairs, and pairs with a fatal MPS fault, get ``never=True`` and
  ``n = 0``. One fault is enough: it kills every client on the GPU, and the placement's
  throughput path would otherwise take a pair that successful measurements keep predicted
  at 0.4x or more.
- censored entries (clipped at 1.0) are lower bounds: the prediction for such a pair is
  never below the observed value.
- predictions are capped at ``n_max`` (sharing does not make a job faster).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ..errors import ModelError
from ..gavel import GavelData
from ..scores import ClassInfo, PairScore, ScoreTable
from .data import Observations
from .features import class_distances
from .gp import PairGP, fit_gp
from .share import ShareView, fit_share

#: standard deviation (of n) reported for classes with no data at all
PRIOR_SD = 0.25


def _with_faults(obs: Observations) -> tuple[Observations, set[tuple[str, str]]]:
    """The never pairs: out of memory, or with a fatal MPS fault."""
    return obs, set(obs.never) | {k for k, f in obs.faults.items() if f > 0}


def fit_model(
    obs: Observations, seed: int = 0, hyper: Mapping[str, Any] | None = None
) -> tuple[PairGP | None, ShareView | None, list[str]]:
    """Fit the per-direction GP and the share view (:mod:`.share`; ``None`` with too few
    pairs measured both ways); ``None, None`` when there is no pair entry at all (prior
    only). ``hyper``: see :func:`fit_table`."""
    classes = sorted(obs.classes)
    if len(obs) == 0:
        return None, None, classes
    e = obs.aggregate(classes)
    dists = class_distances(classes, obs.classes)
    hyper = hyper or {}
    share_given = hyper.get("hyper_share")
    return (
        fit_gp(e, dists, seed=seed, fixed=hyper.get("hyper")),
        fit_share(
            e, dists, seed=seed, hyper=share_given if isinstance(share_given, Mapping) else None
        ),
        classes,
    )


def predict_log_n(gp: PairGP, share: ShareView | None) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of ``log n`` for every ordered pair: the mean of the two
    views (the per-direction view alone without a share view), the standard deviation of
    the per-direction view; large data then fold in each observed pair's own value."""
    mean, sd = gp.predict(fold_in=False)
    if share is not None:
        mean = 0.5 * (mean + share.mean_grid())
    return gp.fold_in(mean, sd)


def fit_table(
    obs: Observations,
    seed: int = 0,
    gpu_model: str = "",
    n_max: float = 1.0,
    training: dict[str, Any] | None = None,
    hyper: Mapping[str, Any] | None = None,
) -> ScoreTable:
    """Fit and return a full table: every pair (a <= b) of every known class.

    ``hyper``: the ``training`` of a table fitted before on a part of the same data (the
    held-out fit of :mod:`.validate`): its hyper-parameters (``hyper``, ``hyper_share``)
    are used as they are instead of being searched again, so that the set published is the
    one the held-out check scored; only the posterior is recomputed from every pair."""
    obs2, never = _with_faults(obs)
    gp, share, classes = fit_model(obs2, seed, hyper)
    k = len(classes)
    info = {
        c: ClassInfo(
            memory_gib=p.memory_gib,
            sm_util=p.sm_util,
            solo_rate=p.solo_rate,
            progress_rate=p.progress_rate,
        )
        for c, p in obs.classes.items()
    }
    created = datetime.now(UTC).replace(microsecond=0).isoformat()
    table = ScoreTable(
        classes=info, gpu_model=gpu_model, created=created, training=dict(training or {})
    )
    if gp is None:
        table.prior_n, table.prior_sd = 0.6, PRIOR_SD
        table.training["model"] = "prior-only (no pair data)"
        return table
    mean_log, sd_log = predict_log_n(gp, share)
    mean = np.minimum(np.exp(mean_log), n_max)
    sd = mean * sd_log
    e = gp.local if gp.local is not None else gp.entries
    cens = e.censored
    # censored entries are lower bounds
    obs_val = np.exp(e.y[cens])
    mean[e.ia[cens], e.ib[cens]] = np.maximum(
        mean[e.ia[cens], e.ib[cens]], np.minimum(obs_val, n_max)
    )
    observed = np.zeros((k, k), bool)
    observed[e.ia, e.ib] = True
    ix = {c: i for i, c in enumerate(classes)}
    for i in range(k):
        for j in range(i, k):
            a, b = classes[i], classes[j]
            if (a, b) in never:
                table.pairs[(a, b)] = PairScore(0.0, 0.0, 0.0, observed=True, never=True)
                continue
            s = float(max(sd[i, j], sd[j, i]))
            table.pairs[(a, b)] = PairScore(
                float(mean[i, j]),
                float(mean[j, i]),
                s,
                observed=bool(observed[i, j] or observed[j, i]),
            )
    del ix
    table.prior_n = float(min(math.exp(gp.mean), n_max))
    prior_var = float(np.exp(gp.theta[6:9]).sum())
    table.prior_sd = float(
        table.prior_n * math.sqrt(prior_var + 1.0) if prior_var > 0 else PRIOR_SD
    )
    table.prior_sd = min(table.prior_sd, 1.0)
    table.training.update(
        {
            "model": "gp-pairs+share/2" if share is not None else "gp-pairs/1",
            "classes": k,
            "entries": int(len(e)),
            "never_pairs": len(never),
            "rejected_entries": obs.rejected,
            "hyper": gp.params,
            **({"hyper_share": share.params} if share is not None else {}),
            "hyper_search": "reused from the held-out fit"
            if hyper and hyper.get("hyper")
            else "fitted",
        }
    )
    return table


def observations_from_gavel(
    data: GavelData, train_pairs: set[tuple[str, str]] | None = None
) -> Observations:
    """Observations from a Gavel profiling campaign (solo rates of every class stay known)."""
    obs = Observations()
    for c, r in sorted(data.solo.items()):
        obs.add_class(c, solo_rate=r)
    keep = None if train_pairs is None else {(min(a, b), max(a, b)) for a, b in train_pairs}
    for a, b in data.unordered_pairs():
        if keep is not None and (a, b) not in keep:
            continue
        na, nb = data.pairs[(a, b)]
        obs.add_pair(a, b, na, nb, censored=(a, b) in data.censored)
    for a, b in data.never:
        obs.add_never(a, b)
    return obs


def fit_gavel(
    data: GavelData, train_pairs: set[tuple[str, str]] | None = None, seed: int = 0
) -> ScoreTable:
    """Train on the given measured pairs of ``data`` (None = all) and predict every pair."""
    if not data.solo:
        raise ModelError(f"gavel data for {data.gpu!r} has no classes")
    obs = observations_from_gavel(data, train_pairs)
    t = fit_table(
        obs,
        seed=seed,
        gpu_model=data.gpu,
        training={"source": f"gavel:{data.gpu}", "train_pairs": len(obs.observed_pairs())},
    )
    t.id = f"gavel-{data.gpu}-s{seed}"
    return t

"""One score set: history -> observations -> fitted table -> validated publish.

Brings the co-location episodes up to date with the records first (incrementally: only
the episodes of jobs with new records are rebuilt; ``rebuild`` rebuilds all), then reads
those of the training window in bulk, the imported profiling campaigns of the GPU model
and the classes' solo profiles; fits the model; runs the held-out check; publishes
atomically to ``[scores] path`` and marks the set live in the database only when the
check passes. Otherwise the old set stays live, the new one is recorded as rejected, and
:class:`ModelError` says why (non-zero exit). :func:`.by_model.retrain_site` (what
``slurm-colo retrain`` calls) runs this once, or once per GPU model on a site with
several.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, or_, select
from sqlalchemy.engine import Engine

from slurm_colo.config import Config
from slurm_colo.contracts.enums import ClassNumbers
from slurm_colo.contracts.options import without_run_number
from slurm_colo.errors import ModelError, ScoresError
from slurm_colo.model.data import Observations
from slurm_colo.model.fit import fit_table
from slurm_colo.model.history import SOURCE_WEIGHT, add_pair_episodes, member_pair_episodes
from slurm_colo.model.validate import holdout_mae
from slurm_colo.scores import ScoreTable, publish_scores, scores_from_dict
from slurm_colo.store.engine import db_errors, require_schema
from slurm_colo.store.episode_read import SOURCES
from slurm_colo.store.episodes import (
    BuildReport,
    read_window,
    rebuild_episodes,
    update_episodes,
)
from slurm_colo.store.schema import ClassSolo, EpisodeSource, Job, PairObservation, Profile
from slurm_colo.store.scoresets import (
    free_score_set_id,
    imported_gpu_models,
    live_score_set,
    record_score_set,
    set_live,
)


@dataclass
class RetrainResult:
    table: ScoreTable
    published: bool
    path: Path | None
    info: dict[str, Any] = field(default_factory=dict)


def resolve_gpu_model(engine: Engine, gpu: str | None, cfg: Config) -> str:
    if gpu:
        return gpu
    if cfg.scores.gpu_model:
        return cfg.scores.gpu_model
    models = imported_gpu_models(engine)
    if len(models) > 1:
        raise ModelError(
            f"profiling campaigns of several GPU models are imported "
            f"({', '.join(models)}): say which with --gpu or [scores] gpu_model"
        )
    return models[0] if models else ""


def _class_profiles(
    engine: Engine, obs: Observations, since: float, history_model: str | None = None
) -> None:
    """Per class: peak memory of any run, median SM utilisation and progress rate of its solo
    runs (a campaign's figures, added first, take precedence). Peak memory comes from the
    records the episodes were built from (all of them, after the update), aggregated by
    the database; only solo runs come back as rows. ``history_model``: only the records
    of GPUs of that model (None: all)."""
    peak_q = (
        select(EpisodeSource.cls, func.max(EpisodeSource.mem_peak_gib))
        .where(EpisodeSource.end_time >= since, EpisodeSource.mem_peak_gib > 0)
        .group_by(EpisodeSource.cls)
    )
    solo_q = (
        select(Job.cls, Profile.sm_util_mean, Job.progress_rate)
        .join(Profile, Profile.record_id == Job.record_id, isouter=True)
        .where(
            Job.end_time >= since,
            ~Job.shared,
            or_(Profile.sm_util_mean.is_not(None), Job.progress_rate > 0),
        )
    )
    if history_model is not None:
        peak_q = peak_q.where(EpisodeSource.gpu_model == history_model)
        solo_q = solo_q.where(Job.gpu_model == history_model)
    util: dict[str, list[float]] = {}
    rate: dict[str, list[float]] = {}
    with db_errors(engine), engine.connect() as conn:
        mem = {c: p for c, p in conn.execute(peak_q).all() if p is not None}
        for cls, util_mean, prate in conn.execute(solo_q).all():
            if util_mean is not None:
                util.setdefault(cls, []).append(util_mean)
            if prate:
                rate.setdefault(cls, []).append(prate)
    for c in set(mem) | set(util) | set(rate):
        # the site's own solo runs: their rate is in the jobs' progress units too
        solo = statistics.median(rate[c]) if c in rate else None
        obs.add_class(
            c,
            memory_gib=mem.get(c),
            sm_util=statistics.median(util[c]) if c in util else None,
            solo_rate=solo,
            progress_rate=solo,
        )


def _history(
    engine: Engine,
    obs: Observations,
    since: float,
    now: float,
    half_life_days: float,
    built: BuildReport,
    history_model: str | None,
) -> dict[str, Any]:
    """Add the class profiles and the episodes of the window (of ``history_model``'s GPUs,
    or all) to ``obs``."""
    _class_profiles(engine, obs, since, history_model)
    w = read_window(engine, since, history_model)
    quality = np.array([SOURCE_WEIGHT.get(s, 0.0) for s in SOURCES])[w.source]
    pe = member_pair_episodes(
        w.classes, w.start, w.end, w.fault, w.oom, w.episode, w.cls, w.n, quality
    )
    kept = add_pair_episodes(obs, pe, now, half_life_days)
    return {
        "episodes": len(w),
        "history_entries": kept,
        "records_built": built.jobs,
        "skewed_intervals": w.skewed_intervals,
        "clock_stepped_records": w.clock_stepped,
        "duration_proxy_cv": {c: round(v, 3) for c, v in sorted(w.ref.cv.items())},
        "episode_gpu_models": {m or "(unknown)": k for m, k in sorted(w.models.items())},
    }


def gather(
    engine: Engine,
    gpu_model: str | None,
    now: float,
    window_days: float,
    half_life_days: float,
    rebuild: bool = False,
    history_model: str | None = None,
    built: BuildReport | None = None,
) -> tuple[Observations, dict[str, Any]]:
    """All training observations: the imported campaigns of ``gpu_model`` (None: of every
    model) plus the site history of GPUs of ``history_model`` (None: all of it). The
    episodes are brought up to date first unless ``built`` says they were."""
    require_schema(engine)
    if built is None:
        built = rebuild_episodes(engine) if rebuild else update_episodes(engine)
    since = now - window_days * 86400.0
    obs = Observations()
    solo_q = select(ClassSolo)
    pair_q = select(PairObservation)
    if gpu_model is not None:
        solo_q = solo_q.where(ClassSolo.gpu_model == gpu_model)
        pair_q = pair_q.where(PairObservation.gpu_model == gpu_model)
    with db_errors(engine), engine.connect() as conn:
        for r in conn.execute(solo_q):
            obs.add_class(r.cls, solo_rate=r.solo_rate, memory_gib=r.memory_gib, sm_util=r.sm_util)
        n_campaign = 0
        for p in conn.execute(pair_q):
            n_campaign += 1
            if p.never:
                obs.add_never(p.a, p.b)
                continue
            if p.faults:
                obs.add_fault(p.a, p.b, p.faults)
            if p.n_a is not None and p.n_b is not None:
                obs.add_pair(p.a, p.b, p.n_a, p.n_b, weight=p.weight, censored=p.censored)
    hist = _history(engine, obs, since, now, half_life_days, built, history_model)
    info = {
        "window_start": since,
        "window_end": now,
        "episodes": hist["episodes"],
        "history_entries": hist["history_entries"],
        "campaign_pairs": n_campaign,
        "skewed_intervals": hist["skewed_intervals"],
        "clock_stepped_records": hist["clock_stepped_records"],
        "rejected_entries": obs.rejected,
        "duration_proxy_cv": hist["duration_proxy_cv"],
        "records_built": hist["records_built"],
        "episode_gpu_models": hist["episode_gpu_models"],
    }
    return obs, info


def _busiest_classes(
    obs: Observations, info: dict[str, Any], most: int
) -> tuple[Observations, dict[str, Any]]:
    """``obs`` between its ``most`` classes with the most evidence (``scores.max_classes``;
    ties by name), and ``info`` with how many were left out. A set scores every pair of its
    classes, so its size and the fit's time grow with their square; a site whose jobs are
    named afresh for each run has a class per job."""
    if len(obs.classes) <= most:
        return obs, info
    weight = obs.class_weights()
    keep = set(sorted(weight, key=lambda c: (-weight[c], c))[:most])
    left = len(obs.classes) - most
    return obs.restricted(keep), info | {"classes_left_out": left, "max_classes": most}


def numbered_classes(classes: Iterable[str]) -> dict[str, Any]:
    """How many of ``classes`` differ from another only in the number at their name's end
    (``run-00042``, ``run-00043``), as ``{"numbered_classes": N, "numbered_kinds": K,
    "numbered_examples": [...]}`` (K the classes they would be with ``class_name_numbers =
    "strip"``); {} when none do."""
    kinds: dict[str, list[str]] = {}
    for c in classes:
        kind = without_run_number(c)
        if kind and kind != c:
            kinds.setdefault(kind, []).append(c)
    runs = {k: sorted(v) for k, v in kinds.items() if len(v) >= 2}
    if not runs:
        return {}
    examples = [c for k in sorted(runs, key=lambda k: (-len(runs[k]), k))[:2] for c in runs[k][:2]]
    return {
        "numbered_classes": sum(len(v) for v in runs.values()),
        "numbered_kinds": len(runs),
        "numbered_examples": examples,
    }


def train_and_publish(
    engine: Engine,
    cfg: Config,
    gpu_model: str,
    obs: Observations,
    info: dict[str, Any],
    now: float,
    dest: Path,
    dry_run: bool = False,
    force: bool = False,
) -> RetrainResult:
    """Fit ``obs``, check the new set against the live one of ``gpu_model`` (the
    ``live_score_set`` row; "" the site default) and publish it to ``dest``."""
    sc = cfg.scores
    if len(obs) == 0 and not obs.never:
        raise ModelError(
            "no training data: the history has no co-location episodes in the window "
            f"({sc.window_days:g} days) and no profiling campaign is imported for "
            f"GPU model {gpu_model or '(any)'}; the live score set is unchanged",
            hint="slurm-colo history import --gavel FILE --gpu MODEL",
        )
    if cfg.placement.class_name_numbers == ClassNumbers.KEEP:
        info = info | numbered_classes(obs.classes)
    obs, info = _busiest_classes(obs, info, sc.max_classes)
    mae, n_hidden, hyper = holdout_mae(obs, share=sc.holdout_share, seed=0)
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    table = fit_table(obs, seed=0, gpu_model=gpu_model, training=info, hyper=hyper)
    table.id = free_score_set_id(engine, f"{gpu_model or 'site'}-{stamp}")
    live = live_score_set(engine, gpu_model)
    live_mae = live.metrics.get("holdout_mae") if live is not None else None
    table.metrics = {
        "holdout_mae": mae,
        "holdout_pairs": n_hidden,
        "live_id": live.id if live else None,
        "live_holdout_mae": live_mae,
        "max_regression": sc.max_regression,
    }
    verdict = ""
    try:
        scores_from_dict(table.to_dict(), f"score set {table.id}")
    except ScoresError as e:
        verdict = f"new score set is invalid: {e}"
    if (
        not verdict
        and mae is not None
        and isinstance(live_mae, (int, float))
        and not force
        and mae > live_mae + sc.max_regression
    ):
        verdict = (
            f"held-out error {mae:.4f} is worse than the live set {live.id if live else ''}"
            f" ({live_mae:.4f}) by more than {sc.max_regression:g}"
        )
    if dry_run:
        return RetrainResult(table, False, None, info | {"verdict": verdict or "would publish"})
    window = (info["window_start"], info["window_end"])
    if verdict:
        record_score_set(engine, table, "rejected", verdict, window, len(obs))
        raise ModelError(
            f"score set {table.id} not published: {verdict}; "
            f"{'the previous set stays live' if live else 'no set is live'}"
        )
    record_score_set(engine, table, "candidate", "", window, len(obs))
    try:
        out = publish_scores(table, dest)
    except OSError as e:
        raise ModelError(
            f"score set {table.id} validated but cannot be written to {dest}: "
            f"{e.strerror}; the previous set stays live"
        ) from None
    set_live(engine, table.id, gpu_model)
    return RetrainResult(table, True, out, info)

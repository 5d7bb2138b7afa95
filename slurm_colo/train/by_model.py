"""The nightly retrain of a site: one score set, or one per GPU model on a mixed site.

First the records without a GPU model get their node's (the ``[[gpus]]`` layouts) and the
episodes are brought up to date, once. Then:

* ``--gpu NAME``, or ``[scores] gpu_model`` set, or a site whose records and campaigns name
  at most one GPU model: one set, as before (:mod:`.retrain`'s rules), published
  to ``[scores] path`` -- except ``--gpu NAME`` on a mixed site, which trains that model's
  set alone and publishes it where that model's set lives.
* A mixed site (two or more models): the site default set, trained on the whole history
  (each GPU model's episodes against its own solo runs) and every imported campaign,
  published to ``[scores] path``; then, per model with at least :data:`MIN_MODEL_PAIRS`
  measured class pairs (its own history and campaigns), that model's set, published to
  ``live-<model>.json`` next to it (:func:`slurm_colo.scores.model_scores_path`) and marked
  live for the model in the database. A model with less data is not trained: its GPUs keep
  the set they use (their own earlier one, else the site default).

A set that fails its check does not stop the others; :class:`SiteRetrain` says what
happened to each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from slurm_colo.config import Config
from slurm_colo.errors import ModelError
from slurm_colo.scores import model_scores_path
from slurm_colo.store.episodes import rebuild_episodes, update_episodes
from slurm_colo.store.gpu_models import fill_gpu_models, history_gpu_models, site_gpu_models
from slurm_colo.train.lock import retrain_lock
from slurm_colo.train.retrain import RetrainResult, gather, resolve_gpu_model, train_and_publish

#: a GPU model gets a set of its own from this many measured class pairs on
MIN_MODEL_PAIRS = 5


@dataclass
class ModelOutcome:
    """What the retrain did for one GPU model ("" = the site default set)."""

    gpu_model: str
    result: RetrainResult | None = None
    #: why no set was trained (too little data); its GPUs keep the set they use
    skipped: str = ""
    #: why the trained set was not published (check failed, destination unwritable)
    error: str = ""
    pairs: int = 0


@dataclass
class SiteRetrain:
    outcomes: list[ModelOutcome] = field(default_factory=list)
    #: records given the GPU model of their node
    filled: int = 0
    #: several GPU models: one set per model besides the site default
    mixed: bool = False
    #: models the history names besides the one trained (single-set runs only)
    also_in_history: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[ModelOutcome]:
        return [o for o in self.outcomes if o.error]


def node_models(cfg: Config) -> dict[str, str]:
    """Node -> GPU model of the configuration's ``[[gpus]]`` layouts."""
    return {node: ng.model for ng in cfg.gpus for node in ng.node_names}


def check_gpu_name(gpu: str, cfg: Config, site_models: list[str]) -> None:
    """``--gpu NAME`` names a model the site has: a ``[[gpus]]`` layout's, ``[scores]
    gpu_model``, or one that the history or an imported campaign names. A mistyped name
    would otherwise train on nothing of that model and publish the set over the live one."""
    known = {ng.model for ng in cfg.gpus if ng.model} | set(site_models)
    if cfg.scores.gpu_model:
        known.add(cfg.scores.gpu_model)
    if gpu not in known:
        raise ModelError(
            f"--gpu {gpu}: no GPU model of that name in the configuration's [[gpus]], "
            f"[scores] gpu_model, the history or an imported campaign "
            f"(known: {', '.join(sorted(known)) or 'none'})",
            hint="check the name (slurm-colo history shows each record's GPU model), "
            "or import its campaign first (slurm-colo history import --gavel FILE --gpu NAME)",
        )


def retrain_site(
    engine: Engine,
    cfg: Config,
    gpu: str | None = None,
    now: float | None = None,
    dry_run: bool = False,
    force: bool = False,
    path: str | Path | None = None,
    rebuild: bool = False,
) -> SiteRetrain:
    """Train and publish the site's score set(s) (see the module). One run at a time per
    store. A single-set run raises the :class:`ModelError` of a refused set (a multi-model run
    records each model's in its outcome)."""
    with retrain_lock(engine):
        now = time.time() if now is None else now
        sc = cfg.scores
        run = SiteRetrain(filled=fill_gpu_models(engine, node_models(cfg)))
        built = rebuild_episodes(engine) if rebuild else update_episodes(engine)
        models = site_gpu_models(engine)
        if gpu:
            check_gpu_name(gpu, cfg, models)
        run.mixed = len(models) > 1 and not sc.gpu_model
        dest = Path(path or sc.path)
        if gpu or not run.mixed:
            model = resolve_gpu_model(engine, gpu, cfg) if not run.mixed else str(gpu)
            history = model if run.mixed else None
            obs, info = gather(
                engine, model, now, sc.window_days, sc.half_life_days, False, history, built
            )
            to = model_scores_path(dest, model) if run.mixed else dest
            res = train_and_publish(engine, cfg, model, obs, info, now, to, dry_run, force)
            run.outcomes.append(ModelOutcome(model, res, pairs=len(obs.observed_pairs())))
            if model:  # a set of one named model trained from the history of others too
                run.also_in_history = sorted(
                    m for m in history_gpu_models(engine) if m and m != model
                )
            run.mixed = run.mixed and bool(gpu)
            return run
        for model in ["", *models]:
            campaign = None if model == "" else model
            history = None if model == "" else model
            obs, info = gather(
                engine, campaign, now, sc.window_days, sc.half_life_days, False, history, built
            )
            out = ModelOutcome(model, pairs=len(obs.observed_pairs()))
            run.outcomes.append(out)
            if model and out.pairs < MIN_MODEL_PAIRS:
                out.skipped = (
                    f"{out.pairs} measured class pair(s), fewer than {MIN_MODEL_PAIRS}: not trained"
                )
                continue
            to = model_scores_path(dest, model) if model else dest
            try:
                out.result = train_and_publish(
                    engine, cfg, model, obs, info, now, to, dry_run, force
                )
            except ModelError as e:
                out.error = e.message
        return run

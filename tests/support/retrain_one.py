"""``retrain`` for a store with one GPU model: :func:`slurm_colo.train.by_model.retrain_site`,
which ``slurm-colo retrain`` runs, and its one outcome's result."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from slurm_colo.config import Config
from slurm_colo.train.by_model import retrain_site
from slurm_colo.train.retrain import RetrainResult


def retrain(engine: Engine, cfg: Config, **kw: Any) -> RetrainResult:
    run = retrain_site(engine, cfg, **kw)
    (out,) = run.outcomes
    assert out.result is not None, out.skipped or out.error
    return out.result

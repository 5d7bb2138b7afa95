"""The GPU models of the history: which models the records and campaigns name, and the
model of records that do not name one.

A record written before records carried the GPU model (version 1), or on a node outside
every ``[[gpus]]`` layout, has an empty model. :func:`fill_gpu_models` gives such records
the model their node has in the configuration (the caller passes node -> model), and
forgets that their episodes were built, so the next episode update builds them again
tagged with the model.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Engine

from .engine import db_errors, require_schema
from .episode_fetch import chunks
from .schema import ClassSolo, EpisodeSource, Job


def fill_gpu_models(engine: Engine, node_models: Mapping[str, str]) -> int:
    """Give records without a GPU model the model of their node (``node_models``: node ->
    model; nodes mapped to "" are left alone). Returns how many records were given one."""
    require_schema(engine)
    by_model: dict[str, list[str]] = {}
    for node, model in node_models.items():
        if model:
            by_model.setdefault(model, []).append(node)
    if not by_model:
        return 0
    filled = 0
    with db_errors(engine), engine.begin() as conn:
        blank = set(conn.scalars(select(Job.node).where(Job.gpu_model == "").distinct()))
        for model, nodes in sorted(by_model.items()):
            for ch in chunks(blank.intersection(nodes)):
                ids = list(
                    conn.scalars(select(Job.record_id).where(Job.gpu_model == "", Job.node.in_(ch)))
                )
                conn.execute(
                    update(Job).where(Job.gpu_model == "", Job.node.in_(ch)).values(gpu_model=model)
                )
                for part in chunks(ids):
                    conn.execute(delete(EpisodeSource).where(EpisodeSource.record_id.in_(part)))
                filled += len(ids)
    return filled


def history_gpu_models(engine: Engine) -> dict[str, int]:
    """Records per GPU model ("" = unknown)."""
    require_schema(engine)
    with db_errors(engine), engine.connect() as conn:
        return {
            m: int(n)
            for m, n in conn.execute(select(Job.gpu_model, func.count()).group_by(Job.gpu_model))
        }


def site_gpu_models(engine: Engine) -> list[str]:
    """The GPU models named by the stored records or by an imported campaign, sorted."""
    require_schema(engine)
    with db_errors(engine), engine.connect() as conn:
        campaigns = set(conn.scalars(select(ClassSolo.gpu_model).distinct()))
    return sorted({m for m in set(history_gpu_models(engine)) | campaigns if m})

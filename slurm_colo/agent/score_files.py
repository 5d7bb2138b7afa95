"""The score files the agent reads: the site default set (``scores.path``) and, for every
GPU model of the ``[[gpus]]`` layouts, that model's own set when ``slurm-colo retrain``
made one (``live-<model>.json`` next to it, :func:`slurm_colo.scores.model_scores_path`).

:meth:`ScoreFiles.read` reads the files that changed since the last look (all of them
with ``force``); :func:`apply` puts what was read into the agent's live scores. A file that
cannot be read leaves the set in use as it was, and says why in the log and in
``slurm-colo status``; a model whose file is gone falls back to the site default.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..errors import ScoresError
from ..scores import ScoreTable, load_scores, model_scores_path
from .learned import LiveScores

log = logging.getLogger("slurm_colo.agent")


@dataclass(frozen=True)
class ScoreFile:
    """What one changed file held: ``model`` "" is the site default; ``table`` None with
    ``error`` None means the file is gone."""

    model: str
    path: Path
    table: ScoreTable | None
    error: str | None = None


class ScoreFiles:
    def __init__(self, cfg: Config) -> None:
        self.path = Path(cfg.scores.path)
        self.models = sorted({ng.model for ng in cfg.gpus if ng.model})
        #: each file as last read, by model ("" the site default): its modification time,
        #: inode and size, so a set renamed into place with an older time (``cp -p``,
        #: ``rsync -t``) is read too
        self._seen: dict[str, tuple[int, int, int] | None] = {}

    def read(self, force: bool = False) -> list[ScoreFile]:
        out = []
        for model in ["", *self.models]:
            path = model_scores_path(self.path, model)
            try:
                st = path.stat()
                seen: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_ino, st.st_size)
            except OSError:
                seen = None
            if not force and model in self._seen and seen == self._seen[model]:
                continue
            self._seen[model] = seen
            if model and seen is None:
                out.append(ScoreFile(model, path, None))
                continue
            try:
                out.append(ScoreFile(model, path, load_scores(path)))
            except ScoresError as e:
                out.append(ScoreFile(model, path, None, str(e)))
        return out


def apply(live: LiveScores, files: list[ScoreFile]) -> None:
    """Use what :meth:`ScoreFiles.read` read (the caller holds the agent's lock)."""
    for f in files:
        whose = f" for GPU model {f.model}" if f.model else ""
        if f.table is not None:
            if f.model:
                live.load_model(f.model, f.table)
                live.model_errors.pop(f.model, None)
            else:
                live.load(f.table)
                live.error = None
            log.info(
                "scores: loaded set %s%s (%d classes, %d pairs)",
                f.table.id,
                whose,
                len(f.table.classes),
                len(f.table.pairs),
            )
        elif f.error is None:  # a model's file is gone: the site default serves its GPUs
            if f.model in live.models:
                log.info("scores: %s is gone; GPU model %s uses the site default", f.path, f.model)
            live.load_model(f.model, None)
            live.model_errors.pop(f.model, None)
        else:
            kept = live.models.get(f.model) if f.model else live.table
            if f.model:
                live.model_errors[f.model] = f.error
            else:
                live.error = f.error
            log.error(
                "scores: %s; keeping set %s%s (unknown pairs use the conservative prior)",
                f.error,
                kept.id if kept is not None else "(the site default)",
                whose,
            )

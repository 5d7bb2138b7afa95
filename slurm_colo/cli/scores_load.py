"""``slurm-colo scores load``: validate a score file (or measured data) and make it live."""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import load_config
from ..errors import ColoError
from ..scores import load_scores, model_scores_path, publish_scores
from .spine import ConfigOpt


def register(app: typer.Typer) -> None:
    scores_app = _group(app)

    @scores_app.command("load")
    def load(
        file: Path | None = typer.Argument(
            None, help="A score file in format slurm-colo-scores/1."
        ),
        measured: str | None = typer.Option(
            None,
            "--measured",
            help="Instead of FILE: use the bundled measured pair data of this GPU type (v100, k80).",
        ),
        gpu_model: str = typer.Option(
            "",
            "--gpu-model",
            help="Publish it as this GPU model's own set (live-<model>.json next to "
            "scores.path; GPUs of that model in \\[\\[gpus]] are judged with it) instead of "
            "the site default.",
        ),
        config: Path | None = ConfigOpt,
    ) -> None:
        """Validate a score table and publish it atomically as the live set (the agent picks it up)."""
        cfg = load_config(config)
        if measured and file is not None:
            raise ColoError(f"give a score FILE or --measured {measured}, not both ({file})")
        if measured:
            from ..gavel import bundled_path, load_gavel
            from ..seed import table_from_measurements

            table = table_from_measurements(load_gavel(bundled_path(), measured))
        elif file is not None:
            table = load_scores(file, pipe=True)
        else:
            raise ColoError("give a score FILE or --measured GPU")
        if not table.classes and not table.pairs:
            raise ColoError(
                f"score set {table.id} has no classes and no pairs: it would replace the "
                "live set with one that knows nothing",
                hint="check the file (slurm-colo scores show --file FILE)",
            )
        if gpu_model and gpu_model not in {ng.model for ng in cfg.gpus}:
            known = ", ".join(sorted({ng.model for ng in cfg.gpus if ng.model})) or "none"
            raise ColoError(
                f"no [[gpus]] layout has model {gpu_model!r} (models configured: {known})",
                hint="use a model of the config's [[gpus]] tables, or leave --gpu-model out",
            )
        dest = publish_scores(table, model_scores_path(cfg.scores.path, gpu_model))
        if not table.pairs:  # class profiles alone may be meant: loaded, and said
            typer.echo(
                f"warning: score set {table.id} has no pairs: the agent judges every pair "
                "by its prior from the classes' profiles alone",
                err=True,
            )
        typer.echo(
            f"score set {table.id}: {len(table.classes)} classes, {len(table.pairs)} pairs -> {dest}"
        )


def _group(app: typer.Typer) -> typer.Typer:
    """The shared ``scores`` command group (other modules add commands to it)."""
    from . import groups

    return groups.get(app, "scores", "Compatibility score sets: load, show, export.")

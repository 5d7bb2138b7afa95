"""``slurm-colo retrain``: train, check and publish the site's score set(s), one per GPU
model on a site with several (slurm_colo/train/by_model.py), and say what happened to each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..config import Config, load_config
from .options import ConfigOpt, UrlOpt


def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def _engine(cfg: Config, url: str | None) -> Any:
    from ..store import make_engine

    return make_engine(url or cfg.store.url, cfg.store.busy_timeout_s)


def set_lines(res: Any) -> list[str]:
    """What a trained set is made of, its check and where it went (``RetrainResult``)."""
    t, info = res.table, res.info
    m = t.metrics
    lines = [
        (
            f"score set {t.id}: {len(t.classes)} classes, {len(t.pairs)} pairs, "
            f"{info.get('episodes', 0)} episodes ({info.get('records_built', 0)} new "
            f"record(s) built), {info.get('campaign_pairs', 0)} campaign pairs"
        ),
        (
            f"held-out MAE of n: {_f(m.get('holdout_mae'), '.4f')} on "
            f"{m.get('holdout_pairs', 0)} pairs; live set: {m.get('live_id') or '(none)'} "
            f"{_f(m.get('live_holdout_mae'), '.4f')}"
        ),
    ]
    left = info.get("classes_left_out", 0)
    if left:
        from ..contracts.options import ONE_OFF_CLASS_HINT

        lines.append(
            f"{left} class(es) with the least evidence left out ([scores] max_classes = "
            f"{info.get('max_classes')}): their jobs get the set's prior ({ONE_OFF_CLASS_HINT}; "
            '[placement] class_name_numbers = "strip" makes one class of a name\'s runs)'
        )
    runs = info.get("numbered_classes", 0)
    if runs:
        lines.append(
            f"{runs} class(es) differ only in a number at their name's end "
            f"({', '.join(info.get('numbered_examples', []))}, ...): [placement] "
            f'class_name_numbers = "strip" would make {info.get("numbered_kinds")} class(es) '
            "of them"
        )
    if res.published:
        lines.append(f"published -> {res.path} (live)")
    else:
        lines.append(f"dry run: {info.get('verdict')}")
    return lines


def report(run: Any) -> tuple[list[str], list[str]]:
    """(output lines, warning lines) for a ``SiteRetrain``."""
    out: list[str] = []
    err: list[str] = []
    if run.filled:
        out.append(f"{run.filled} older record(s) given the GPU model of their node ([[gpus]])")
    for o in run.outcomes:
        name = f"GPU model {o.gpu_model}" if o.gpu_model else "site default set"
        if run.mixed:
            out.append(f"{name}: {o.pairs} measured class pair(s)")
        if o.skipped:
            out.append(f"  {o.skipped}; its GPUs keep their set (else the site default)")
        elif o.error:
            err.append(f"{name}: {o.error}")
        elif o.result is not None:
            out += [("  " if run.mixed else "") + line for line in set_lines(o.result)]

    def most(key: str) -> int:
        """The largest count ``key`` of the sets trained (each read the same history)."""
        return max((o.result.info.get(key, 0) for o in run.outcomes if o.result), default=0)

    skewed = most("skewed_intervals")
    if skewed:
        err.append(f"warning: {skewed} co-runner interval(s) ignored (clock skew)")
    stepped = most("clock_stepped_records")
    if stepped:
        err.append(
            f"warning: {stepped} record(s) ran across a step of their node's clock: no "
            "figures taken from them (check the nodes' time synchronisation: slurm-colo doctor)"
        )
    if run.also_in_history:
        err.append(
            "note: the history also has GPU model(s) "
            f"{', '.join(run.also_in_history)}; one set was trained for all of them "
            "(leave [scores] gpu_model empty, or use --gpu, for one set per model)"
        )
    return out, err


def register_retrain(app: typer.Typer) -> None:
    @app.command("retrain")
    def retrain_cmd(
        gpu: str | None = typer.Option(
            None,
            "--gpu",
            help="Train only this GPU model's set (default: one set per GPU model the "
            "history and imported campaigns name, besides the site default).",
        ),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Train and validate, publish nothing."
        ),
        force: bool = typer.Option(
            False, "--force", help="Publish even if the held-out check regresses."
        ),
        out: Path | None = typer.Option(
            None,
            "--out",
            help="Publish here instead of \\[scores] path (per-model sets next to it).",
        ),
        rebuild: bool = typer.Option(
            False,
            "--rebuild",
            help="Rebuild every co-location episode "
            "from the job records (default: only those of new records).",
        ),
        url: str | None = UrlOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """Retrain compatibility scores from the history (nightly); publish only if they validate."""
        from slurm_colo.train.by_model import retrain_site

        cfg = load_config(config)
        run = retrain_site(
            _engine(cfg, url), cfg, gpu=gpu, dry_run=dry_run, force=force, path=out, rebuild=rebuild
        )
        lines, warnings = report(run)
        for line in lines:
            typer.echo(line)
        for line in warnings:
            typer.echo(line, err=True)
        if run.failed:
            raise typer.Exit(2)

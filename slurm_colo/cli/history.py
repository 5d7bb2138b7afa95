"""History and model commands: db upgrade/status, history (query, import, ingest), retrain
(:mod:`.retrain`), scores export/show/heatmap, model evaluate."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from ..config import Config, load_config
from ..errors import ColoError, ModelError
from .options import ConfigOpt, UrlOpt
from .retrain import register_retrain

ScoreFileOpt = typer.Option(
    None, "--file", help="Score file (default: the live set, \\[scores] path)."
)


def _engine(cfg: Config, url: str | None, create: bool = True) -> Any:
    from ..store import make_engine

    return make_engine(url or cfg.store.url, cfg.store.busy_timeout_s, create)


def _ts(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def _f(v: Any, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def _load_table(cfg: Config, file: Path | None) -> Any:
    from ..scores import load_scores

    return load_scores(file, pipe=True) if file else load_scores(cfg.scores.path)


def register(app: typer.Typer) -> None:
    _register_db(app)
    _register_history(app)
    register_retrain(app)
    _register_scores(app)
    _register_model(app)


def _register_db(app: typer.Typer) -> None:
    db_app = typer.Typer(help="History database: schema upgrade and status.", no_args_is_help=True)
    app.add_typer(db_app, name="db")

    @db_app.command("upgrade")
    def upgrade_cmd(url: str | None = UrlOpt, config: Path | None = ConfigOpt) -> None:
        """Create the history database or migrate it to this version's schema."""
        from ..store import upgrade
        from ..store.engine import safe_url

        cfg = load_config(config)
        engine = _engine(cfg, url)
        before, after = upgrade(engine)
        if before == after:
            typer.echo(f"{safe_url(engine)}: schema {after} (already up to date)")
        else:
            typer.echo(f"{safe_url(engine)}: schema {before or '(empty)'} -> {after}")

    @db_app.command("status")
    def status_cmd(url: str | None = UrlOpt, config: Path | None = ConfigOpt) -> None:
        """Print the schema revision and row counts; exit non-zero if an upgrade is needed."""
        from ..store import current_revision, head_revision, require_schema
        from ..store.engine import safe_url
        from ..store.queries import counts

        cfg = load_config(config)
        engine = _engine(cfg, url, create=False)
        typer.echo(
            f"{safe_url(engine)}: schema {current_revision(engine) or '(none)'}, "
            f"this version needs {head_revision()}"
        )
        require_schema(engine)
        typer.echo(", ".join(f"{k}: {v}" for k, v in counts(engine).items()))


def _register_history(app: typer.Typer) -> None:
    hist = typer.Typer(
        help="Job history: query, import profiling campaigns, ingest the spool.",
        invoke_without_command=True,
        no_args_is_help=False,
    )
    app.add_typer(hist, name="history")

    @hist.callback()
    def query(
        ctx: typer.Context,
        user: str | None = typer.Option(None, "--user", "-u", help="Only this user's jobs."),
        cls: str | None = typer.Option(None, "--class", help="Only jobs of this class."),
        node: str | None = typer.Option(None, "--node", "-n", help="Only jobs on this node."),
        gpu: str | None = typer.Option(
            None, "--gpu", help="Only jobs that ran on this GPU model (v100; '' for unknown)."
        ),
        since: str | None = typer.Option(None, "--since", help="Ended after: 2026-11-01, 7d, 12h."),
        until: str | None = typer.Option(None, "--until", help="Started before (same forms)."),
        limit: int = typer.Option(
            50, "--limit", min=1, max=10_000_000, help="At most this many jobs, newest first."
        ),
        as_json: bool = typer.Option(False, "--json", help="JSON lines instead of a table."),
        url: str | None = UrlOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """Show recorded jobs (filters: --user, --class, --node, --gpu, --since, --until)."""
        if ctx.invoked_subcommand:
            return
        from ..store.queries import parse_when, query_jobs

        cfg = load_config(config)
        rows = query_jobs(
            _engine(cfg, url),
            user,
            cls,
            node,
            parse_when(since) if since else None,
            parse_when(until) if until else None,
            limit,
            gpu,
        )
        if as_json:
            for r in rows:
                typer.echo(json.dumps(r))
            return
        typer.echo(
            f"{'JOBID':>9} {'USER':10} {'CLASS':22} {'NODE':10} {'GPU':6} {'START (UTC)':16} "
            f"{'MIN':>7} {'SHARED':6} {'CO':>3} {'SM':>5} {'MEMGiB':>6} STATE"
        )
        for r in rows:
            mins = (r["end_time"] - r["start_time"]) / 60.0
            typer.echo(
                f"{r['job_id']:>9} {r['user'][:10]:10} {r['cls'][:22]:22} {r['node'][:10]:10} "
                f"{(r['gpu_model'] or '-')[:6]:6} "
                f"{_ts(r['start_time']):16} {mins:7.1f} {('yes' if r['shared'] else 'no'):6} "
                f"{r['co_runners']:>3} {_f(r['sm_util_mean']):>5} {_f(r['mem_peak_gib'], '.1f'):>6} "
                f"{r['state']}{' MPS-FAULT' if r['mps_fault'] else ''}"
            )
        if not rows:
            typer.echo("(no jobs match)")

    @hist.command("import")
    def import_cmd(
        gavel: Path | None = typer.Option(
            None,
            "--gavel",
            help="Measured throughputs in "
            "Gavel's format (default: the copy bundled with "
            "slurm-colo).",
        ),
        gpu: str = typer.Option(
            ...,
            "--gpu",
            help="GPU type to import: any GPU key of the "
            "file (the bundled file has v100 and k80); it becomes the "
            "campaign's GPU model (retrain --gpu). A key the file lacks is "
            "an error that lists the keys it has.",
        ),
        url: str | None = UrlOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """Bootstrap observations from a profiling campaign (replaces an earlier import)."""
        from ..gavel import bundled_path, load_gavel
        from ..store.scoresets import import_gavel

        cfg = load_config(config)
        data = load_gavel(gavel or bundled_path(), gpu)
        n_cls, n_pairs = import_gavel(_engine(cfg, url), data)
        typer.echo(
            f"imported gavel:{gpu}: {n_cls} classes, {n_pairs} pairs "
            f"({len({tuple(sorted(p)) for p in data.never})} never, pairs not measured are left out)"
        )
        if data.no_solo:
            typer.echo(data.left_out(), err=True)

    @hist.command("ingest")
    def ingest_cmd(
        spool: Path | None = typer.Option(
            None, "--spool", help="Spool directory (default: \\[node] spool_dir)."
        ),
        delete: bool = typer.Option(
            False, "--delete", help="Delete ingested files instead of moving them to done/."
        ),
        url: str | None = UrlOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """Ingest the per-job record files of a spool directory (idempotent)."""
        from ..spool.ingest import ingest_spool

        cfg = load_config(config)
        res = ingest_spool(_engine(cfg, url), spool or cfg.node.spool_dir, keep_done=not delete)
        typer.echo(res.summary())
        for name, why in res.bad:
            typer.echo(f"  bad: {name}: {why}", err=True)


def _register_scores(app: typer.Typer) -> None:
    from . import groups

    scores_app = groups.get(app, "scores", "Compatibility score sets: load, show, export.")

    @scores_app.command("export")
    def export_cmd(
        as_json: bool = typer.Option(True, "--json/--csv", help="JSON (default) or CSV."),
        file: Path | None = ScoreFileOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """Every pair of known classes: predicted n of each member, S, delta, uncertainty."""
        from ..model.report import export_rows

        t = _load_table(load_config(config), file)
        rows = export_rows(t)
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "score_set": t.id,
                        "gpu_model": t.gpu_model,
                        "created": t.created,
                        "pairs": rows,
                    },
                    indent=1,
                )
            )
        else:
            keys = list(rows[0]) if rows else ["a", "b"]
            typer.echo(",".join(keys))
            for r in rows:
                typer.echo(",".join(str(r[k]) for k in keys))

    @scores_app.command("show")
    def show_cmd(
        cls: str | None = typer.Option(None, "--class", help="Only pairs with this class."),
        sort: str = typer.Option("delta", "--sort", help="delta, S or sd."),
        limit: int = typer.Option(40, "--limit", min=0, help="At most this many rows (0: all)."),
        file: Path | None = ScoreFileOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """A table of the live score set, best pairs first."""
        from ..model.report import export_rows, text_report

        if sort not in ("delta", "S", "sd"):
            raise ColoError(f"--sort {sort!r}: use delta, S or sd")
        t = _load_table(load_config(config), file)
        rows = [r for r in export_rows(t) if cls is None or cls in (r["a"], r["b"])]
        rows.sort(key=lambda r: (r["never"], -r[sort] if sort != "sd" else r[sort]))
        typer.echo(text_report(t))
        typer.echo(f"{'A':24} {'B':24} {'n_a':>5} {'n_b':>5} {'S':>5} {'delta':>5} {'sd':>5} data")
        for r in rows[: limit or None]:
            tag = "never" if r["never"] else ("observed" if r["observed"] else "predicted")
            typer.echo(
                f"{r['a'][:24]:24} {r['b'][:24]:24} {r['n_a']:5.2f} {r['n_b']:5.2f} {r['S']:5.2f} "
                f"{r['delta']:5.2f} {r['sd']:5.2f} {tag}"
            )

    @scores_app.command("heatmap")
    def heatmap_cmd(
        out: Path = typer.Option(..., "--out", help="PNG file to write."),
        metric: str = typer.Option("delta", "--metric", help="delta or S."),
        file: Path | None = ScoreFileOpt,
        config: Path | None = ConfigOpt,
    ) -> None:
        """Draw a classes x classes heatmap (PNG) and print a short text report."""
        from ..model.report import text_report

        if metric not in ("delta", "S"):
            raise ColoError(f"--metric {metric!r}: use delta or S")
        if out.suffix.lower() != ".png":  # matplotlib picks the format by the suffix
            raise ColoError(f"--out {out}: give a file name ending in .png")
        t = _load_table(load_config(config), file)
        _heatmap(t, metric, out)
        typer.echo(text_report(t))
        typer.echo(f"heatmap of {metric} -> {out}")


def _heatmap(table: Any, metric: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..model.report import matrix

    cl, m = matrix(table, metric)
    if not cl:
        raise ModelError(f"score set {table.id} has no classes to draw")
    size = max(5.0, 0.28 * len(cl) + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="#404040")
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmin=0.0, vmax=2.0)
    ax.set_xticks(range(len(cl)), cl, rotation=90, fontsize=7)
    ax.set_yticks(range(len(cl)), cl, fontsize=7)
    ax.set_title(f"{metric} of each pair, score set {table.id} (grey: never)", fontsize=9)
    fig.colorbar(im, ax=ax, label=metric)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise ColoError(f"cannot write {out}: {e.strerror}") from None
    finally:
        plt.close(fig)


def _register_model(app: typer.Typer) -> None:
    model_app = typer.Typer(help="Compatibility model: offline evaluation.", no_args_is_help=True)
    app.add_typer(model_app, name="model")

    @model_app.command("evaluate")
    def evaluate_cmd(
        gpu: str = typer.Option(
            "v100",
            "--gpu",
            help="GPU type of the measured data: any GPU "
            "key of the file (the bundled file has v100 and k80).",
        ),
        hide: float = typer.Option(
            0.3, "--hide", help="Share of measured pairs hidden from training."
        ),
        seeds: int = typer.Option(5, "--seeds", help="Number of seeded splits to average (1-100)."),
        gavel: Path | None = typer.Option(
            None,
            "--gavel",
            help="Measured throughputs in Gavel's format (default: the bundled file).",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """Hide a seeded share of measured pairs, train on the rest, score the hidden ones."""
        from ..gavel import bundled_path, load_gavel
        from ..model.evaluate import evaluate

        data = load_gavel(gavel or bundled_path(), gpu)
        if data.no_solo:
            typer.echo(data.left_out(), err=True)
        res = evaluate(data, hide=hide, seeds=seeds)
        if as_json:
            typer.echo(
                json.dumps({"gpu": gpu, "hide": hide, "seeds": seeds, "results": res}, indent=1)
            )
            return
        typer.echo(
            f"{gpu}: {len(data.unordered_pairs())} measured pairs, {hide:.0%} hidden, "
            f"{seeds} seed(s); mean over seeds (sd)"
        )
        typer.echo(
            f"{'predictor':28} {'MAE n':>14} {'Spearman S':>14} {'acc S>1':>14} {'acc delta>1':>14}"
        )
        for name, m in res.items():
            cells = [
                f"{m[k]:.3f} ({m[k + '_sd']:.3f})"
                for k in ("mae_n", "spearman_s", "acc_s_gt_1", "acc_delta_gt_1")
            ]
            typer.echo(f"{name:28} " + " ".join(f"{c:>14}" for c in cells))

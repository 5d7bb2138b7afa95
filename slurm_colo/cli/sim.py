"""``slurm-colo simulate``: compare sharing policies on a job trace (Philly-like or sacct)."""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

import typer

from ..config import PlacementConfig, load_config
from ..contracts.enums import CrossUser, Undo, Unplaced
from ..errors import ColoError, ScoresError
from ..fsutil import atomic_write_bytes
from ..gavel import GavelData, bundled_path, load_gavel
from ..scores import ScoreTable
from ..sim.metrics import Result
from ..sim.spread import SeedRow

_SACCT = typer.Option(
    None,
    "--sacct",
    help="Replay a `sacct --parsable2` export instead of "
    "generating a Philly-like trace (see docs/simulator.md).",
)
_OUT = typer.Option(
    None, "--out", "-o", help="Directory for results.md, results.json, per-job CSV and PNG plots."
)
_CONFIG = typer.Option(
    None,
    "--config",
    "-c",
    help="Site config whose \\[placement] section the policy uses (default: built-in defaults).",
)
_GAVEL = typer.Option(
    None,
    "--gavel",
    help="Measured co-location throughputs in Gavel's format "
    "(JSON: GPU type -> job type -> solo and pair rates, see docs/simulator.md) "
    "instead of the bundled V100/K80 file: the simulation's ground truth and "
    "the data its model is trained on.",
)
_GPU = typer.Option(
    "v100",
    "--gpu",
    help="GPU type of the measured data: any GPU key of the "
    "--gavel file (the bundled file has v100 and k80); a key the file lacks is "
    "an error that lists the keys it has.",
)
_SCORES = typer.Option(
    None,
    "--scores",
    help="A score set (slurm-colo-scores/1 JSON, e.g. the "
    "live set or the output of `slurm-colo retrain --out`) that ours and "
    "ours-submit start from, instead of a model trained on part of the "
    "measured pairs (--hidden-share is then unused); they still learn from "
    "their probes. Classes of the measured data the set lacks are named in a "
    "warning and handled as the live agent handles them: their pairs are "
    "shared only when explored or aggressive. A set with none of the "
    "data's classes is refused (it is for other jobs).",
)


E = TypeVar("E", bound=StrEnum)


def _word(kind: type[E], option: str, value: str) -> E:
    """One of the words of ``kind`` (a placement setting's enum), or a clear error."""
    try:
        return kind(value)
    except ValueError:
        accepted = ", ".join(m.value for m in kind)
        from ..sim.engine import SimError

        raise SimError(f"{option} {value!r}: accepted values are {accepted}") from None


#: jobs one simulated GPU may hold: MPS serves at most 48 clients per GPU (Volta and later)
MAX_SLOTS = 48

#: the largest campaign ``simulate`` generates: a typo of a few zeros must fail at once,
#: not fill the memory for an hour
MAX_SIZES = {"jobs": 1_000_000, "gpus": 100_000, "users": 100_000, "slots": MAX_SLOTS}


def _check_sizes(**sizes: int) -> None:
    from ..sim.engine import SimError

    for name, n in sizes.items():
        if n > MAX_SIZES[name]:
            raise SimError(f"--{name} {n}: at most {MAX_SIZES[name]:,}")


def _check_numbers(
    load: float, seed: int, hidden_share: float, aggressive_share: float, max_duration_h: float
) -> None:
    """The trace options' ranges, checked before anything runs (a NaN load never ends)."""
    from ..sim.engine import SimError

    if not 0.01 <= load <= 100:
        raise SimError(f"--load {load:g}: give an offered load from 0.01 to 100")
    if seed < 0:
        raise SimError(f"--seed {seed}: give a non-negative seed")
    if not 0 <= hidden_share < 1:
        raise SimError(
            f"--hidden-share {hidden_share:g}: give a share from 0 to below 1 "
            "(the model must see some pairs)"
        )
    if not 0 <= aggressive_share <= 1:
        raise SimError(f"--aggressive-share {aggressive_share:g}: give a share from 0 to 1")
    if not 0 <= max_duration_h < math.inf:
        raise SimError(f"--max-duration-h {max_duration_h:g}: give hours, 0 for no cap")


def _limit_factors(text: str) -> tuple[float, float]:
    """``--time-limits``: ``LOW-HIGH`` or one factor (both ends the same)."""
    from ..sim.engine import SimError

    low, sep, high = text.strip().partition("-")
    try:
        lo = float(low)
        hi = float(high) if sep else lo
    except ValueError:
        raise SimError(
            f"--time-limits {text!r}: give LOW-HIGH factors of the solo duration, e.g. 1-3"
        ) from None
    if not 1.0 <= lo <= hi < math.inf:
        raise SimError(
            f"--time-limits {text!r}: give finite 1 <= LOW <= HIGH (a limit covers the run)"
        )
    return lo, hi


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        sacct: Path = _SACCT,
        jobs: int = typer.Option(10000, help="Jobs to generate (at most 1,000,000)."),
        gpus: int = typer.Option(256, help="GPUs in the simulated cluster (at most 100,000)."),
        load: float = typer.Option(
            1.5,
            help="Offered load: GPU-seconds of work arriving per second, "
            "over the GPU count (above 1 jobs queue).",
        ),
        seed: int = typer.Option(1, help="Seed of the trace, the pair split and random policies."),
        seeds: str = typer.Option(
            "",
            help="Run every seed of this list instead (1-10, 1,4,7) "
            "and print how each policy's figures spread over them (at most 100 seeds).",
        ),
        users: int = typer.Option(
            16, help="Users the generated jobs are spread over (at most 100,000)."
        ),
        multi_gpu: bool = typer.Option(
            False, "--multi-gpu", help="Keep Philly's multi-GPU jobs (always given whole GPUs)."
        ),
        max_duration_h: float = typer.Option(
            48.0, help="Cap on a job's solo duration, hours (0: Philly's full tail, up to 60 days)."
        ),
        aggressive_share: float = typer.Option(
            0.0, help="Share of jobs submitted with --colocate=aggressive."
        ),
        time_limits: str = typer.Option(
            "",
            help="Give the generated jobs time limits: LOW-HIGH (or one factor) times "
            "their solo duration, a seeded draw per job; the table then counts the jobs "
            "run past them. A --sacct export's own limits come from its Timelimit column.",
        ),
        policies: str = typer.Option(
            ",".join(_policies()),
            help="Comma-separated policies. Also known: oracle-error, the oracle with "
            "every measured throughput off by up to --oracle-error.",
        ),
        oracle_error: float = typer.Option(
            1.0,
            help="Error of the oracle-error policy, percent: each measured throughput "
            "it knows is off by a seeded factor within ± this.",
        ),
        cross_user: str = typer.Option(
            "",
            help="Override placement.cross_user: never (MPS, "
            "same user only) or shard (users may mix).",
        ),
        undo: str = typer.Option(
            "",
            help="Override placement.undo for ours and ours-submit: requeue "
            "(a harmful set's newest job is requeued after its probe) or "
            "off (it runs on).",
        ),
        unplaced: str = typer.Option(
            "",
            help="Override placement.unplaced for ours-submit: "
            "own-gpu (a job no GPU takes at arrival waits for a whole "
            "GPU) or hold (it waits, held, for any GPU that takes it; "
            "what auto gives, every simulated GPU being shared).",
        ),
        gpu_memory_gib: float = typer.Option(
            0.0,
            help="Memory of each simulated GPU, GiB; 0: the "
            "GPU model's (v100 32, k80 12, p100 16, a100 80; "
            "16 for a model not known). Our policies share a "
            "GPU only while the jobs' memory (the score set's "
            "class profile, else placement.default_memory_share "
            "of the GPU's memory) fits under it, less "
            "placement.memory_headroom; the baselines check no "
            "memory.",
        ),
        slots: int = typer.Option(
            4, help="Jobs one GPU may hold (shards per GPU), at most 48 (MPS's clients per GPU)."
        ),
        hidden_share: float = typer.Option(
            0.3, help="Share of measured pairs hidden from the model (it must predict them)."
        ),
        gpu: str = _GPU,
        gavel: Path = _GAVEL,
        scores: Path = _SCORES,
        out: Path = _OUT,
        config: Path = _CONFIG,
    ) -> None:
        """Simulate our policy against exclusive, Gandiva-random and an oracle on one trace.

        Runs exclusive, untargeted-shard, Gandiva-random, our policy and an oracle side by side; prints makespan, JCT, slowdown, GPU-hours and harmful sharing."""
        from ..sim.engine import SimConfig, SimError
        from ..sim.metrics import table, versus
        from ..sim.run import KNOWN_POLICIES, Setup
        from ..sim.run import simulate as run_all
        from ..sim.spread import parse_seeds, per_seed_table, seed_rows, spread_table
        from ..sim.trace import (
            SacctSkipped,
            offered_load,
            philly_trace,
            read_philly,
            read_sacct,
            with_time_limits,
        )

        names = [p.strip() for p in policies.split(",") if p.strip()]
        bad = [p for p in names if p not in KNOWN_POLICIES]
        if bad:
            raise SimError(f"unknown policy {bad[0]!r}; known: {', '.join(KNOWN_POLICIES)}")
        if not names:
            raise SimError(f"--policies names no policy; known: {', '.join(KNOWN_POLICIES)}")
        _check_sizes(jobs=jobs, gpus=gpus, users=users, slots=slots)
        _check_numbers(
            load=load,
            seed=seed,
            hidden_share=hidden_share,
            aggressive_share=aggressive_share,
            max_duration_h=max_duration_h,
        )
        if not 0 <= oracle_error < 100:
            raise SimError(
                f"--oracle-error {oracle_error:g}: give a percentage from 0 to below 100"
            )
        pcfg = load_config(config, missing_ok=False).placement if config else PlacementConfig()
        if cross_user:
            pcfg = replace(pcfg, cross_user=_word(CrossUser, "--cross-user", cross_user))
        if undo:
            pcfg = replace(pcfg, undo=_word(Undo, "--undo", undo))
        if unplaced:
            pcfg = replace(pcfg, unplaced=_word(Unplaced, "--unplaced", unplaced))
        if not gpu_memory_gib >= 0 or gpu_memory_gib == float("inf"):
            raise SimError(
                f"--gpu-memory-gib {gpu_memory_gib:g}: give a positive size in GiB "
                "(0: the GPU model's)"
            )
        if out:
            _check_out(out)  # before the runs, which can take many minutes
        data = load_gavel(gavel or bundled_path(), gpu)
        from ..sim.campaigns import gpu_memory_gib as model_memory

        gpu_memory_gib = gpu_memory_gib or model_memory(data.gpu)
        score_set = _score_set(scores, data) if scores else None
        typer.echo(
            f"{data.gpu} data of {gavel or 'the bundled file'}: {len(data.classes)} "
            f"classes, {len(data.unordered_pairs())} measured pairs; our policies use "
            + (
                f"score set {score_set.id} of {scores}"
                if score_set is not None
                else f"a model trained on {1 - hidden_share:.0%} of the pairs"
            ),
            err=True,
        )
        if data.no_solo:
            typer.echo(data.left_out(), err=True)
        seed_list = parse_seeds(seeds) if seeds else [seed]
        limit_factors = _limit_factors(time_limits) if time_limits else None
        if limit_factors is not None and sacct:
            raise SimError("--time-limits is for generated traces: a --sacct export has its own")
        per_seed: dict[int, list[Result]] = {}
        # a site's export is the same trace for every seed (the seed then changes the pair
        # split and the random choices); the Philly rows are read once too
        skipped = SacctSkipped()
        imported = read_sacct(sacct, data.classes, skipped) if sacct else None
        if imported is not None and skipped.text():
            typer.echo(f"{sacct}: {len(imported):,} GPU jobs; left out {skipped.text()}", err=True)
        philly = None if sacct else read_philly(bundled_path("philly_job_distribution.csv"))
        for s in seed_list:
            if imported is not None:
                trace = imported
            else:
                assert philly is not None
                trace = philly_trace(
                    philly,
                    data.classes,
                    jobs=jobs,
                    gpus=gpus,
                    load=load,
                    seed=s,
                    users=users,
                    multi_gpu=multi_gpu,
                    max_duration_s=max_duration_h * 3600 or None,
                    aggressive_share=aggressive_share,
                )
                if limit_factors is not None:
                    trace = with_time_limits(trace, *limit_factors, seed=s)
            setup = Setup(
                SimConfig(
                    gpus=gpus,
                    gpu_memory_gib=gpu_memory_gib,
                    gpu_model=data.gpu,
                    slots=slots,
                    seed=s,
                ),
                pcfg,
                hidden_share=hidden_share,
                oracle_error=oracle_error / 100,
            )
            typer.echo(
                f"{len(trace)} jobs on {gpus} GPUs, offered load "
                f"{offered_load(trace, gpus):.2f}, cross_user={pcfg.cross_user}, "
                f"seed {s}",
                err=True,
            )
            per_seed[s] = run_all(trace, data, setup, names, scores=score_set)
            if not seeds:
                typer.echo(table(per_seed[s], markdown=False))
                typer.echo(versus(per_seed[s]))
        rows = seed_rows(per_seed) if seeds else []
        if seeds:
            typer.echo(per_seed_table(rows, markdown=False))
            typer.echo()
            typer.echo(spread_table(rows, markdown=False))
            typer.echo()
            typer.echo("\n".join(_head_to_head(rows, names)))
        if out:
            cmd = ["slurm-colo simulate"]
            if sacct:
                cmd.append(f"--sacct {shlex.quote(str(sacct))}")
            else:
                cmd.append(
                    f"--jobs {jobs} --load {load:g} --users {users} "
                    f"--max-duration-h {max_duration_h:g}"
                )
                if multi_gpu:
                    cmd.append("--multi-gpu")
                if aggressive_share:
                    cmd.append(f"--aggressive-share {aggressive_share:g}")
                if limit_factors is not None:
                    cmd.append(f"--time-limits {limit_factors[0]:g}-{limit_factors[1]:g}")
            cmd.append(
                f"--gpus {gpus} "
                + (f"--seeds {seeds} " if seeds else f"--seed {seed} ")
                + f"--cross-user {pcfg.cross_user} "
                f"--undo {pcfg.undo} --unplaced {pcfg.unplaced} "
                f"--slots {slots} --gpu-memory-gib {gpu_memory_gib:g} "
                f"--hidden-share {hidden_share:g} --policies {','.join(names)} "
                f"--gpu {shlex.quote(gpu)}"
            )
            if "oracle-error" in names:
                cmd.append(f"--oracle-error {oracle_error:g}")
            if gavel:
                cmd.append(f"--gavel {shlex.quote(str(gavel))}")
            if scores:
                cmd.append(f"--scores {shlex.quote(str(scores))}")
            if config:
                cmd.append(f"--config {shlex.quote(str(config))}")
            if seeds:
                _write_seeds(out, rows, " ".join(cmd))
            else:
                results = per_seed[seed]
                _write(out, results, " ".join(cmd), table(results), versus(results))
            typer.echo(
                f"results written to {out}" if seeds else f"results and plots written to {out}",
                err=True,
            )


def _score_set(path: Path, data: GavelData) -> ScoreTable:
    """The score set of ``--scores``; every defect is a :class:`ScoresError` naming the file.
    Classes of ``data`` it lacks are warned about (the policies treat them as the live agent
    does: no data); a set with none of them is refused."""
    from ..scores import load_scores
    from ..sim.run import missing_classes, unscored_pairs

    try:
        table = load_scores(path, pipe=True)
    except UnicodeDecodeError:
        raise ScoresError(f"score file {path} is corrupt (not UTF-8 text)") from None
    except ScoresError as e:
        if f"score file {path}" in e.message:
            raise
        msg = e.message.removeprefix(f"{path}: ")  # scores_from_dict names the path alone
        raise ScoresError(f"score file {path}: {msg}", hint=e.hint) from None
    missing = missing_classes(table, data.classes)
    if len(missing) == len(data.classes):
        theirs = sorted(set(table.classes) | {c for p in table.pairs for c in p})
        raise ScoresError(
            f"score file {path} (score set {table.id}) has none of the "
            f"{len(data.classes)} classes of the {data.gpu} data "
            f"({_names(data.classes)}); it has: {_names(theirs) or 'no classes'}"
        )
    if missing:
        typer.echo(
            f"warning: score set {table.id} ({path}) lacks {len(missing)} of the "
            f"{len(data.classes)} classes of the {data.gpu} data: {_names(missing)}; "
            f"our policies have no data on their pairs",
            err=True,
        )
    n = len(data.classes) * (len(data.classes) + 1) // 2
    lacking = unscored_pairs(table, data.classes)
    if lacking and not missing:
        typer.echo(
            f"warning: score set {table.id} ({path}) has no score for {lacking} of the "
            f"{n} pairs of the {data.gpu} data's classes",
            err=True,
        )
    if table.gpu_model and table.gpu_model != data.gpu:
        typer.echo(
            f"warning: score set {table.id} ({path}) is for GPU type "
            f"{table.gpu_model!r}, the measured data for {data.gpu!r}",
            err=True,
        )
    return table


def _names(names: list[str], most: int = 8) -> str:
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")


def _policies() -> list[str]:
    from ..sim.run import POLICIES

    return list(POLICIES)


def _check_out(out: Path) -> None:
    """The ``--out`` directory, made now and checked writable: a simulation can run for
    many minutes, and its results were lost when only the write at the end found out."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ColoError(f"--out {out}: not a directory") from None
    except OSError as e:
        raise ColoError(f"--out {out}: cannot make the directory: {e.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ColoError(f"--out {out}: the directory is not writable")


def _write(out: Path, results: list[Result], cmd: str, md: str, vs: str) -> None:
    from ..sim.plots import render_plots

    files = {
        "results.md": f"```\n{cmd}\n```\n\n{md}\n\n```\n{vs}\n```\n".encode(),
        "results.json": json.dumps([r.row() for r in results], indent=1).encode(),
        "jobs.csv": "".join(
            ["policy,job,cls,user,jct_s,slowdown,stretch\n"]
            + [
                f"{r.policy},{i},{r.per_job['cls'][i]},{r.per_job['user'][i]},"
                f"{r.per_job['jct_s'][i]:.1f},{r.per_job['slowdown'][i]:.4f},"
                f"{r.per_job['stretch'][i]:.4f}\n"
                for r in results
                for i in range(len(r.per_job["jct_s"]))
            ]
        ).encode(),
        **render_plots(results),
    }
    _write_files(out, files)


def _write_files(out: Path, files: dict[str, bytes]) -> None:
    """Each file written beside its name and renamed into place (a symlink planted under a
    name is replaced, not written through), with the mode the umask gives a new file."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            atomic_write_bytes(out / name, data, mode=0o666 & ~umask, fsync=False)
    except OSError as e:
        raise ColoError(f"cannot write results to {out}: {e.strerror}") from None


def _head_to_head(rows: list[SeedRow], names: list[str]) -> list[str]:
    """Our policies against the sharing baselines, seed by seed."""
    from ..sim.spread import head_to_head

    lines = [
        head_to_head(rows, p, q)
        for p in ("ours-submit", "ours")
        if p in names
        for q in ("gandiva-random", "slurm-shard")
        if q in names
    ]
    return [ln for ln in lines if ln]


def _write_seeds(out: Path, rows: list[SeedRow], cmd: str) -> None:
    from ..sim.spread import per_seed_table, rows_json, spread_table

    names = list(dict.fromkeys(r.policy for r in rows))
    h2h = "".join(f"- {ln}\n" for ln in _head_to_head(rows, names))
    seeds_md = (
        f"```\n{cmd}\n```\n\nMakespan / average JCT against exclusive FIFO, per seed:\n\n"
        f"{per_seed_table(rows)}\n\nMean (best .. worst seed):\n\n{spread_table(rows)}\n"
        + (
            f"\nSeed by seed (makespan, average and p99 JCT, average and worst-decile "
            f"slowdown, GPU-hours, harmful share, worst class):\n\n{h2h}"
            if h2h
            else ""
        )
    )
    _write_files(
        out,
        {
            "seeds.md": seeds_md.encode(),
            "seeds.json": json.dumps(rows_json(rows), indent=1).encode(),
        },
    )

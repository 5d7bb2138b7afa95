"""``slurm-colo simulate``: compare sharing policies on a job trace (Philly-like or sacct).

The options' checks are in :mod:`.sim_inputs`, what is written under ``--out`` in
:mod:`.sim_out`; the simulator itself is ``slurm_colo.sim``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..gavel import GavelData, bundled_path, load_gavel
from .sim_inputs import (
    TraceOptions,
    check_numbers,
    check_percent_and_memory,
    check_sizes,
    placement_settings,
    policy_names,
    score_set,
)
from .sim_out import check_out, head_to_head_lines, replay_command, write_results, write_seeds

if TYPE_CHECKING:
    from ..sim.metrics import Result
    from ..sim.trace import SimJob

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
        from ..sim.campaigns import gpu_memory_gib as model_memory
        from ..sim.engine import SimConfig
        from ..sim.metrics import table, versus
        from ..sim.run import KNOWN_POLICIES, Setup
        from ..sim.run import simulate as run_all
        from ..sim.spread import parse_seeds, per_seed_table, seed_rows, spread_table
        from ..sim.trace import offered_load

        names = policy_names(policies, list(KNOWN_POLICIES))
        check_sizes(jobs=jobs, gpus=gpus, users=users, slots=slots)
        check_numbers(
            load=load,
            seed=seed,
            hidden_share=hidden_share,
            aggressive_share=aggressive_share,
            max_duration_h=max_duration_h,
        )
        check_percent_and_memory(oracle_error, gpu_memory_gib)
        pcfg = placement_settings(config, cross_user, undo, unplaced)
        opts = TraceOptions.checked(
            sacct, jobs, load, users, multi_gpu, max_duration_h, aggressive_share, time_limits
        )
        if out:
            check_out(out)  # before the runs, which can take many minutes
        data = load_gavel(gavel or bundled_path(), gpu)
        gpu_memory_gib = gpu_memory_gib or model_memory(data.gpu)
        scored = score_set(scores, data) if scores else None
        typer.echo(
            f"{data.gpu} data of {gavel or 'the bundled file'}: {len(data.classes)} "
            f"classes, {len(data.unordered_pairs())} measured pairs; our policies use "
            + (
                f"score set {scored.id} of {scores}"
                if scored is not None
                else f"a model trained on {1 - hidden_share:.0%} of the pairs"
            ),
            err=True,
        )
        if data.no_solo:
            typer.echo(data.left_out(), err=True)
        traces = _Traces(opts, data, gpus)
        per_seed: dict[int, list[Result]] = {}
        for s in parse_seeds(seeds) if seeds else [seed]:
            trace = traces.for_seed(s)
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
            per_seed[s] = run_all(trace, data, setup, names, scores=scored)
            if not seeds:
                typer.echo(table(per_seed[s], markdown=False))
                typer.echo(versus(per_seed[s]))
        rows = seed_rows(per_seed) if seeds else []
        if seeds:
            typer.echo(per_seed_table(rows, markdown=False))
            typer.echo()
            typer.echo(spread_table(rows, markdown=False))
            typer.echo()
            typer.echo("\n".join(head_to_head_lines(rows, names)))
        if not out:
            return
        cmd = replay_command(
            trace=opts.options(),
            gpus=gpus,
            seeds=seeds,
            seed=seed,
            pcfg=pcfg,
            slots=slots,
            gpu_memory_gib=gpu_memory_gib,
            hidden_share=hidden_share,
            names=names,
            gpu=gpu,
            oracle_error=oracle_error,
            paths={"--gavel": gavel, "--scores": scores, "--config": config},
        )
        if seeds:
            write_seeds(out, rows, cmd)
            typer.echo(f"results written to {out}", err=True)
        else:
            results = per_seed[seed]
            write_results(out, results, cmd, table(results), versus(results))
            typer.echo(f"results and plots written to {out}", err=True)


class _Traces:
    """The trace of each seed: a site's export is the same trace for every seed (the seed
    then changes the pair split and the random choices); the Philly rows are read once."""

    def __init__(self, opts: TraceOptions, data: GavelData, gpus: int) -> None:
        self.opts, self.data, self.gpus = opts, data, gpus
        from ..sim.trace import SacctSkipped, read_philly, read_sacct

        self.imported: list[SimJob] | None = None
        self.philly: list[tuple[float, int]] | None = None
        if opts.sacct:
            skipped = SacctSkipped()
            self.imported = read_sacct(opts.sacct, data.classes, skipped)
            if skipped.text():
                typer.echo(
                    f"{opts.sacct}: {len(self.imported):,} GPU jobs; left out {skipped.text()}",
                    err=True,
                )
        else:
            self.philly = read_philly(bundled_path("philly_job_distribution.csv"))

    def for_seed(self, seed: int) -> list[SimJob]:
        from ..sim.trace import philly_trace, with_time_limits

        if self.imported is not None:
            return self.imported
        assert self.philly is not None
        o = self.opts
        trace = philly_trace(
            self.philly,
            self.data.classes,
            jobs=o.jobs,
            gpus=self.gpus,
            load=o.load,
            seed=seed,
            users=o.users,
            multi_gpu=o.multi_gpu,
            max_duration_s=o.max_duration_h * 3600 or None,
            aggressive_share=o.aggressive_share,
        )
        if o.limit_factors is not None:
            trace = with_time_limits(trace, *o.limit_factors, seed=seed)
        return trace


def _policies() -> list[str]:
    from ..sim.run import POLICIES

    return list(POLICIES)

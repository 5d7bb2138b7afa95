"""What ``slurm-colo simulate`` writes under ``--out``, and the command line that writes the
same again (kept in results.md and seeds.md beside the figures)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from ..config import PlacementConfig
from ..errors import ColoError
from ..fsutil import atomic_write_bytes
from ..sim.metrics import Result
from ..sim.spread import SeedRow


def check_out(out: Path) -> None:
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


def write_results(out: Path, results: list[Result], cmd: str, md: str, vs: str) -> None:
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
    write_files(out, files)


def write_files(out: Path, files: dict[str, bytes]) -> None:
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


def head_to_head_lines(rows: list[SeedRow], names: list[str]) -> list[str]:
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


def write_seeds(out: Path, rows: list[SeedRow], cmd: str) -> None:
    from ..sim.spread import per_seed_table, rows_json, spread_table

    names = list(dict.fromkeys(r.policy for r in rows))
    h2h = "".join(f"- {ln}\n" for ln in head_to_head_lines(rows, names))
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
    write_files(
        out,
        {
            "seeds.md": seeds_md.encode(),
            "seeds.json": json.dumps(rows_json(rows), indent=1).encode(),
        },
    )


def replay_command(
    *,
    trace: str,
    gpus: int,
    seeds: str,
    seed: int,
    pcfg: PlacementConfig,
    slots: int,
    gpu_memory_gib: float,
    hidden_share: float,
    names: list[str],
    gpu: str,
    oracle_error: float,
    paths: dict[str, Path | None],
) -> str:
    """The ``slurm-colo simulate`` command line that gives the same figures again, every
    setting that shaped them spelled out, defaults included: ``trace`` is the trace's
    options (``--sacct FILE`` or the generated trace's), ``paths`` the input files by
    option (``--gavel``, ``--scores``, ``--config``; None where not given)."""
    cmd = [
        "slurm-colo simulate",
        trace,
        f"--gpus {gpus} "
        + (f"--seeds {seeds} " if seeds else f"--seed {seed} ")
        + f"--cross-user {pcfg.cross_user} --undo {pcfg.undo} --unplaced {pcfg.unplaced} "
        f"--slots {slots} --gpu-memory-gib {gpu_memory_gib:g} "
        f"--hidden-share {hidden_share:g} --policies {','.join(names)} "
        f"--gpu {shlex.quote(gpu)}",
    ]
    if "oracle-error" in names:
        cmd.append(f"--oracle-error {oracle_error:g}")
    cmd += [f"{option} {shlex.quote(str(path))}" for option, path in paths.items() if path]
    return " ".join(cmd)

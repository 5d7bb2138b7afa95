"""``slurm-colo node status|cleanup`` and ``slurm-colo spool ingest|list``."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime

import typer

from ..config import load_config


def _status(cfg) -> dict:  # type: ignore[no-untyped-def]
    from slurm_colo.spool.directory import pending

    from ..node import jobstate, journal, procs
    from ..node.gpu.mps_daemon import saved_crashes, saved_state
    from ..node.layout import NodeLayout

    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    gpus = {}
    for g in lay.gpu_indexes():
        st = saved_state(lay.mps_state(g))
        events = journal.read(lay.journal(g))
        gpus[g] = {
            "files_problem": lay.gpu_files_problem(g),
            "jobs": [s.job for s in journal.active(events)],
            "mps_daemon": st.get("pid"),
            "mps_uid": st.get("uid"),
            "mps_alive": procs.alive(st.get("pid")) if st.get("pid") else None,
            "pipe_dir": st.get("pipe_dir"),
            "faults": [
                {"t": e["t"], "kind": e.get("kind"), "detail": e.get("detail")}
                for e in journal.recent_faults(events, time.time())[-3:]
            ],
            "recent_crashes": len(saved_crashes(lay.crashes(g))),
        }
    return {
        "run_dir": str(lay.run_dir),
        "mps_backend": cfg.node.mps_backend,
        "nvml_backend": cfg.node.nvml_backend,
        "gpus": gpus,
        "jobs": jobstate.job_ids(lay),
        "spooled_records": len(pending(lay.spool_dirs())),
        "copies_without_state": jobstate.orphan_copies(lay),
        "damaged_jobs": [
            {"job": d.job, "set_aside": d.set_aside, "path": str(d.path)}
            for d in jobstate.damaged_jobs(lay)
        ],
    }


def register(app: typer.Typer) -> None:
    node = typer.Typer(help="Node side: MPS daemons, job state, sampler.", no_args_is_help=True)
    spool = typer.Typer(help="The node's record spool.", no_args_is_help=True)
    app.add_typer(node, name="node")
    app.add_typer(spool, name="spool")

    @node.command("status")
    def status(as_json: bool = typer.Option(False, "--json", help="machine-readable")) -> None:
        """MPS daemons, jobs, recent MPS faults and pending records of this node.

        Per GPU: its MPS daemon and jobs; the last MPS faults of the last day, pending records, job state set aside as damaged, state copies a reboot left."""
        from pathlib import Path

        from ..node.jobstate import DAMAGED_KEEP_S

        cfg = load_config()
        s = _status(cfg)
        if as_json:
            typer.echo(json.dumps(s, indent=2, sort_keys=True))
            return
        typer.echo(f"run dir {s['run_dir']}  mps={s['mps_backend']}  nvml={s['nvml_backend']}")
        for g, i in s["gpus"].items():
            d = (
                f"MPS daemon {i['mps_daemon']} uid {i['mps_uid']} "
                f"({'alive' if i['mps_alive'] else 'DEAD'})"
                if i["mps_daemon"]
                else "no MPS daemon"
            )
            typer.echo(
                f"GPU {g}: jobs {i['jobs'] or '-'}; {d}; crashes (10 min) {i['recent_crashes']}"
            )
            if i["files_problem"]:
                typer.echo(f"   {i['files_problem']}: hooks run its jobs without MPS")
            for f in i["faults"]:
                when = datetime.fromtimestamp(float(f["t"]), UTC).strftime("%Y-%m-%d %H:%M:%S")
                typer.echo(f"   fault {when} UTC {f['kind']}: {f['detail']}")
        typer.echo(f"job state dirs: {s['jobs'] or '-'}; spooled records: {s['spooled_records']}")
        if s["copies_without_state"]:
            typer.echo(
                f"state copies on disk without a job directory: jobs "
                f"{s['copies_without_state']} in {Path(cfg.node.spool_dir) / 'running'} "
                "(a reboot ended them, or their run directory was emptied: 'slurm-colo node "
                "cleanup' records them, those of this boot once their jobs are gone)"
            )
        if s["damaged_jobs"]:
            typer.echo(
                f"damaged job state (no record): jobs "
                f"{[d['job'] for d in s['damaged_jobs']]} in {Path(s['run_dir']) / 'damaged'}, "
                f"kept {DAMAGED_KEEP_S // 86400} days"
            )

    @node.command("cleanup")
    def cleanup(
        gpu: list[int] = typer.Option(None, "--gpu", help="only these GPU indices"),
        force: bool = typer.Option(
            False, "--force", help="stop daemons even if jobs are recorded on them"
        ),
    ) -> None:
        """Stop idle MPS daemons and stale MPS processes; spool finished jobs' records.

        Stops MPS daemons with no live job, kills stale MPS processes, resets the restart-loop guard and spools the records of finished jobs."""
        from ..fsutil import locked
        from ..node import journal
        from ..node.gpu.mps_daemon import gpu_mps
        from ..node.layout import NodeLayout
        from ..node.recovery import recover

        cfg = load_config()
        lay = NodeLayout.of_config(cfg)
        rec = recover(cfg)
        typer.echo(f"recovered records: {rec or 'none'}")
        indices = gpu or lay.gpu_indexes()
        unusable = False
        for g in indices:
            gm = gpu_mps(cfg, g)
            with contextlib.suppress(OSError):  # a file in its place is reported next
                lay.gpu_dir(g).mkdir(parents=True, exist_ok=True)
            problem = lay.gpu_files_problem(g)
            if problem is not None:
                typer.echo(f"GPU {g}: {problem}; move it away and run this again", err=True)
                unusable = True
                continue
            with locked(lay.gpu_lock(g), timeout_s=30):
                busy = journal.active(journal.read(lay.journal(g)))
                if busy and not force:
                    typer.echo(
                        f"GPU {g}: jobs {[s.job for s in busy]} recorded; left alone "
                        "(--force to stop anyway)"
                    )
                    continue
                problems = gm.stop() if gm.state() else []
                killed = gm.clean_stale()
                lay.crashes(g).unlink(missing_ok=True)
                typer.echo(
                    f"GPU {g}: clean"
                    + (f"; {'; '.join(problems)}" if problems else "")
                    + (f"; killed stale {killed}" if killed else "")
                )
        if unusable:
            raise typer.Exit(1)

    @node.command("selftest")
    def selftest(
        gpu: list[int] = typer.Option(
            None, "--gpu", help="a GPU index to test; repeat for several (default: every GPU)"
        ),
        keep_compute_mode: bool = typer.Option(
            False,
            "--keep-compute-mode",
            help="leave the GPU's compute mode as it is (the Prolog sets EXCLUSIVE_PROCESS)",
        ),
        as_json: bool = typer.Option(False, "--json", help="machine-readable"),
    ) -> None:
        """Test this node's idle GPUs end to end, as root, before they take shared jobs.

        One GPU after the other: NVML, a CUDA client alone, the MPS daemon the Prolog would start (in a scratch directory), a client with a thread percentage and a memory limit as a job gets them, the logs, and the stop. Exits 1 if a step failed."""
        from ..admin.check import Check, exit_code, format_check
        from ..node.selftest import node_gpus, run_selftest

        cfg = load_config()
        indices = gpu or node_gpus(cfg) or [0]  # no GPU listed: GPU 0's step says why
        checks = [
            Check(f"GPU {g} {s.name}", s.status, s.message, s.fix)
            for g in indices
            for s in run_selftest(cfg, g, not keep_compute_mode)
        ]
        if as_json:
            typer.echo(json.dumps([vars(c) for c in checks], indent=2))
        else:
            for c in checks:
                typer.echo(format_check(c))
        raise typer.Exit(exit_code(checks))

    @spool.command("ingest")
    def ingest(
        busy_timeout: float = typer.Option(None, help="seconds to wait on a locked DB"),
        wait: float = typer.Option(10.0, help="seconds to wait for a running ingest"),
    ) -> None:
        """Ingest spooled records into the history store, or send them to the head node.

        Reads the spool and the fallback spool; with node.records_to the records go to the agent on the head node. One try, no retries."""
        from slurm_colo.spool.drain import ingest_pending

        from ..errors import ColoError, StoreError

        for opt, v in (("--busy-timeout", busy_timeout), ("--wait", wait)):
            if v is not None and not 0 <= v <= 3600:  # also refuses nan
                raise ColoError(f"{opt} {v:g}: give seconds from 0 to 3600")
        rep = ingest_pending(load_config(), busy_timeout, lock_timeout_s=wait, retry_s=0)
        typer.echo(rep.summary())
        if rep.errors:
            raise StoreError(
                f"ingest incomplete: {'; '.join(rep.errors)}",
                hint="records stay spooled; retry later",
            )

    @spool.command("list")
    def list_() -> None:
        """Records waiting in the spool."""
        from slurm_colo.spool.directory import SpoolDirs, pending

        for p in pending(SpoolDirs.of_config(load_config())):
            typer.echo(str(p))

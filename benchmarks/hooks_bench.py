"""How long the Prolog and Epilog hooks take, as slurmd runs them (a fresh interpreter).

Usage: python benchmarks/hooks_bench.py [--pairs N] [--cold-bytecode]

Runs the hooks on a throw-away run/spool directory with the lab backends (MPS emulator,
NVML scenario) and an unreachable agent: the Prolog takes the placement from the job's
AdminComment tag, which it reads with ``squeue`` (a stand-in script on PATH here, as fast
as a shell start; the real one asks slurmctld, a few ms more). Each round: job A
lands on GPU 0 (starts the MPS daemon: reported apart, excluded from the budget), job B
joins it, A ends, B ends (last job: the daemon stop and the ingest run in one detached
helper), then a job without --colocate (the untouched path) runs while that helper may
still be at work. The next round starts once the detached helpers are gone (how long that
took is printed). Target: Prolog and Epilog each < 150 ms.

Wall time depends on the machine's load (other work, and the detached helpers of earlier
hooks, compete for the CPUs); CPU time (user+sys of the hook process and of the children
it waits for, i.e. its MPS control calls) much less, so both are printed, with a bare
interpreter start for reference.

Bytecode: an installed package comes with compiled bytecode. By default the hooks run with
a private, warmed-up bytecode cache (PYTHONPYCACHEPREFIX in the temp directory, one
unmeasured round first), so a checkout whose __pycache__ is stale under
PYTHONDONTWRITEBYTECODE does not add compile time no node would see. --cold-bytecode
runs with the environment as it is.

MPS control calls run the bundled emulator (``python -I -S mps_control.py``), which stands
in for NVIDIA's small C program ``nvidia-cuda-mps-control``: each call costs one bare
interpreter start here (measured and printed), far more than the real binary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# this checkout's slurm_colo, whatever the interpreter has installed: the bench imports it
# from here, and the hooks run with the checkout as working directory (``-m`` puts it first
# on sys.path; their detached helpers inherit it)
sys.path.insert(0, str(REPO))
BUDGET_MS = 150.0
#: hooks under the budget (the Prolog that starts the MPS daemon is excluded)
BUDGETED = ("prolog_join", "epilog_first", "epilog_last", "prolog_plain", "epilog_plain")
LABELS = {
    "prolog_daemon_start": "Prolog, first MPS job (starts daemon; excluded)",
    "prolog_join": "Prolog, MPS job joining the daemon",
    "taskprolog": "TaskProlog",
    "epilog_first": "Epilog, first of the pair",
    "epilog_last": "Epilog, last job (stop+ingest detached)",
    "prolog_plain": "Prolog, job without --colocate",
    "epilog_plain": "Epilog, job without --colocate",
}

CPU: dict[str, list[float]] = {}
#: per hook run: (MPS control program runs, commands sent)
CALLS: dict[str, list[tuple[int, int]]] = {}


def _mps_calls(trace: Path, pid: int) -> tuple[int, int]:
    """(control program runs, commands sent) by process ``pid``, from the emulator's call
    trace (SLURM_COLO_MPS_EMU_TRACE): calls of detached helpers are not the hook's."""
    runs = cmds = 0
    try:
        lines = trace.read_text().splitlines()
    except OSError:
        return 0, 0
    for line in lines:
        ppid, _, n = line.split()
        if int(ppid) == pid:
            runs += 1
            cmds += int(n)
    return runs, cmds


def run_hook(name: str, env: dict[str, str], key: str, trace: Path) -> float:
    """Wall ms of one hook run; its CPU ms (user+sys, from wait4) go to CPU[key] and its
    MPS control calls to CALLS[key]."""
    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "slurm_colo.hooks", name],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, ru = os.wait4(p.pid, 0)
    wall = (time.perf_counter() - t) * 1000
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{name} exited {p.returncode}")
    CPU.setdefault(key, []).append((ru.ru_utime + ru.ru_stime) * 1000)
    CALLS.setdefault(key, []).append(_mps_calls(trace, p.pid))
    return wall


def helpers(cfg: Path) -> list[int]:
    """Processes started for this bench's node (detached sampler, Epilog helper), found by
    SLURM_COLO_CONFIG in their environment; not the MPS daemon and servers."""
    mark = f"SLURM_COLO_CONFIG={cfg}".encode()
    out = []
    for e in os.scandir("/proc"):
        if not e.name.isdigit() or int(e.name) == os.getpid():
            continue
        try:
            if Path(e.path, "comm").read_bytes().startswith(b"nvidia-cuda-mps"):
                continue
            if mark in Path(e.path, "environ").read_bytes().split(b"\0"):
                out.append(int(e.name))
        except OSError:
            pass
    return out


def settle(cfg: Path, limit_s: float = 20.0) -> float:
    """Wait until the detached helpers are gone; ms waited."""
    t = time.perf_counter()
    while helpers(cfg) and time.perf_counter() - t < limit_s:
        time.sleep(0.02)
    return (time.perf_counter() - t) * 1000


def timed(
    argv: list[str], env: dict[str, str] | None = None, stdin: bytes | None = None
) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run of ``argv``."""
    t = time.perf_counter()
    p = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if stdin:
        assert p.stdin is not None
        p.stdin.write(stdin)
        p.stdin.close()
    _, _, ru = os.wait4(p.pid, 0)
    return (time.perf_counter() - t) * 1000, (ru.ru_utime + ru.ru_stime) * 1000


def pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, round(q * (len(v) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=10, help="measured rounds (default 10)")
    ap.add_argument(
        "--cold-bytecode",
        action="store_true",
        help="no private bytecode cache or warm-up round: the environment as is",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hooks-bench-"))
    cfg = tmp / "config.toml"
    run_dir = tmp / "run"
    trace = tmp / "mps-calls.trace"
    cfg.write_text(f"""[node]
mps_backend = "emulator"
nvml_backend = "scenario"
nvml_scenario = "{REPO}/contrib/lab/nvml-scenario.json"
run_dir = "{run_dir}"
spool_dir = "{tmp}/spool"
[agent]
socket = "{tmp}/no-agent.sock"
[store]
url = "sqlite:///{tmp}/history.db"
""")
    base = {
        **os.environ,
        "SLURM_COLO_CONFIG": str(cfg),
        "SLURMD_NODENAME": "bench",
        "SLURM_JOB_USER": os.environ.get("USER", "root"),
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_GPUS": "0",
        "SLURM_COLO_MPS_EMU_TRACE": str(trace),
    }
    if not args.cold_bytecode:
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        base["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    tag = "slurm-colo[v=1 tok=t cls={c} mode=auto mech=mps gpu=bench:0 pct=50 mem=12]"
    # the Prolog reads the tag from the job's AdminComment (squeue), never from its Comment
    fake_bin = tmp / "bin"
    fake_bin.mkdir()
    (fake_bin / "squeue").write_text('#!/bin/sh\nprintf "%s\\n" "$BENCH_ADMIN_TAG"\n')
    (fake_bin / "squeue").chmod(0o755)
    base["PATH"] = f"{fake_bin}:{base.get('PATH', '/usr/bin:/bin')}"
    t: dict[str, list[float]] = {k: [] for k in LABELS}
    emu: list[tuple[float, float]] = []
    settled: list[float] = []
    job = 1000
    rounds = args.pairs + (0 if args.cold_bytecode else 1)
    for r in range(rounds):
        if r == 1 and not args.cold_bytecode:  # round 0 warmed the caches: forget it
            for d in (t, CPU, CALLS):
                for v in d.values():
                    v.clear()
            emu.clear()
            settled.clear()
        a, b, c = job, job + 1, job + 2
        job += 3
        ea = {
            **base,
            "SLURM_JOB_ID": str(a),
            "SPANK_COLOCATE": "auto",
            "BENCH_ADMIN_TAG": tag.format(c="resnet50"),
        }
        eb = {
            **base,
            "SLURM_JOB_ID": str(b),
            "SPANK_COLOCATE": "auto",
            "BENCH_ADMIN_TAG": tag.format(c="lm"),
        }
        ec = {**base, "SLURM_JOB_ID": str(c)}

        def hook(name: str, env: dict[str, str], key: str) -> None:
            t[key].append(run_hook(name, env, key, trace))

        hook("prolog", ea, "prolog_daemon_start")
        hook("prolog", eb, "prolog_join")
        hook("taskprolog", eb, "taskprolog")
        pipes = list(run_dir.glob("mps/*/pipe"))
        if pipes:  # one control call on the running daemon, as the hooks make it
            from slurm_colo.node.gpu.mps import emulator_argv

            emu.append(
                timed(
                    emulator_argv(),
                    {"CUDA_MPS_PIPE_DIRECTORY": str(pipes[0])},
                    b"get_server_list\n",
                )
            )
        time.sleep(0.3)
        hook("epilog", {**ea, "SLURM_JOB_EXIT_CODE": "0"}, "epilog_first")
        hook("epilog", {**eb, "SLURM_JOB_EXIT_CODE": "0"}, "epilog_last")
        hook("prolog", ec, "prolog_plain")
        hook("epilog", {**ec, "SLURM_JOB_EXIT_CODE": "0"}, "epilog_plain")
        # every round starts on a quiet node: the Epilog helper (MPS stop, ingest) is done
        settled.append(settle(cfg))
    spooled = sum(len(list(d.glob("*.json"))) for d in (tmp / "spool", tmp / "spool" / "done"))
    bare = [timed([sys.executable, "-c", "pass"], base) for _ in range(7)]
    bare_is = [timed([sys.executable, "-I", "-S", "-c", "pass"]) for _ in range(7)]

    ncpu = os.cpu_count()
    print(
        f"hooks_bench: {args.pairs} rounds, fresh interpreter per hook, {ncpu} CPUs, "
        f"Python {sys.version.split()[0]} ({sys.executable})"
    )
    print(
        "bytecode: "
        + (
            "as the environment gives it (--cold-bytecode)"
            if args.cold_bytecode
            else "private cache, warmed by one unmeasured round (as installed)"
        )
    )
    print(
        "MPS control: bundled emulator run as `python -I -S mps_control.py` per call "
        "(stands in for NVIDIA's C binary)"
    )
    print(
        "CPU = user+sys of the hook and of the MPS control calls it waits for (not of the "
        "detached sampler/helper); MPS runs/cmds = control program starts / commands sent"
    )
    print()
    head = (
        f"{'hook':47s} {'wall med':>8s} {'p90':>7s} {'max':>7s} {'CPU med':>8s} "
        f"{'p90':>6s} {'MPS runs/cmds':>13s}  budget"
    )
    print(head)
    print("-" * len(head))
    for k, v in t.items():
        runs = statistics.median(c[0] for c in CALLS[k])
        cmds = statistics.median(c[1] for c in CALLS[k])
        verdict = ""
        if k in BUDGETED:
            verdict = "ok" if statistics.median(v) < BUDGET_MS else "OVER"
            verdict += " (p90 ok)" if pct(v, 0.9) < BUDGET_MS else " (p90 over)"
        else:
            verdict = "excluded" if k == "prolog_daemon_start" else "-"
        print(
            f"{LABELS[k]:47s} {statistics.median(v):8.1f} {pct(v, 0.9):7.1f} {max(v):7.1f} "
            f"{statistics.median(CPU[k]):8.1f} {pct(CPU[k], 0.9):6.1f} "
            f"{f'{runs:g}/{cmds:g}':>13s}  {verdict}"
        )
    print("-" * len(head))
    bw, bc = sorted(x[0] for x in bare), sorted(x[1] for x in bare)
    print(
        f"{'reference: bare `python -c pass`':47s} {statistics.median(bw):8.1f} "
        f"{pct(bw, 0.9):7.1f} {max(bw):7.1f} {statistics.median(bc):8.1f}"
    )
    iw, ic = sorted(x[0] for x in bare_is), sorted(x[1] for x in bare_is)
    print(
        f"{'reference: bare `python -I -S -c pass`':47s} {statistics.median(iw):8.1f} "
        f"{pct(iw, 0.9):7.1f} {max(iw):7.1f} {statistics.median(ic):8.1f}"
    )
    if emu:
        ew, ec_ = [x[0] for x in emu], [x[1] for x in emu]
        print(
            f"{'reference: one emulated MPS control call':47s} {statistics.median(ew):8.1f} "
            f"{pct(ew, 0.9):7.1f} {max(ew):7.1f} {statistics.median(ec_):8.1f}"
        )
    print(
        f"detached work after a round's last hook (MPS stop, ingest, samplers) done "
        f"after: median {statistics.median(settled):.0f} ms, max {max(settled):.0f} ms "
        "(waited for before the next round)"
    )
    print()
    worst = max(BUDGETED, key=lambda k: statistics.median(t[k]))
    worst_ms = statistics.median(t[worst])
    worst90 = max(pct(t[k], 0.9) for k in BUDGETED)
    print(f"target: each Prolog/Epilog < {BUDGET_MS:.0f} ms (MPS daemon start excluded)")
    print(
        f"  slowest median: {worst_ms:.1f} ms ({LABELS[worst]}) -> "
        f"{'MET' if worst_ms < BUDGET_MS else 'NOT MET'}"
    )
    print(
        f"  slowest p90:    {worst90:.1f} ms -> "
        f"{'met' if worst90 < BUDGET_MS else 'not met'} at p90"
    )
    print(
        f"  CPU (steadier on a loaded machine): slowest median "
        f"{max(statistics.median(CPU[k]) for k in BUDGETED):.1f} ms"
    )
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {ncpu} CPUs")
    expected = 2 * rounds
    print(
        f"records spooled: {spooled} (expected {expected})"
        + ("" if spooled == expected else "  <-- MISMATCH")
    )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if spooled == expected else 1


if __name__ == "__main__":
    sys.exit(main())

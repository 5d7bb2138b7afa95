"""``slurm-colo node selftest``: one GPU of a drained node through the code the Prolog and
Epilog use, against the real NVML and NVIDIA's MPS control program.

NVML readings → a CUDA client alone (the GPU's full SM count) → the MPS daemon started by
:class:`~slurm_colo.node.gpu.mps_daemon.GpuMps` in a scratch directory (compute mode
included unless told to leave it) → a client with a thread percentage and a pinned-memory
limit as a job gets them, seen in the daemon's client list → the logs free of faults → the
daemon stopped with nothing left. The client is :mod:`.gpu.cuda_probe` (the CUDA driver
through ctypes): where no driver exists (the emulator) the client's own checks are skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_colo.errors import MPSError
from slurm_colo.fsutil import ensure_dir, locked
from slurm_colo.node import journal, procs
from slurm_colo.node.gpu.mps import control_argv, format_mem_limit, parse_fault_lines
from slurm_colo.node.gpu.mps_daemon import GpuMps, gpu_mps, lock_wait
from slurm_colo.node.gpu.nvml import (
    COMPUTE_DEFAULT,
    COMPUTE_EXCLUSIVE_PROCESS,
    NOT_SUPPORTED,
    Gpu,
    open_nvml,
)
from slurm_colo.node.layout import NodeLayout

if TYPE_CHECKING:
    from slurm_colo.config import Config

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"
#: the client's limits: half the SMs, 2 GiB of memory. The limit counts the client's own
#: context (on an H200 a fresh context saw 1.5 of 2 GiB free), so the client allocates a
#: little (FIRST_GIB, must fit) and then the whole limit more (must be refused)
THREAD_PCT = 50
MEM_LIMIT_GIB = 2.0
FIRST_GIB = 0.25


@dataclass
class Step:
    name: str
    status: str
    message: str
    fix: str = ""


def client_argv(cfg: Config, alloc_gib: float, more_gib: float, hold: bool) -> list[str]:
    argv = [sys.executable, "-m", "slurm_colo.node.gpu.cuda_probe"]
    argv += ["--alloc-gib", str(alloc_gib), "--more-gib", str(more_gib)]
    argv += ["--hold"] if hold else []
    if cfg.node.mps_backend == "emulator":  # the emulator's stand-in for a CUDA client
        argv = [*control_argv(cfg.node.mps_backend, cfg.node.mps_control), "run", "--", *argv]
    return argv


def _client_env(device: str, mps: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    env["CUDA_VISIBLE_DEVICES"] = device
    env.update(mps or {})
    return env


def _reading_of(line: str) -> dict[str, Any]:
    try:
        out = json.loads(line)
    except ValueError:
        return {"error": f"unexpected client output: {line.strip()[:200]!r}"}
    return out if isinstance(out, dict) else {"error": "unexpected client output"}


def _run_client(argv: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    try:
        cp = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the CUDA client did not finish within {timeout_s:.0f}s"}
    lines = cp.stdout.strip().splitlines()
    return _reading_of(lines[-1]) if lines else {"error": cp.stderr.strip()[-200:] or "no output"}


def _first_line(p: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    """The held client's reading, or an error if it says nothing within ``timeout_s`` (a
    client queued behind another user's MPS server waits for ever)."""
    import selectors

    assert p.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return {"error": f"the client under MPS said nothing within {timeout_s:.0f}s"}
    line = p.stdout.readline()
    return _reading_of(line) if line else {"error": "the client under MPS exited, no reading"}


def check_readings(g: Gpu) -> Step:
    missing = [
        name
        for name, v in (
            ("utilization", g.utilization()),
            ("power", g.power_w()),
            ("clocks", g.sm_clock_mhz()),
            ("per-process utilization", g.process_sm_util(0)),
        )
        if v is NOT_SUPPORTED or v is None
    ]
    if not missing:
        return Step("readings", OK, "utilization, memory, power, clocks, per-process use")
    return Step(
        "readings",
        WARN,
        f"not available here: {', '.join(missing)}; job profiles will lack them",
    )


def node_gpus(cfg: Config) -> list[int]:
    """Every GPU index NVML lists on this node (none when NVML does not start)."""
    gate = open_nvml(cfg.node.nvml_backend, cfg.node.nvml_scenario, cfg.node.run_dir)
    try:
        return list(range(gate.device_count()))
    finally:
        gate.close()


def run_selftest(cfg: Config, index: int, set_compute_mode: bool = True) -> list[Step]:
    """The steps, in order; stops early when a step makes the rest meaningless."""
    gate = open_nvml(cfg.node.nvml_backend, cfg.node.nvml_scenario, cfg.node.run_dir)
    if not gate.available:
        return [Step("nvml", FAIL, gate.reason, "install nvidia-ml-py and the NVIDIA driver")]
    try:
        return _on_gpu(cfg, gate.gpu(index), index, set_compute_mode, gate.source)
    finally:
        gate.close()


def _on_gpu(cfg: Config, g: Gpu, index: int, set_compute_mode: bool, source: str) -> list[Step]:
    steps: list[Step] = []
    uuid, name = g.uuid(), g.name()
    if uuid is None:
        return [Step("nvml", FAIL, f"GPU {index}: {'; '.join(g.errors) or 'no such GPU'}")]
    steps.append(Step("nvml", OK, f"GPU {index}: {name} {uuid} ({source})"))
    live = NodeLayout.of_config(cfg)
    with contextlib.suppress(OSError):  # a file in its place is reported next
        ensure_dir(live.gpu_dir(index), 0o700)
    problem = live.gpu_files_problem(index)
    if problem is not None:
        return [*steps, Step("gpu files", FAIL, problem, "move it away and run this again")]
    # the GPU's lock, as the hooks take it: a Prolog arriving meanwhile waits for the test
    try:
        with locked(live.gpu_lock(index), timeout_s=lock_wait(cfg)):
            steps += _idle_gpu(cfg, live, g, index, uuid, set_compute_mode)
    except TimeoutError:
        steps.append(
            Step("gpu idle", FAIL, f"a slurm-colo hook holds GPU {index}", "drain the node")
        )
    return steps


def _idle_gpu(
    cfg: Config, live: NodeLayout, g: Gpu, index: int, uuid: str, set_compute_mode: bool
) -> list[Step]:
    steps: list[Step] = []
    busy = [s.job for s in journal.active(journal.read(live.journal(index)))]
    ps = g.processes() or {}
    if busy or ps:
        what = f"jobs {busy}" if busy else f"processes {sorted(ps)}"
        steps.append(Step("gpu idle", FAIL, f"GPU {index} is in use ({what})", "drain the node"))
        return steps
    steps.append(Step("gpu idle", OK, "no job and no process on the GPU"))
    steps.append(check_readings(g))
    device = uuid if uuid.startswith(("GPU-", "MIG-")) else str(index)
    alone = _run_client(client_argv(cfg, 0, 0, False), _client_env(device), 60)
    cuda = "error" not in alone
    if cuda:
        steps.append(Step("cuda alone", OK, f"{alone['sm_count']} SMs, {alone['total_gib']} GiB"))
    else:
        steps.append(Step("cuda alone", SKIP, f"no CUDA client: {alone['error']}"))
    scratch = NodeLayout(live.run_dir / "selftest", live.run_dir / "selftest" / "spool")
    shutil.rmtree(scratch.run_dir, ignore_errors=True)
    scratch.gpu_dir(index).mkdir(parents=True)
    # the daemon as the Prolog runs it, in the scratch directory, on the GPU already open
    gm = dataclasses.replace(
        gpu_mps(cfg, index),
        layout=scratch,
        open_gpu=lambda i: g,
        set_compute_mode=set_compute_mode,
    )
    try:
        steps += _with_daemon(cfg, gm, g, device, alone if cuda else None, set_compute_mode)
    except MPSError as e:  # a control call failed or timed out after the start
        steps.append(Step("mps daemon", FAIL, str(e), "see docs/troubleshooting-node.md"))
    finally:
        st = gm.state()
        problems = gm.stop(st) if st else []
        left = procs.mps_processes(st["pipe_dir"]) if st.get("pipe_dir") else []
        mode = g.compute_mode()
        bad = problems + ([f"left: {left}"] if left else [])
        if set_compute_mode and mode != COMPUTE_DEFAULT:
            bad.append(f"compute mode {mode} after the stop, not DEFAULT")
        steps.append(
            Step("mps stop", FAIL, "; ".join(bad))
            if bad
            else Step(
                "mps stop",
                OK,
                "quit; no MPS process left"
                + ("; compute mode DEFAULT" if set_compute_mode else ""),
            )
        )
        if any(s.status == FAIL for s in steps):  # the daemon's logs, for the admin
            steps[-1].message += f" (the MPS logs are kept in {scratch.run_dir / 'mps'})"
        else:
            shutil.rmtree(scratch.run_dir, ignore_errors=True)
    return steps


def _with_daemon(
    cfg: Config, gm: GpuMps, g: Gpu, device: str, alone: dict | None, set_mode: bool
) -> list[Step]:
    steps: list[Step] = []
    out = gm.ensure_daemon(0, os.getuid())
    if out.state != "ok":
        return [Step("mps daemon", FAIL, out.message, "see docs/troubleshooting-node.md")]
    st = gm.state()
    ctl = gm.control(st)
    servers = ctl.server_list()
    status = ctl.server_statuses(servers)
    if len(servers) != 1 or status.get(servers[0]) != "ACTIVE":
        steps.append(Step("mps daemon", FAIL, f"servers {status or 'none'} after start_server"))
        return steps
    steps.append(
        Step("mps daemon", OK, f"daemon {st.get('pid')}, server {servers[0]} ACTIVE ({device})")
    )
    if set_mode:
        mode = g.compute_mode()
        steps.append(
            Step("compute mode", OK, "EXCLUSIVE_PROCESS while the daemon runs")
            if mode == COMPUTE_EXCLUSIVE_PROCESS
            else Step("compute mode", FAIL, f"mode {mode} while the daemon runs", "run as root")
        )
    mps_env = {
        "CUDA_MPS_PIPE_DIRECTORY": out.pipe_dir,
        "CUDA_MPS_LOG_DIRECTORY": out.log_dir,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(THREAD_PCT),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": format_mem_limit(MEM_LIMIT_GIB),
    }
    p = subprocess.Popen(
        client_argv(cfg, FIRST_GIB, MEM_LIMIT_GIB, True),
        env=_client_env(device, mps_env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        reading = _first_line(p, 60)
        clients = ctl.device_clients()
    finally:
        try:
            p.communicate(timeout=30)  # closes its stdin: the client lets go
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
    seen = any(p.pid in pids for pids in clients.values())
    steps.append(
        Step("mps client", OK, f"client {p.pid} in the daemon's client list")
        if seen
        else Step("mps client", FAIL, f"client {p.pid} not in the client list {clients}")
    )
    steps += _limits(alone, reading)
    faults = parse_fault_lines(ctl.log_text()) + parse_fault_lines(ctl.log_text(0, "server.log"))
    steps.append(
        Step("mps logs", FAIL, "; ".join(faults[:3]))
        if faults
        else Step("mps logs", OK, "no fault")
    )
    return steps


def _limits(alone: dict | None, reading: dict[str, Any]) -> list[Step]:
    if alone is None:
        return [Step("limits", SKIP, "no CUDA client: thread percentage and memory not checked")]
    if "error" in reading:
        return [Step("limits", FAIL, f"the client under MPS failed: {reading['error']}")]
    full, got = int(alone["sm_count"]), int(reading["sm_count"])
    want = full * THREAD_PCT / 100
    sm_ok = got < full and abs(got - want) <= max(2, 0.1 * full)
    free = float(reading.get("free_gib", 0.0))
    mem_ok = (
        free <= MEM_LIMIT_GIB
        and reading.get("alloc") == "ok"
        and reading.get("alloc_more") not in (None, "ok")
    )
    return [
        Step(
            "thread percentage",
            OK if sm_ok else FAIL,
            f"{THREAD_PCT} % gave {got} of {full} SMs",
        ),
        Step(
            "pinned memory limit",
            OK if mem_ok else FAIL,
            f"{MEM_LIMIT_GIB:g} GiB limit: {free:g} GiB free in the client, "
            f"{FIRST_GIB:g} GiB {reading.get('alloc')}, "
            f"{MEM_LIMIT_GIB:g} GiB more {reading.get('alloc_more')}",
        ),
    ]

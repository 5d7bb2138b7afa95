"""``slurm-colo node selftest`` against the MPS emulator and the NVML scenario backend (the
real GPU run is in docs/node.md): the steps, an idle-GPU guard, a daemon that cannot start,
and the verdict on a client's limits."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurm_colo.config import Config, load_config
from slurm_colo.node import journal, procs
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.selftest import FAIL, OK, SKIP, _limits, run_selftest

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import node_config


def _statuses(steps: list) -> dict[str, str]:
    return {s.name: s.status for s in steps}


def _modes(cfg: Config) -> dict:
    path = Path(cfg.node.run_dir) / "nvml-scenario-state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_an_idle_gpu_passes_and_nothing_is_left(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, gpus=1)
    steps = run_selftest(cfg, 0)
    got = _statuses(steps)
    assert list(got) == [
        "nvml", "gpu idle", "readings", "cuda alone", "mps daemon", "compute mode",
        "mps client", "limits", "mps logs", "mps stop",
    ]  # fmt: skip
    # no CUDA driver here: the client's own checks are skipped, the rest must pass
    assert got["cuda alone"] == got["limits"] == SKIP
    assert all(v == OK for k, v in got.items() if k not in ("cuda alone", "limits")), steps
    assert "compute mode DEFAULT" in steps[-1].message
    assert _modes(cfg) == {"GPU-test-0": 0}  # set while the daemon ran, reset after
    assert not (Path(cfg.node.run_dir) / "selftest").exists()
    assert procs.mps_processes(str(Path(cfg.node.run_dir) / "selftest/mps/GPU-test-0/pipe")) == []


def test_keep_compute_mode_leaves_it_alone(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, gpus=1)
    got = _statuses(run_selftest(cfg, 0, set_compute_mode=False))
    assert "compute mode" not in got and got["mps stop"] == OK
    assert _modes(cfg) == {}  # never set


def test_a_gpu_in_use_is_not_touched(tmp_path: Path) -> None:
    busy = [{"uuid": "GPU-test-0", "processes": [{"pid": 4242, "used_mib": 800}]}]
    cfg = node_config(tmp_path, scenario=busy)
    steps = run_selftest(cfg, 0)
    assert _statuses(steps) == {"nvml": OK, "gpu idle": FAIL}
    assert "4242" in steps[-1].message and steps[-1].fix == "drain the node"
    (tmp_path / "b").mkdir()
    cfg = node_config(tmp_path / "b", gpus=1)
    lay = NodeLayout.of_config(cfg)
    lay.gpu_dir(0).mkdir(parents=True)
    journal.append(lay.journal(0), {"ev": "start", "job": 7, "cls": "a", "user": "u", "uid": 1})
    steps = run_selftest(cfg, 0)
    assert _statuses(steps)["gpu idle"] == FAIL and "jobs [7]" in steps[-1].message
    assert _modes(cfg) == {}


def test_the_gpu_lock_is_held_and_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test holds the GPU's lock as a hook does: while a hook holds it, the test waits
    (here 0.2 s) and then gives up without touching the GPU."""
    from slurm_colo.fsutil import try_lock, unlock
    from slurm_colo.node import selftest

    cfg = node_config(tmp_path, gpus=1)
    lay = NodeLayout.of_config(cfg)
    lay.gpu_dir(0).mkdir(parents=True)
    monkeypatch.setattr(selftest, "lock_wait", lambda c: 0.2)
    token = try_lock(lay.gpu_lock(0), 1)
    try:
        steps = run_selftest(cfg, 0)
    finally:
        unlock(token)
    assert [(s.name, s.status) for s in steps] == [("nvml", OK), ("gpu idle", FAIL)]
    assert "holds GPU 0" in steps[-1].message and _modes(cfg) == {}
    assert _statuses(run_selftest(cfg, 0))["mps stop"] == OK  # once it is free


def test_a_daemon_that_cannot_start_fails_and_the_gpu_is_reset(tmp_path: Path) -> None:
    cfg = node_config(tmp_path, gpus=1)
    node = dataclasses.replace(
        cfg.node, mps_backend="real", mps_control=str(tmp_path / "no-such-mps-control")
    )
    cfg = dataclasses.replace(cfg, node=node)
    steps = run_selftest(cfg, 0)
    got = _statuses(steps)
    assert got["mps daemon"] == FAIL and "did not start" in steps[-2].message
    assert got["mps stop"] == OK and _modes(cfg) == {"GPU-test-0": 0}
    kept = Path(cfg.node.run_dir) / "selftest" / "mps"
    assert f"the MPS logs are kept in {kept}" in steps[-1].message
    assert [p.name for p in kept.glob("*/log")] == ["log"]


def test_a_control_call_that_times_out_is_a_fail_and_the_daemon_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_colo.node.gpu.mps import MpsControl, MpsHung

    def hung(self: MpsControl) -> list[int]:
        raise MpsHung("MPS control 'get_server_list' timed out after 2.0s")

    cfg = node_config(tmp_path, gpus=1)
    monkeypatch.setattr(MpsControl, "server_list", hung)
    steps = run_selftest(cfg, 0)
    got = _statuses(steps)
    assert got["mps daemon"] == FAIL and "timed out" in steps[-2].message
    assert got["mps stop"] == OK and _modes(cfg) == {"GPU-test-0": 0}
    assert procs.mps_processes(str(Path(cfg.node.run_dir) / "selftest/mps/GPU-test-0/pipe")) == []


def test_no_such_gpu(tmp_path: Path) -> None:
    steps = run_selftest(node_config(tmp_path, gpus=1), 3)
    assert [(s.name, s.status) for s in steps] == [("nvml", FAIL)]


def test_a_gpu_lock_replaced_by_a_directory_is_named(tmp_path: Path) -> None:
    """Expected: a FAIL that names the file, not a traceback from opening the lock."""
    cfg = node_config(tmp_path, gpus=1)
    lock = NodeLayout.of_config(cfg).gpu_lock(0)
    lock.mkdir(parents=True)
    steps = run_selftest(cfg, 0)
    assert [(s.name, s.status) for s in steps] == [("nvml", OK), ("gpu files", FAIL)]
    assert steps[1].message == f"{lock} is not a regular file"


@pytest.mark.parametrize(
    "reading,sm,mem",
    [
        # as on the H200: 50 % gave 66 of 132 SMs; the context saw 1.5 of 2 GiB free,
        # a little fit, the limit more did not
        ({"sm_count": 66, "free_gib": 1.5, "alloc": "ok", "alloc_more": "OOM"}, OK, OK),
        ({"sm_count": 132, "free_gib": 139.2, "alloc": "ok", "alloc_more": "ok"}, FAIL, FAIL),
        ({"sm_count": 20, "free_gib": 1.5, "alloc": "OOM", "alloc_more": "x"}, FAIL, FAIL),
        # refused for another reason while the memory the client sees is not limited
        ({"sm_count": 66, "free_gib": 139.2, "alloc": "ok", "alloc_more": "OOM"}, OK, FAIL),
    ],
)
def test_limits_verdict(reading: dict, sm: str, mem: str) -> None:
    steps = _limits({"sm_count": 132, "total_gib": 139.8}, reading)
    assert [(s.name, s.status) for s in steps] == [
        ("thread percentage", sm),
        ("pinned memory limit", mem),
    ]
    assert _limits({"sm_count": 132}, {"error": "cuInit: CUDA_ERROR_NO_DEVICE"})[0].status == FAIL


def test_a_client_that_says_nothing_is_an_error() -> None:
    import subprocess

    from slurm_colo.node.selftest import _first_line

    for code, want in (("pass", "exited, no reading"), ("import time; time.sleep(5)", "nothing")):
        p = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True
        )
        try:
            assert want in _first_line(p, 0.5)["error"]
        finally:
            p.kill()
            p.communicate()


def test_cli_tests_every_gpu_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_colo.cli import app

    node_config(tmp_path, gpus=2)
    monkeypatch.setenv("SLURM_COLO_CONFIG", str(tmp_path / "config.toml"))
    r = CliRunner().invoke(app, ["node", "selftest", "--json"])
    assert r.exit_code == 0, r.output
    got = {c["name"]: c["status"] for c in json.loads(r.output)}
    assert got["GPU 0 mps client"] == got["GPU 1 mps client"] == OK
    assert got["GPU 1 mps stop"] == OK
    r = CliRunner().invoke(app, ["node", "selftest", "--gpu", "1", "--gpu", "5"])
    assert r.exit_code == 1 and "[OK  ] GPU 1 mps stop" in r.output
    assert "[FAIL] GPU 5 nvml" in r.output and "GPU 0" not in r.output
    assert load_config(tmp_path / "config.toml").node.mps_backend == "emulator"

"""The NVML gate against recorded readings (fake pynvml), the real binding, and the
scenario backend: every call guarded, a lost GPU a null object, NOT_SUPPORTED a value."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pynvml
import pytest

from slurm_colo.emulators.nvml_scenario import ScenarioNvml
from slurm_colo.errors import NVMLError
from slurm_colo.node.gpu.nvml import (
    COMPUTE_DEFAULT,
    COMPUTE_EXCLUSIVE_PROCESS,
    NOT_SUPPORTED,
    NullGpu,
    NvmlGate,
    open_nvml,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures" / "nvml"))
from fake_pynvml import FakePynvml


def test_recorded_v100_readings_through_the_real_gate() -> None:
    gate = NvmlGate(FakePynvml.load(), "recorded")
    assert gate.available and gate.device_count() == 2
    g = gate.gpu(0)
    assert g.uuid() == "GPU-5d3a1c8e-7b1f-4c2a-9e0d-2f6b8a1c3e77"
    assert g.name() == "Tesla V100-SXM2-16GB"
    assert g.memory() == (9663676416, 17179869184)
    assert g.utilization() == (87, 41)
    assert g.sm_clock_mhz() == 1530
    assert g.power_w() == pytest.approx(231.45)
    assert g.processes() == {20411: 6442450944, 20417: 3221225472}
    # several samples of one pid: the gate keeps the highest SM share
    assert g.process_sm_util(0) == {20411: 66, 20417: 24}
    assert g.process_sm_util(1710148442000000) == {20411: 66}
    assert not g.lost and g.errors == []


def test_captured_h200_under_mps_through_the_real_gate() -> None:
    """Captured on an H200 (driver 580.159.04) with an MPS server and two clients: the
    compute processes list the server and each client with its own memory; the SM samples
    name only the server."""
    g = NvmlGate(FakePynvml.load("h200_mps_node.json"), "recorded").gpu(0)
    assert g.name() == "NVIDIA H200" and g.uuid() == "GPU-45b790c7-e483-7e6c-dcc1-4fbc9e64ad21"
    assert g.memory() == (3922526208, 150754820096)
    assert g.processes() == {624: 69206016, 643: 1530920960, 642: 1667235840}
    assert g.process_sm_util(0) == {624: 71}
    assert g.utilization() == (100, 26) and g.power_w() == pytest.approx(666.435)
    assert g.compute_mode() == COMPUTE_DEFAULT and g.errors == []


def test_not_supported_and_not_found_are_values() -> None:
    g = NvmlGate(FakePynvml.load(), "recorded").gpu(1)
    assert g.power_w() is NOT_SUPPORTED
    assert g.process_sm_util(0) == {}  # NVML_ERROR_NOT_FOUND: no sample yet
    assert g.utilization() == (0, 0)
    assert not g.lost


def test_lost_gpu_becomes_null_object_other_gpu_keeps_working() -> None:
    nv = FakePynvml.load()
    nv.fail[("nvmlDeviceGetUtilizationRates", 0)] = "GPU_IS_LOST"
    gate = NvmlGate(nv, "recorded")
    g0, g1 = gate.gpu(0), gate.gpu(1)
    assert g0.utilization() is None and g0.lost
    n_calls = len(nv.calls)
    assert g0.memory() is None and g0.uuid() is None and g0.processes() is None
    assert len(nv.calls) == n_calls  # a lost GPU is not asked again
    assert g1.memory() == (4194304, 42949672960) and not g1.lost


def test_other_errors_make_one_reading_none() -> None:
    nv = FakePynvml.load()
    nv.fail[("nvmlDeviceGetClockInfo", 0)] = "TIMEOUT"
    g = NvmlGate(nv, "recorded").gpu(0)
    assert g.sm_clock_mhz() is None
    assert not g.lost and "Timeout" in g.errors[0] or "timeout" in g.errors[0].lower()
    assert g.utilization() == (87, 41)


def test_compute_mode_set_and_failure() -> None:
    nv = FakePynvml.load()
    g = NvmlGate(nv, "recorded").gpu(0)
    assert g.set_compute_mode(COMPUTE_EXCLUSIVE_PROCESS) is True
    assert g.compute_mode() == COMPUTE_EXCLUSIVE_PROCESS
    nv.fail[("nvmlDeviceSetComputeMode", 0)] = "NO_PERMISSION"
    assert g.set_compute_mode(COMPUTE_DEFAULT) is False
    assert nv.set_modes == [(0, COMPUTE_EXCLUSIVE_PROCESS)]


def test_init_failure_is_unavailable_not_a_crash() -> None:
    gate = NvmlGate(FakePynvml.load(init_error="DRIVER_NOT_LOADED"), "recorded")
    assert not gate.available and "nvmlInit failed" in gate.reason
    assert gate.device_count() == 0
    g = gate.gpu(0)
    assert isinstance(g, NullGpu) and g.memory() is None and g.utilization() is None


def test_real_binding_without_gpu_does_not_fall_back_to_scenario() -> None:
    gate = open_nvml("real")  # this machine has no NVIDIA driver
    assert gate.nv is pynvml and gate.source == "pynvml"
    assert not gate.available and "nvmlInit failed" in gate.reason
    assert gate.gpu(0).uuid() is None


def _scenario(tmp_path: Path, gpus: list[dict], **extra: object) -> str:
    p = tmp_path / "scenario.json"
    p.write_text(json.dumps({"gpus": gpus, **extra}))
    return str(p)


def test_scenario_is_explicit_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _scenario(tmp_path, [{"uuid": "GPU-s0", "sm_util": [[0, 10], [0.0, 70]]}])
    with caplog.at_level("WARNING"):
        gate = open_nvml("scenario", path, str(tmp_path))
    assert "scenario backend in use" in caplog.text
    assert gate.gpu(0).utilization() == (70, 0)
    with pytest.raises(NVMLError):
        open_nvml("scenario", "", str(tmp_path))
    with pytest.raises(NVMLError):
        open_nvml("scenario", str(tmp_path / "missing.json"), str(tmp_path))


def test_scenario_gpu_lost_mid_job_and_unsupported(tmp_path: Path) -> None:
    nv = ScenarioNvml(
        {
            "t0": 1.0,
            "gpus": [
                {"uuid": "GPU-a", "not_supported": ["power"]},
                {"uuid": "GPU-b", "lost_after_s": 0},
            ],
        }
    )
    gate = NvmlGate(nv, "scenario")
    assert gate.gpu(0).power_w() is NOT_SUPPORTED
    assert gate.gpu(1).memory() is None and gate.gpu(1).lost
    assert gate.gpu(0).memory() is not None


def test_scenario_compute_mode_persists_between_processes(tmp_path: Path) -> None:
    path = _scenario(tmp_path, [{"uuid": "GPU-a"}])
    a = open_nvml("scenario", path, str(tmp_path)).gpu(0)
    assert a.set_compute_mode(COMPUTE_EXCLUSIVE_PROCESS)
    b = open_nvml("scenario", path, str(tmp_path)).gpu(0)  # e.g. the Epilog, later
    assert b.compute_mode() == COMPUTE_EXCLUSIVE_PROCESS


def test_scenario_init_error(tmp_path: Path) -> None:
    gate = open_nvml(
        "scenario", _scenario(tmp_path, [{}], init_error="DRIVER_NOT_LOADED"), str(tmp_path)
    )
    assert not gate.available and gate.device_count() == 0


def test_a_gpu_nvml_does_not_list_is_absent_a_lost_one_is_not(tmp_path: Path) -> None:
    gate = open_nvml("scenario", _scenario(tmp_path, [{}, {"lost_after_s": 0}]), str(tmp_path))
    missing = gate.gpu(5)
    assert isinstance(missing, NullGpu) and missing.absent
    assert missing.errors == ["NVML lists 2 GPU(s) on this node, no GPU 5"]
    assert not isinstance(gate.gpu(1), NullGpu) and not getattr(gate.gpu(1), "absent", False)
    assert not NullGpu(0, "no NVML").absent  # NVML not running: cannot tell


def test_null_gpu_answers_every_call_with_none() -> None:
    g = NullGpu(3, "no NVML")
    assert [
        g.uuid(),
        g.name(),
        g.memory(),
        g.utilization(),
        g.sm_clock_mhz(),
        g.power_w(),
        g.processes(),
        g.process_sm_util(0),
        g.compute_mode(),
    ] == [None] * 9
    assert g.set_compute_mode(COMPUTE_DEFAULT) is False

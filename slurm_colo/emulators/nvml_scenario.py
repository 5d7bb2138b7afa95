"""NVML scenario backend: a module object with pynvml's API, driven by a JSON file.

Selected only by ``node.nvml_backend = "scenario"`` (tests and the lab). It raises the
real ``pynvml.NVMLError`` classes, so the gate's error handling is exercised as on a node.

Scenario file (all keys optional except ``gpus``)::

    {"init_error": "DRIVER_NOT_LOADED",              # nvmlInit raises this
     "gpus": [{"uuid": "GPU-…", "name": "Tesla V100-SXM2-16GB", "memory_total_mib": 16160,
               "sm_util": [[0, 0], [10, 85], [60, 40]],   # [seconds, value] step curve
               "mem_util": 30, "memory_used_mib": [[0, 500], [5, 9000]],
               "power_w": 210.5, "sm_clock_mhz": 1530,
               "processes": [{"pid": 4242, "used_mib": 8800, "sm_util": 80}],
               "lost_after_s": 30,                    # GPU_IS_LOST from then on
               "not_supported": ["power", "process_utilization"],
               "errors": {"utilization": "UNKNOWN"}}]}   # one call raising

Time is seconds since ``t0`` (epoch seconds in the file), default: first use in this
process. Compute modes set through the API persist in ``<state_dir>/nvml-scenario-state.json``
so a Prolog's setting is seen by the Epilog.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml as _nv

from slurm_colo.errors import NVMLError
from slurm_colo.fsutil import atomic_write_json, read_json

_CALL_KEYS = {
    "nvmlDeviceGetUtilizationRates": "utilization",
    "nvmlDeviceGetPowerUsage": "power",
    "nvmlDeviceGetClockInfo": "clocks",
    "nvmlDeviceGetMemoryInfo": "memory",
    "nvmlDeviceGetComputeRunningProcesses": "processes",
    "nvmlDeviceGetProcessUtilization": "process_utilization",
    "nvmlDeviceSetComputeMode": "set_compute_mode",
    "nvmlDeviceGetUUID": "uuid",
}


def _curve(spec: Any, t: float) -> float:
    if isinstance(spec, (int, float)):
        return float(spec)
    if isinstance(spec, list) and spec:
        val = float(spec[0][1])
        for at, v in spec:
            if t >= float(at):
                val = float(v)
        return val
    return 0.0


def _err(name: str) -> BaseException:
    code = getattr(_nv, f"NVML_ERROR_{name.upper()}", _nv.NVML_ERROR_UNKNOWN)
    return _nv.NVMLError(code)


class ScenarioNvml:
    """Module-like object: ``nv.nvmlInit()``, ``nv.nvmlDeviceGetCount()``, … as pynvml."""

    NVMLError = _nv.NVMLError
    NVML_ERROR_NOT_SUPPORTED = _nv.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_GPU_IS_LOST = _nv.NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = _nv.NVML_ERROR_UNKNOWN
    NVML_ERROR_NOT_FOUND = _nv.NVML_ERROR_NOT_FOUND
    NVML_CLOCK_SM = _nv.NVML_CLOCK_SM

    def __init__(self, spec: dict[str, Any], state_dir: str = "") -> None:
        if not isinstance(spec.get("gpus"), list):
            raise NVMLError("NVML scenario has no 'gpus' list")
        self.spec = spec
        self.gpus: list[dict[str, Any]] = spec["gpus"]
        self.t0 = float(spec.get("t0") or time.time())
        self.state_path = Path(state_dir) / "nvml-scenario-state.json" if state_dir else None
        self._modes: dict[str, int] = {}

    @classmethod
    def from_file(cls, path: str, state_dir: str = "") -> ScenarioNvml:
        if not path:
            raise NVMLError("node.nvml_backend = scenario needs node.nvml_scenario = FILE")
        try:
            spec = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise NVMLError(f"cannot read NVML scenario {path}: {e}") from None
        return cls(spec, state_dir)

    # -- helpers -------------------------------------------------------------------------
    def _t(self) -> float:
        return time.time() - self.t0

    def _gpu(self, handle: Any, call: str) -> dict[str, Any]:
        g = self.gpus[handle.index]
        lost_after = g.get("lost_after_s")
        if lost_after is not None and self._t() >= float(lost_after):
            raise _nv.NVMLError(_nv.NVML_ERROR_GPU_IS_LOST)
        key = _CALL_KEYS.get(call, call)
        if key in g.get("not_supported", ()):
            raise _nv.NVMLError(_nv.NVML_ERROR_NOT_SUPPORTED)
        if key in g.get("errors", {}):
            raise _err(g["errors"][key])
        return g

    def _mode_state(self) -> dict[str, int]:
        if self.state_path is not None:
            return dict(read_json(self.state_path) or {})
        return self._modes

    # -- pynvml API ----------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.spec.get("init_error"):
            raise _err(self.spec["init_error"])

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise _nv.NVMLError(_nv.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return str(self._gpu(h, "nvmlDeviceGetUUID").get("uuid", f"GPU-scenario-{h.index}"))

    def nvmlDeviceGetName(self, h: Any) -> str:
        return str(self._gpu(h, "name").get("name", "Scenario GPU"))

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        total = int(float(g.get("memory_total_mib", 16384)) * 2**20)
        used = int(_curve(g.get("memory_used_mib", 0), self._t()) * 2**20)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        t = self._t()
        return SimpleNamespace(
            gpu=int(_curve(g.get("sm_util", 0), t)), memory=int(_curve(g.get("mem_util", 0), t))
        )

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        return int(
            _curve(self._gpu(h, "nvmlDeviceGetClockInfo").get("sm_clock_mhz", 1380), self._t())
        )

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return int(
            _curve(self._gpu(h, "nvmlDeviceGetPowerUsage").get("power_w", 100), self._t()) * 1000
        )

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [
            SimpleNamespace(
                pid=int(p["pid"]), usedGpuMemory=int(float(p.get("used_mib", 0)) * 2**20)
            )
            for p in g.get("processes", [])
        ]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since_us: int) -> list[Any]:
        g = self._gpu(h, "nvmlDeviceGetProcessUtilization")
        procs = [p for p in g.get("processes", []) if "sm_util" in p]
        if not procs:
            raise _nv.NVMLError(_nv.NVML_ERROR_NOT_FOUND)
        now_us = int(time.time() * 1e6)
        return [
            SimpleNamespace(
                pid=int(p["pid"]),
                smUtil=int(p["sm_util"]),
                memUtil=int(p.get("mem_util", 0)),
                timeStamp=now_us,
            )
            for p in procs
        ]

    def nvmlDeviceGetComputeMode(self, h: Any) -> int:
        g = self._gpu(h, "compute_mode")
        return int(self._mode_state().get(str(g.get("uuid", h.index)), 0))

    def nvmlDeviceSetComputeMode(self, h: Any, mode: int) -> None:
        g = self._gpu(h, "nvmlDeviceSetComputeMode")
        modes = self._mode_state()
        modes[str(g.get("uuid", h.index))] = int(mode)
        if self.state_path is not None:
            atomic_write_json(self.state_path, modes, mode=0o644, fsync=False)
        else:
            self._modes = modes

"""One typed gate to NVML. Every call is guarded:

- a call NVML answers with ``NOT_SUPPORTED`` returns :data:`NOT_SUPPORTED` (a value);
- a GPU that answers ``GPU_IS_LOST`` (or ``UNKNOWN``) is marked lost and from then on
  behaves as a null object (every reading None);
- any other NVML error makes that one reading None and is remembered in ``errors``.

The gate wraps a module object with pynvml's API: the official ``pynvml`` (from
``nvidia-ml-py``) or the scenario emulator (:mod:`slurm_colo.emulators.nvml_scenario`), so both run through
exactly the same code. :func:`open_nvml` picks by ``node.nvml_backend`` and never falls
back from real to scenario.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger("slurm_colo.node.gpu.nvml")
T = TypeVar("T")


class _NotSupported:
    _inst: _NotSupported | None = None

    def __new__(cls) -> _NotSupported:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "NOT_SUPPORTED"

    def __bool__(self) -> bool:
        return False


#: the value of a reading this GPU/driver does not support
NOT_SUPPORTED = _NotSupported()

COMPUTE_DEFAULT = 0
COMPUTE_EXCLUSIVE_PROCESS = 3


def value(x: Any) -> Any:
    """A reading as a plain value: NOT_SUPPORTED becomes None."""
    return None if x is NOT_SUPPORTED else x


@dataclass
class Gpu:
    """One GPU behind the gate. After a lost-GPU error every reading is None."""

    nv: Any
    index: int
    handle: Any
    lost: bool = False
    errors: list[str] = field(default_factory=list)

    def _call(self, fn: Callable[..., T] | str, *args: Any) -> T | _NotSupported | None:
        """Call ``fn`` (or the binding's function of that name) through the guard."""
        if self.lost:
            return None
        nv = self.nv
        try:
            if isinstance(fn, str):
                fn = getattr(nv, fn)
            return fn(*args)  # type: ignore[operator]
        except nv.NVMLError as e:
            code = getattr(e, "value", None)
            if code == nv.NVML_ERROR_NOT_SUPPORTED:
                return NOT_SUPPORTED
            if code in (nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_UNKNOWN):
                self.lost = True
                log.warning("GPU %d lost: %s", self.index, e)
            self.errors.append(f"{getattr(fn, '__name__', 'nvml')}: {e}")
            return None
        except Exception as e:  # a binding bug must not take the caller down
            self.errors.append(f"{getattr(fn, '__name__', 'nvml')}: {type(e).__name__}: {e}")
            return None

    def uuid(self) -> str | None:
        u = self._call("nvmlDeviceGetUUID", self.handle)
        return u.decode() if isinstance(u, bytes) else (u if isinstance(u, str) else None)

    def name(self) -> str | None:
        n = self._call("nvmlDeviceGetName", self.handle)
        return n.decode() if isinstance(n, bytes) else (n if isinstance(n, str) else None)

    def memory(self) -> tuple[int, int] | None:
        """(used bytes, total bytes)."""
        m = self._call("nvmlDeviceGetMemoryInfo", self.handle)
        if m is None or isinstance(m, _NotSupported):
            return None
        return int(m.used), int(m.total)

    def utilization(self) -> tuple[int, int] | _NotSupported | None:
        """(SM busy %, memory-bandwidth busy %) over the driver's last sample period."""
        u = self._call("nvmlDeviceGetUtilizationRates", self.handle)
        if u is None or isinstance(u, _NotSupported):
            return u
        return int(u.gpu), int(u.memory)

    def sm_clock_mhz(self) -> int | _NotSupported | None:
        return self._call("nvmlDeviceGetClockInfo", self.handle, 1)  # NVML_CLOCK_SM

    def power_w(self) -> float | _NotSupported | None:
        mw = self._call("nvmlDeviceGetPowerUsage", self.handle)
        if mw is None or isinstance(mw, _NotSupported):
            return mw
        return float(mw) / 1000.0

    def processes(self) -> dict[int, int] | None:
        """Compute processes on this GPU: pid -> used bytes (0 when NVML can't tell)."""
        ps = self._call("nvmlDeviceGetComputeRunningProcesses", self.handle)
        if ps is None or isinstance(ps, _NotSupported):
            return None
        return {int(p.pid): int(p.usedGpuMemory or 0) for p in ps}

    def process_sm_util(self, since_us: int) -> dict[int, int] | _NotSupported | None:
        """Per-process SM %, samples newer than ``since_us`` (NVML timestamp, µs).

        NVML answers NOT_FOUND when there is no new sample: that is an empty dict here.
        """
        nv = self.nv
        if self.lost:
            return None
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(self.handle, since_us)
        except nv.NVMLError as e:
            if getattr(e, "value", None) == nv.NVML_ERROR_NOT_FOUND:
                return {}
            return self._call(_raise, e)  # classify through the same guard
        except Exception as e:
            self.errors.append(f"nvmlDeviceGetProcessUtilization: {e}")
            return None
        out: dict[int, int] = {}
        for s in samples:
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
        return out

    def compute_mode(self) -> int | None:
        m = self._call("nvmlDeviceGetComputeMode", self.handle)
        return m if isinstance(m, int) else None

    def set_compute_mode(self, mode: int) -> bool:
        """Set the compute mode (root only); True on success."""
        if self.lost:
            return False
        set_mode = self.nv.nvmlDeviceSetComputeMode

        def nvmlDeviceSetComputeMode(handle: Any, m: int) -> bool:
            set_mode(handle, m)
            return True

        return self._call(nvmlDeviceSetComputeMode, self.handle, mode) is True


def _raise(e: BaseException) -> None:
    raise e


class NullGpu(Gpu):
    """A GPU we cannot reach: every reading is None. ``absent``: NVML runs and lists no GPU
    of that index on this node (not one it lost: that is a :class:`Gpu` marked lost)."""

    def __init__(self, index: int, reason: str, absent: bool = False) -> None:
        super().__init__(nv=None, index=index, handle=None, lost=True, errors=[reason])
        self.absent = absent


class NvmlGate:
    """NVML for one process. ``available`` False means NVML could not start (``reason``)."""

    def __init__(self, nv: Any, source: str) -> None:
        self.nv = nv
        self.source = source
        self.available = False
        self.reason = ""
        self._gpus: dict[int, Gpu] = {}
        if nv is None:
            self.reason = "NVML binding not importable"
            return
        try:
            nv.nvmlInit()
            self.available = True
        except Exception as e:
            self.reason = f"nvmlInit failed: {e}"

    def device_count(self) -> int:
        if not self.available:
            return 0
        try:
            return int(self.nv.nvmlDeviceGetCount())
        except Exception:
            return 0

    def gpu(self, index: int) -> Gpu:
        if index in self._gpus:
            return self._gpus[index]
        if not self.available:
            return NullGpu(index, self.reason)
        try:
            g = Gpu(self.nv, index, self.nv.nvmlDeviceGetHandleByIndex(index))
        except Exception as e:
            g = NullGpu(index, f"no handle for GPU {index}: {e}")
            try:
                count = int(self.nv.nvmlDeviceGetCount())
            except Exception:
                count = None  # cannot tell: not called absent
            if count is not None and not 0 <= index < count:
                g = NullGpu(index, f"NVML lists {count} GPU(s) on this node, no GPU {index}", True)
        self._gpus[index] = g
        return g

    def close(self) -> None:
        if self.available:
            try:
                self.nv.nvmlShutdown()
            except Exception:
                pass
            self.available = False


def open_nvml(backend: str, scenario: str = "", state_dir: str = "") -> NvmlGate:
    """The gate for ``node.nvml_backend``. ``scenario`` is explicit opt-in and logged."""
    if backend == "scenario":
        from slurm_colo.emulators.nvml_scenario import ScenarioNvml

        log.warning(
            "NVML scenario backend in use (%s): readings are emulated, not real",
            scenario or "<no file>",
        )
        return NvmlGate(ScenarioNvml.from_file(scenario, state_dir), f"scenario:{scenario}")
    try:
        import pynvml
    except ImportError:
        return NvmlGate(None, "pynvml")
    return NvmlGate(pynvml, "pynvml")

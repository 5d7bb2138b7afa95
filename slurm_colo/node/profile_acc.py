"""Streaming profile summary with bounded memory (pure: no I/O).

Each tick adds one reading of the job's GPU(s); solo ticks (no co-runner on the GPU) and
shared ticks are summarised apart, because NVML cannot split device utilisation between
processes sharing a GPU: the solo phase is the job's clean profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = float(2**30)


@dataclass
class _Series:
    """Mean / max / p95 of values in 0..100 via a 101-bin histogram (fixed memory)."""

    n: int = 0
    total: float = 0.0
    peak: float = 0.0
    hist: list[int] = field(default_factory=lambda: [0] * 101)

    def add(self, v: float) -> None:
        self.n += 1
        self.total += v
        self.peak = max(self.peak, v)
        self.hist[min(100, max(0, int(round(v))))] += 1

    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def p95(self) -> float | None:
        if not self.n:
            return None
        need, seen = 0.95 * self.n, 0
        for v, c in enumerate(self.hist):
            seen += c
            if seen >= need:
                return float(v)
        return 100.0


@dataclass
class _Num:
    n: int = 0
    total: float = 0.0
    peak: float = 0.0

    def add(self, v: float) -> None:
        self.n += 1
        self.total += v
        self.peak = max(self.peak, v)

    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


def _div(x: float | None, d: float) -> float | None:
    return None if x is None else x / d


@dataclass
class _Phase:
    ticks: int = 0
    seconds: float = 0.0
    sm: _Series = field(default_factory=_Series)
    bw: _Series = field(default_factory=_Series)
    mem: _Num = field(default_factory=_Num)
    power: _Num = field(default_factory=_Num)
    clock: _Num = field(default_factory=_Num)
    job_mem: _Num = field(default_factory=_Num)
    proc_sm: _Series = field(default_factory=_Series)

    def summary(self) -> dict[str, Any]:
        def r(x: float | None, k: int = 2) -> float | None:
            return None if x is None else round(x, k)

        return {
            "samples": self.ticks,
            "seconds": round(self.seconds, 1),
            "sm_util_mean": r(self.sm.mean()),
            "sm_util_p95": self.sm.p95(),
            "mem_bw_util_mean": r(self.bw.mean()),
            "mem_used_mean_gib": r(_div(self.mem.mean(), GIB), 3),
            "mem_peak_gib": r(self.mem.peak / GIB if self.mem.n else None, 3),
            "power_w_mean": r(self.power.mean(), 1),
            "sm_clock_mhz_mean": r(self.clock.mean(), 0),
            "job_mem_peak_gib": r(self.job_mem.peak / GIB if self.job_mem.n else None, 3),
            "job_sm_util_mean": r(self.proc_sm.mean()),
        }


@dataclass
class Reading:
    """One tick, averaged over the job's GPUs (None: not available this tick)."""

    sm_util: float | None = None
    mem_bw_util: float | None = None
    mem_used: float | None = None  # bytes, summed over the job's GPUs
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    job_mem: float | None = None  # bytes used by the job's own processes (NVML per-process)
    job_sm_util: float | None = None  # SM % of the job's own processes, where NVML allows


@dataclass
class ProfileAccumulator:
    interval_s: float = 1.0
    solo: _Phase = field(default_factory=_Phase)
    shared: _Phase = field(default_factory=_Phase)
    all: _Phase = field(default_factory=_Phase)

    def add(self, r: Reading, shared: bool, dt: float | None = None) -> None:
        dt = self.interval_s if dt is None else dt
        for ph in (self.all, self.shared if shared else self.solo):
            ph.ticks += 1
            ph.seconds += dt
            for series, v in (
                (ph.sm, r.sm_util),
                (ph.bw, r.mem_bw_util),
                (ph.mem, r.mem_used),
                (ph.power, r.power_w),
                (ph.clock, r.sm_clock_mhz),
                (ph.job_mem, r.job_mem),
                (ph.proc_sm, r.job_sm_util),
            ):
                if v is not None:
                    series.add(float(v))

    def summary(self) -> dict[str, Any]:
        """Flat keys (the record contract: whole job) plus ``solo`` and ``shared`` phases."""
        out = self.all.summary()
        out.pop("seconds")
        out["solo_s"] = round(self.solo.seconds, 1)
        out["shared_s"] = round(self.shared.seconds, 1)
        out["solo"] = self.solo.summary()
        out["shared"] = self.shared.summary()
        return out

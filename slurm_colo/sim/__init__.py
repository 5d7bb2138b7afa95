"""Trace-driven simulator comparing GPU sharing policies on measured interference data.

Pure modules: :mod:`.trace` (job traces; file readers are the only I/O), :mod:`.truth`
(measured throughputs), :mod:`.engine` (events), :mod:`.policies` (schedulers),
:mod:`.metrics` (figures), :mod:`.run` (side-by-side runs). Plots: :mod:`.plots`.
"""

from .engine import Sim, SimConfig, SimError
from .metrics import Result, summarize, table
from .run import POLICIES, Setup, simulate
from .trace import SimJob, TraceError, philly_trace, sacct_trace

__all__ = [
    "POLICIES",
    "Result",
    "Setup",
    "Sim",
    "SimConfig",
    "SimError",
    "SimJob",
    "TraceError",
    "philly_trace",
    "sacct_trace",
    "simulate",
    "summarize",
    "table",
]

"""The notes ``job_submit.lua`` writes in a job's comment itself, without an answer from
the agent (the agent and ``slurm-colo explain`` read them back from Slurm)."""

from __future__ import annotations

#: a job the hook gave the fallback: the agent was down, or did not answer in time
FALLBACK_NOTE = "colo: agent unavailable"
#: every note the hook writes on its own (the agent's answer to input it refuses also
#: starts "colo: not shared (")
HOOK_NOTES = (
    FALLBACK_NOTE,
    "colo: interactive job",
    "colo: job array not shared",
    "colo: heterogeneous job not shared",
    "colo: not shared (",
    "colo: multi-GPU/multi-node jobs are never shared",
)

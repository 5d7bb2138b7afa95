"""A Slurm backend for agent tests that need no Slurm: no jobs, the nodes it is given."""

from __future__ import annotations

from slurm_colo.slurm.model import SlurmJob, SlurmNode


class QuietSlurm:
    """The agent's Slurm gate with nothing running: ``nodes`` are idle."""

    name = "fake"

    def __init__(self, *nodes: str) -> None:
        self._nodes = [SlurmNode(n, "IDLE") for n in nodes]

    def jobs(self) -> list[SlurmJob]:
        return []

    def job(self, job_id: int) -> SlurmJob | None:
        return None

    def nodes(self) -> list[SlurmNode]:
        return list(self._nodes)


class FixedSlurm:
    """The agent's Slurm gate showing the same ``jobs`` and ``nodes`` at every look."""

    name = "fake"

    def __init__(self, jobs: list[SlurmJob], nodes: list[SlurmNode]) -> None:
        self._jobs = jobs
        self._nodes = nodes

    def jobs(self) -> list[SlurmJob]:
        return self._jobs

    def job(self, job_id: int) -> SlurmJob | None:
        return None

    def nodes(self) -> list[SlurmNode]:
        return self._nodes

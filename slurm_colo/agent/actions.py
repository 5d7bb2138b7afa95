"""The changes the agent makes in Slurm, worked out under its lock and run outside it
(agent/server.py, :meth:`~.server.Agent.run_actions`). No I/O."""

from __future__ import annotations

from dataclasses import dataclass

from ..contracts.placement import Placement
from ..slurm.model import scontrol_name


@dataclass(frozen=True)
class Action:
    """A change to make in Slurm: ``requeue_hold``, ``aim`` (set ReqNodeList, the shard
    request of a job held without one, release), ``admin_hold``, ``retarget`` (a re-plan)
    or ``extend`` (add ``minutes`` to a shared job's time limit)."""

    kind: str
    job_id: int
    admin_comment: str = ""
    comment: str = ""
    node: str = ""
    #: aim: the shard request to set (a job held without a GPU request), else ""
    gres: str = ""
    #: aim of a job held without a GPU request: the GPU model it asked for
    model: str = ""
    #: the comments to put back if Slurm refuses the change: the job's before a requeue;
    #: for a held array's task, those that make it a held job of its own (its release
    #: refused after the update that split it from the array)
    restore: tuple[str, str] = ("", "")
    #: extend: minutes to add to the job's time limit
    minutes: int = 0
    #: aim: clear the job's start time (the two-minute wait Slurm puts on a requeued job);
    #: a job held at submission or off a closed node keeps its own (``--begin``)
    start_now: bool = False
    #: aim of a job held off a node closed to placement (so held again if Slurm refuses)
    withdrawn: bool = False
    #: retarget of one waiting task of a job array (``job_id`` the array's): Slurm splits
    #: it from the array into a job of its own
    task: int | None = None
    #: a job array's record that runs or waits as its last task (``job_id`` the array's,
    #: :attr:`~slurm_colo.slurm.model.SlurmJob.record_task`): that task, which Slurm must be
    #: told by name, since ``JobId=ARRAY`` means every task of the array
    array_task: int | None = None

    @property
    def placement_token(self) -> str:
        """The token of the placement this action's tag carries ("" without one): what a
        refused change of a placement the agent just made has to forget."""
        tag = Placement.from_tag(self.admin_comment)
        return tag.token if tag is not None else ""

    @property
    def target(self) -> str:
        """The job as ``scontrol`` names it: ``123``, or ``123_4`` for a task (one waiting in
        its array, or the one its array's record stands for)."""
        return scontrol_name(self.job_id, self.task if self.task is not None else self.array_task)

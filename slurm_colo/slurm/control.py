"""Changing jobs in Slurm: the agent's undo of a harmful placement, its hold of a pending job
placed on a node it then closed to placement, their release, re-plans and time limits.

Every change is an ``scontrol`` command: built by a pure function (``*_argv``), run in one
place (:meth:`ScontrolControl.run`, argv list, no shell, timeout). Slurm 22.05 facts this
relies on (checked on the lab): ``scontrol requeuehold`` stops a running batch job and
leaves it pending and held (reason ``job_requeued_in_held_state``, eligible again only
after two minutes); node-level fields (``ReqNodeList``) and comments update on a held job;
``StartTime=now`` clears the two-minute wait; ``scontrol release`` lets it start. A
pending job's GRES cannot be changed, so a requeued job keeps its shard type; but a
pending job submitted *without* GRES takes one (``TresPerNode=gres:shard:TYPE:1``) and
runs on a GPU of that type. ``scontrol hold`` as root turns a user's hold into an
administrator's, which the user cannot release, and holds a pending job so; a release
without ``StartTime=now`` leaves a job's ``--begin`` as it was (checked on 22.05, 24.11
and 26.05: tests/slurm/test_gres_order.py, tests/versions/test_colo.py).

On 24.11 and 26.05 a held job's GRES can be changed in every direction (docs/slurm-versions.md,
item 4). The GRES goes to ``TresPerNode=`` in the form of the installed Slurm
(:func:`slurm_colo.gres_layout.tres_gres`): ``gres/shard:TYPE:1`` from 23.11, the colon form
on 22.05, where the slash form is shown but not applied.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import SlurmError
from ..gres_layout import tres_gres
from .command import run_slurm
from .version import InstalledVersion, Version

TIMEOUT_S = 10.0


def requeue_hold_argv(job_id: int | str) -> list[str]:
    return ["scontrol", "requeuehold", str(job_id)]


def update_argv(job_id: int | str, **fields: str) -> list[str]:
    """``scontrol update JobId=N Key=Value...`` (one argv item per field, so values may hold
    spaces); ``N`` may name one task of an array (``123_4``)."""
    return ["scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items())]


def release_argv(job_id: int | str) -> list[str]:
    return ["scontrol", "release", str(job_id)]


def hold_argv(job_id: int | str) -> list[str]:
    return ["scontrol", "hold", str(job_id)]


class JobControl(Protocol):
    def requeue_hold(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        restore: tuple[str, str] = ("", ""),
    ) -> None: ...

    def aim_and_release(
        self,
        job_id: int | str,
        node: str,
        admin_comment: str,
        comment: str,
        gres: str = "",
        start_now: bool = False,
        restore: tuple[str, str] = ("", ""),
    ) -> None: ...

    def admin_hold(self, job_id: int | str) -> None: ...

    def hold_pending(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        restore: tuple[str, str] = ("", ""),
    ) -> None: ...

    def retarget(
        self, job_id: int | str, node: str, admin_comment: str, comment: str, gres: str
    ) -> None: ...

    def extend_time_limit(self, job_id: int | str, minutes: int) -> None: ...


class ScontrolControl:
    """:class:`JobControl` through ``scontrol`` (run as root or SlurmUser)."""

    def __init__(self, timeout_s: float = TIMEOUT_S, slurm_version: str | None = None) -> None:
        self.timeout_s = timeout_s
        self._version = InstalledVersion(slurm_version)

    @property
    def version(self) -> Version | None:
        """The installed Slurm's (major, minor), read once, when a GRES is first written."""
        return self._version.get()

    def run(self, argv: list[str]) -> None:
        run_slurm(argv, self.timeout_s)

    def requeue_hold(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        restore: tuple[str, str] = ("", ""),
    ) -> None:
        """Mark the job held (comments first: a job is never held without its tag), then
        requeue it held. If the requeue fails the comments go back to ``restore``
        (admin comment, comment) and the job runs on."""
        self._tag_then(job_id, admin_comment, comment, requeue_hold_argv(job_id), restore)

    def _tag_then(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        argv: list[str],
        restore: tuple[str, str],
    ) -> None:
        """Set the job's comments, then run ``argv``; if that fails, put the comments back
        (``restore``) and raise."""
        self.run(update_argv(job_id, AdminComment=admin_comment, Comment=comment))
        self._or_restore(job_id, argv, restore)

    def _or_restore(self, job_id: int | str, argv: list[str], restore: tuple[str, str]) -> None:
        """Run ``argv``; if that fails, set the job's comments to ``restore`` (admin comment,
        comment; nothing when both are empty) and raise."""
        try:
            self.run(argv)
        except SlurmError:
            try:
                if any(restore):
                    self.run(update_argv(job_id, AdminComment=restore[0], Comment=restore[1]))
            except SlurmError:
                pass  # the job ended meanwhile: nothing left to restore
            raise

    def aim_and_release(
        self,
        job_id: int | str,
        node: str,
        admin_comment: str,
        comment: str,
        gres: str = "",
        start_now: bool = False,
        restore: tuple[str, str] = ("", ""),
    ) -> None:
        """Set the job's node (none: keep its ReqNodeList), its GPU request (``gres``, a
        ``tres_per_node`` string in either form, for a job held without one; none: keep it)
        and comments, clear the wait after a requeue (``start_now``; else the job keeps its
        start time, e.g. a ``--begin``), release it. If the release fails after the update,
        the comments become ``restore`` (admin comment, comment) where given: a task of a
        held array is split from it by the update, so its tag must say again that it is
        held for the agent, which then finds it as a held job of its own."""
        fields = {"ReqNodeList": node} if node else {}
        if gres:
            fields["TresPerNode"] = tres_gres(gres, self.version)
        fields |= {"AdminComment": admin_comment, "Comment": comment}
        if start_now:
            fields["StartTime"] = "now"
        self.run(update_argv(job_id, **fields))
        self._or_restore(job_id, release_argv(job_id), restore)

    def admin_hold(self, job_id: int | str) -> None:
        """Make the job's hold the administrator's: its user can no longer release it."""
        self.run(hold_argv(job_id))

    def hold_pending(
        self,
        job_id: int | str,
        admin_comment: str,
        comment: str,
        restore: tuple[str, str] = ("", ""),
    ) -> None:
        """Mark a pending job held (comments first: a job is never held without its tag),
        then hold it as the administrator. If the hold fails the comments go back to
        ``restore`` (admin comment, comment)."""
        self._tag_then(job_id, admin_comment, comment, hold_argv(job_id), restore)

    def retarget(
        self, job_id: int | str, node: str, admin_comment: str, comment: str, gres: str
    ) -> None:
        """Give a pending job another GPU request (``gres``, e.g. a shard of one GPU) on
        ``node``, with its comments, in one update (Slurm 23.11+; a job that started
        meanwhile is refused by Slurm and keeps what it had). ``job_id`` ``123_4``: one
        waiting task of an array, which Slurm splits from the array into a job of its own."""
        self.run(
            update_argv(
                job_id,
                ReqNodeList=node,
                TresPerNode=tres_gres(gres, self.version),
                AdminComment=admin_comment,
                Comment=comment,
            )
        )

    def extend_time_limit(self, job_id: int | str, minutes: int) -> None:
        """Add ``minutes`` to the job's time limit (``TimeLimit=+N``: JobId comes first, as
        Slurm asks; only root, SlurmUser and operators may raise a limit)."""
        self.run(update_argv(job_id, TimeLimit=f"+{minutes}"))

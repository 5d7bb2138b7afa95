"""Changing jobs in Slurm (slurm/control.py): the commands built, and failures reported."""

from __future__ import annotations

import pytest

from slurm_colo.errors import SlurmError
from slurm_colo.slurm.control import ScontrolControl, release_argv, requeue_hold_argv, update_argv


class Recording(ScontrolControl):
    def __init__(self) -> None:
        super().__init__()
        self.argvs: list[list[str]] = []

    def run(self, argv: list[str]) -> None:
        self.argvs.append(argv)


def test_commands() -> None:
    assert requeue_hold_argv(12) == ["scontrol", "requeuehold", "12"]
    assert release_argv(12) == ["scontrol", "release", "12"]
    assert update_argv(12, ReqNodeList="gpu07", Comment="colo: a b") == [
        "scontrol",
        "update",
        "JobId=12",
        "ReqNodeList=gpu07",
        "Comment=colo: a b",
    ]


def test_undo_and_aim_are_the_documented_sequences() -> None:
    c = Recording()
    c.requeue_hold(12, "slurm-colo[v=1 tok=t held=v100_s1]", "colo: requeued")
    c.aim_and_release(
        12, "gpu07", "slurm-colo[v=1 tok=t undone=1]", "colo: now GPU 1", start_now=True
    )
    assert [a[1] for a in c.argvs] == ["update", "requeuehold", "update", "release"]
    assert "AdminComment=slurm-colo[v=1 tok=t held=v100_s1]" in c.argvs[0]
    assert c.argvs[2][2:] == [
        "JobId=12",
        "ReqNodeList=gpu07",
        "AdminComment=slurm-colo[v=1 tok=t undone=1]",
        "Comment=colo: now GPU 1",
        "StartTime=now",
    ]


def test_a_pending_job_is_held_after_its_tag_and_released_keeping_its_start_time() -> None:
    """A job held off a node closed to placement: comments, then the administrator's hold;
    its release leaves its start time (a --begin) alone."""
    c = Recording()
    c.hold_pending(12, "slurm-colo[v=1 tok=t held=v100_s2]", "colo: held: node n1 ...")
    c.aim_and_release(12, "n1", "slurm-colo[v=1 tok=t gpu=n1:2]", "colo: now", start_now=False)
    assert [a[1] for a in c.argvs] == ["update", "hold", "update", "release"]
    assert c.argvs[1] == ["scontrol", "hold", "12"]
    assert "AdminComment=slurm-colo[v=1 tok=t held=v100_s2]" in c.argvs[0]
    assert not any(x.startswith("StartTime") for x in c.argvs[2])

    class Refusing(Recording):
        def run(self, argv: list[str]) -> None:
            super().run(argv)
            if argv[1] == "hold":
                raise SlurmError("scontrol hold 12 failed: Job is not pending")

    r = Refusing()
    with pytest.raises(SlurmError, match="not pending"):
        r.hold_pending(12, "held tag", "held", restore=("old tag", "old comment"))
    assert r.argvs[-1][3:] == ["AdminComment=old tag", "Comment=old comment"]


def test_a_failed_requeue_restores_the_comments() -> None:
    class Refusing(Recording):
        def run(self, argv: list[str]) -> None:
            super().run(argv)
            if argv[1] == "requeuehold":
                raise SlurmError("scontrol requeuehold 12 failed: Access/permission denied")

    c = Refusing()
    with pytest.raises(SlurmError, match="permission denied"):
        c.requeue_hold(
            12,
            "slurm-colo[v=1 tok=t held=v100_s1]",
            "colo: requeued",
            restore=("slurm-colo[v=1 tok=t mech=mps gpu=n1:1]", "colo: GPU 1 of n1"),
        )
    assert c.argvs[-1][3:] == [
        "AdminComment=slurm-colo[v=1 tok=t mech=mps gpu=n1:1]",
        "Comment=colo: GPU 1 of n1",
    ]


def test_failures_name_the_command_and_slurms_message() -> None:
    c = ScontrolControl(timeout_s=5)
    with pytest.raises(SlurmError, match="not found"):
        c.run(["/nonexistent/scontrol", "release", "1"])
    with pytest.raises(SlurmError, match=r"failed: Invalid job id specified$"):
        c.run(["sh", "-c", "echo 'Invalid job id specified' >&2; exit 1"])
    c.run(["true"])


def test_a_time_limit_is_raised_by_an_increment_after_the_job_id() -> None:
    c = Recording()
    c.extend_time_limit(12, 7)
    assert c.argvs == [["scontrol", "update", "JobId=12", "TimeLimit=+7"]]


def test_a_task_whose_release_fails_after_its_update_is_marked_held_again() -> None:
    """The update splits a task from its held array; if its release then fails, the task
    must say it is held for the agent, or nobody would ever release it."""

    class NoRelease(Recording):
        def run(self, argv: list[str]) -> None:
            super().run(argv)
            if argv[1] == "release":
                raise SlurmError("scontrol release 40_3 failed: Socket timed out")

    held = ("slurm-colo[v=1 tok=a-3 cls=x mode=auto held=*]", "colo: job array held: ...")
    c = NoRelease()
    with pytest.raises(SlurmError, match="timed out"):
        c.aim_and_release(
            "40_3", "", "slurm-colo[v=1 tok=a cls=x mode=auto]", "c", "gres:gpu:1", restore=held
        )
    assert [a[1] for a in c.argvs] == ["update", "release", "update"]
    assert c.argvs[2][2:] == ["JobId=40_3", f"AdminComment={held[0]}", f"Comment={held[1]}"]

    class NoUpdate(Recording):
        def run(self, argv: list[str]) -> None:
            super().run(argv)
            raise SlurmError("scontrol update failed: Invalid job id specified")

    u = NoUpdate()  # the update itself refused: the task is still in its array, untouched
    with pytest.raises(SlurmError):
        u.aim_and_release("40_3", "", "tag", "c", "gres:gpu:1", restore=held)
    assert len(u.argvs) == 1
    plain = NoRelease()  # a job of its own: nothing to restore
    with pytest.raises(SlurmError):
        plain.aim_and_release(12, "n1", "tag", "c")
    assert [a[1] for a in plain.argvs] == ["update", "release"]

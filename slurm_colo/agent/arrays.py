"""Job arrays: one submission, many tasks, each shared on its own (Slurm 23.11 and later).

A placement made at submission would send every task of an array to the same GPU, judged
as one job. So the Lua hook asks with ``array=1`` and the agent never places the array
itself: the array keeps its own-GPU request and gets a tag saying it is a ``--colocate``
job (class, mode). Its tasks that wait in Slurm's queue are then re-planned one by one
(agent/replan.py): a task a shared GPU takes is given that GPU's shard request with
``scontrol update JobId=ARRAY_TASK``, which splits it from the array record into a job of
its own, tagged with its own placement. Slurm 22.05 cannot change a pending job's GRES, so
there (or with ``placement.replan = "off"``) an array is left as submitted, as before.

No I/O.
"""

from __future__ import annotations

import re

from ..placement.view import Decision

#: the note of an array whose waiting tasks the agent moves onto shared GPUs
SHARED_NOTE = (
    "colo: job array: each task waiting for a GPU is moved onto a shared GPU that takes it"
)
#: the note of an array left as submitted, and what its user is told at submission
NOT_SHARED_NOTE = "colo: job array not shared (each task keeps its own GPU request)"
NOT_SHARED_MSG = (
    "slurm-colo: job arrays are not shared on this cluster; submit the tasks as separate "
    "jobs to share GPUs"
)
#: a range of task ids in Slurm's list of an array's waiting tasks: 7, 2-5, 1-9:2
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def array_decision(can_change_tasks: bool, replan: bool) -> Decision:
    """What the agent answers for an array at submission: its own-GPU request kept, and its
    tasks re-planned as they wait where Slurm can change a waiting task's GRES
    (``can_change_tasks``) and the site re-plans (``placement.replan``); else not shared."""
    if can_change_tasks and replan:
        return Decision("exclusive", "job array: its tasks are moved onto shared GPUs as they wait")
    why = "placement.replan is off" if can_change_tasks else "Slurm cannot change a waiting task"
    return Decision("exclusive", f"job array: not shared ({why})")


def array_reply(shared: bool, tag: str) -> dict[str, str]:
    """The PLACE answer for an array; ``array`` says this agent knows arrays (the hook leaves
    an array as submitted when an older agent's answer lacks it)."""
    if shared:
        return {"action": "exclusive", "array": "1", "comment": SHARED_NOTE, "tag": tag}
    return {
        "action": "exclusive",
        "array": "1",
        "comment": NOT_SHARED_NOTE,
        "user_msg": NOT_SHARED_MSG,
    }


def waiting_tasks(text: str, limit: int) -> list[int]:
    """The first ``limit`` task ids of Slurm's list of an array's waiting tasks
    (``2-3,5``, ``1-9:2``, ``0-99%4`` with a throttle), in order; [] when it is not one."""
    text = text.split("%", 1)[0].strip().strip("[]")
    out: list[int] = []
    for part in text.split(",") if text else []:
        m = _RANGE.match(part.strip())
        if m is None:
            return []
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        step = int(m.group(3) or 1) or 1
        for t in range(first, last + 1, step):
            if len(out) >= limit:
                return out
            out.append(t)
    return out


def task_token(array_token: str, task: int) -> str:
    """The placement token of one task moved out of its array (the array's own token names
    the array, which every task that Slurm starts from it carries in its tag)."""
    return f"{array_token}-{task}"

"""Job arrays: one submission, many tasks, each shared on its own.

A placement made at submission would send every task of an array to the same GPU, judged
as one job. So the Lua hook asks with ``array=1`` and the agent never places the array
itself. It answers one of four ways (:func:`array_way`):

- ``held`` (``placement.unplaced`` holds, as on a site whose GPUs are all shared): the
  array is held without a GPU request, like a single held job; at each look the agent
  releases its tasks one by one onto shared GPUs that take them (agent/held_arrays.py):
  ``scontrol update JobId=ARRAY_TASK`` sets the task's shard request, node and tag, which
  splits it from the array record into a job of its own, then ``scontrol release`` starts
  it. Slurm 22.05 sets a GRES on a pending job that has none, so this works there too.
- ``moved`` (else, where Slurm can change a pending job's GRES, 23.11+, and
  ``placement.replan = "auto"``): the array keeps its own-GPU request and a tag with its
  class and mode; its tasks that wait in the queue are re-planned one by one
  (agent/replan.py), each given a shared GPU's shard request the same way.
- ``held, else own GPU`` (else: Slurm 22.05 with whole GPUs to wait for, or
  ``replan = "off"``): held as ``held``, and a task no shared GPU takes at a look is
  released with its own GPU request (``gres:gpu:1``, or of the GPU model it asked for) and
  waits in Slurm's queue as a single job would. At most :data:`OWN_GPU_WAITING` tasks of
  one array wait so at once, so the others are still offered the shared GPUs that free
  meanwhile; a task that waits with its own GPU request keeps it (22.05 cannot change it).
- ``not shared`` (no shared GPU the array may use, or Slurm refuses the agent the right to
  release jobs): left as submitted.

No I/O.
"""

from __future__ import annotations

import re

from ..gres_layout import tres_items
from ..placement.view import Decision

#: how an array is shared (:func:`array_way`)
HELD, MOVED, HELD_OR_OWN, NOT_SHARED = "held", "moved", "held, else own GPU", "not shared"
#: the notes of an array whose tasks the agent releases or moves onto shared GPUs
HELD_NOTE = "colo: job array held: each task is released onto a shared GPU that takes it"
MOVED_NOTE = "colo: job array: each task waiting for a GPU is moved onto a shared GPU that takes it"
HELD_OR_OWN_NOTE = (
    "colo: job array held: each task is released onto a shared GPU that takes it, "
    "else with its own GPU request"
)
#: the note of a task of a held array released with its own GPU request
OWN_GPU_TASK_NOTE = "colo: job array task: no shared GPU took it; released with its own GPU request"
#: the note of an array left as submitted, and what its user is told at submission
NOT_SHARED_NOTE = "colo: job array not shared (each task keeps its own GPU request)"
NOT_SHARED_MSG = "slurm-colo: this job array is not shared ({why}); each task keeps its GPU request"
#: the tasks of held arrays released at one look at most, all arrays together
MAX_TASKS_PER_LOOK = 32
#: the tasks of one held array that wait in Slurm's queue with their own GPU request at most
#: (``held, else own GPU``): one look releases more as they start
OWN_GPU_WAITING = 4
#: a range of task ids in Slurm's list of an array's waiting tasks: 7, 2-5, 1-9:2
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def array_way(hold_unplaced: bool, may_hold: bool, can_change_tasks: bool, replan: bool) -> str:
    """:data:`HELD` where a job no shared GPU takes is held (``hold_unplaced``:
    placement.unplaced) and the array may be (``may_hold``: some shared GPU it may use, and
    the agent may release jobs); else :data:`MOVED` where Slurm can change a waiting task's
    GRES and the site re-plans; else :data:`HELD_OR_OWN` where it may be held; else
    :data:`NOT_SHARED`."""
    if hold_unplaced and may_hold:
        return HELD
    if can_change_tasks and replan:
        return MOVED
    return HELD_OR_OWN if may_hold else NOT_SHARED


def array_decision(way: str, why_not: str = "") -> Decision:
    """The explanation of an array's answer at submission (``why_not``: why it is not
    shared, for :data:`NOT_SHARED`)."""
    if way == HELD:
        return Decision("exclusive", "job array: held; its tasks are released onto shared GPUs")
    if way == MOVED:
        return Decision("exclusive", "job array: its tasks are moved onto shared GPUs as they wait")
    if way == HELD_OR_OWN:
        return Decision(
            "exclusive",
            "job array: held; its tasks are released onto shared GPUs, each with its own "
            "GPU request where none takes it",
        )
    return Decision("exclusive", f"job array: not shared ({why_not})")


def array_reply(way: str, tag: str, why_not: str = "") -> dict[str, str]:
    """The PLACE answer for an array; ``array`` says this agent knows arrays (the hook leaves
    an array as submitted when an older agent's answer lacks it)."""
    if way in (HELD, HELD_OR_OWN):
        return {
            "action": "hold",
            "array": "1",
            "gres": "none",
            "comment": HELD_NOTE if way == HELD else HELD_OR_OWN_NOTE,
            "tag": tag,
            "user_msg": "slurm-colo: job array held; each task is released onto a shared GPU "
            "that fits it by the placement agent"
            + ("" if way == HELD else ", else with its own GPU request"),
        }
    if way == MOVED:
        return {"action": "exclusive", "array": "1", "comment": MOVED_NOTE, "tag": tag}
    return {
        "action": "exclusive",
        "array": "1",
        "comment": NOT_SHARED_NOTE,
        "user_msg": NOT_SHARED_MSG.format(why=why_not),
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


def array_throttle(text: str) -> int | None:
    """The throttle of Slurm's list of an array's waiting tasks (``0-99%4`` -> 4): at most
    that many of its tasks run at once; None without one."""
    _, sep, n = text.partition("%")
    return int(n) if sep and n.strip().isdigit() else None


def whole_gpu_request(model: str) -> str:
    """The GPU request of an array's task given a GPU of its own: a whole GPU of the model
    it asked for (untargeted shards, ``shard:1``, would stack its tasks on one GPU)."""
    return f"gres:gpu:{model}:1" if model else "gres:gpu:1"


def whole_gpu_asked(tres_per_node: str) -> str:
    """``tres_per_node`` where it asks for whole GPUs only (``gres:gpu:1``,
    ``gres/gpu:v100:1``: one GPU item, typed or not), else "": a held job that already has
    such a request is a task of a held array whose release Slurm refused after the update
    that gave it its own GPU request."""
    items = tres_items(tres_per_node)
    return tres_per_node.strip(" ,") if len(items) == 1 and items[0][0] == "gpu" else ""


def shard_type_asked(tres_per_node: str) -> str:
    """The shard type ``tres_per_node`` asks for (``gres:shard:v100_s0:1`` ->
    ``v100_s0``), else "": a held job that already has such a request is a task of a held
    array whose release Slurm refused after the update that gave it a shared GPU's."""
    items = tres_items(tres_per_node)
    return items[0][1] if len(items) == 1 and len(items[0]) == 3 and items[0][0] == "shard" else ""


def task_token(array_token: str, task: int) -> str:
    """The placement token of one task moved out of its array (the array's own token names
    the array, which every task that Slurm starts from it carries in its tag)."""
    return f"{array_token}-{task}"


def array_token(token: str) -> str:
    """The array's token in a task's (:func:`task_token`), else ""."""
    head, sep, task = token.rpartition("-")
    return head if sep and head and task.isdigit() else ""

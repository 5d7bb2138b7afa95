"""The closed sets of words that travel between the parts: ``--colocate`` modes, sharing
mechanisms and the placement settings that choose between behaviours.

Each is a :class:`~enum.StrEnum`, so a member is also the plain string users and config
files write (``Mode.AUTO == "auto"``) and JSON/tag encoding needs nothing special.
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """``--colocate[=MODE]``."""

    #: share when a compatible partner or a free shared GPU exists (default)
    AUTO = "auto"
    #: also accept pairs with a smaller predicted gain and untried pairs
    AGGRESSIVE = "aggressive"
    #: never share; the job is left exactly as submitted
    OFF = "off"


class Mechanism(StrEnum):
    """How a shared GPU is shared."""

    #: NVIDIA MPS: one server per GPU and user, per-job thread share and memory limit
    MPS = "mps"
    #: plain gres/shard time slicing (jobs of different users, or MPS unavailable)
    SHARD = "shard"


class CrossUser(StrEnum):
    """``placement.cross_user``: jobs of different users on one GPU."""

    SHARD = "shard"
    NEVER = "never"


class Fallback(StrEnum):
    """``placement.fallback``: what the Lua hook does when the agent cannot answer."""

    EXCLUSIVE = "exclusive"
    SHARD = "shard"


class Undo(StrEnum):
    """``placement.undo``: what the agent does with a set its probe judged harmful."""

    REQUEUE = "requeue"
    OFF = "off"


class TimeLimit(StrEnum):
    """``placement.time_limit``: what the agent does with the time limit of a job that
    shares a GPU (it runs slower than alone; Slurm ends it at its limit all the same)."""

    #: add the time sharing cost the job to its limit, as it runs (agent/time_credit.py)
    EXTEND = "extend"
    #: leave the limit as submitted
    KEEP = "keep"


class LeftBehind(StrEnum):
    """``placement.left_behind``: what becomes of a harmful set left behind when a job left a
    set its newest member's probe had kept (that member judges it once more)."""

    #: undone like any other harmful set: its newest job is requeued
    UNDO = "undo"
    #: it runs on; the measurement is learnt from
    LEARN = "learn"


class RecordsTo(StrEnum):
    """``node.records_to``: where a GPU node's spooled job records go."""

    #: to the agent when the node reaches it over TCP and ``store.url`` is SQLite (a file
    #: on the head node); else straight to ``store.url``
    AUTO = "auto"
    STORE = "store"
    AGENT = "agent"


class Unplaced(StrEnum):
    """``placement.unplaced``: a ``--colocate`` job no shared GPU takes now."""

    AUTO = "auto"
    OWN_GPU = "own-gpu"
    HOLD = "hold"


class Replan(StrEnum):
    """``placement.replan``: a ``--colocate`` job waiting in Slurm's queue for a whole GPU."""

    #: moved onto a shared GPU that takes it, where Slurm can change a pending job's GRES
    #: (23.11 and later); left as it is on older Slurm
    AUTO = "auto"
    #: left waiting for its whole GPU
    OFF = "off"


class ClassNumbers(StrEnum):
    """``placement.class_name_numbers``: what the class taken from a job's name keeps of
    the numbers at the name's end (not for ``--colocate-class``)."""

    #: the name as it is: ``run-00042`` is a class of its own
    KEEP = "keep"
    #: numbers after a separator at the end are cut off: ``run-00042`` and ``run-00043``
    #: are both class ``run`` (and ``resnet-50`` is ``resnet``)
    STRIP = "strip"

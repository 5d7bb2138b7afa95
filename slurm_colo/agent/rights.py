"""Whether Slurm lets the agent change jobs, as its refusals say.

The agent's changes to jobs (the undo's requeue, the holds and releases, re-plans, time
limits) need root, ``SlurmUser`` or the ``Operator`` level (``slurm-colo doctor`` checks it).
When Slurm refuses one for the right it would refuse every other, so the agent:

* makes no more changes, and logs the refusal once instead of once per job and look;
* holds no new job (a held job waits for the agent to release it: it would wait for good);
  such a job keeps its own-GPU request instead;
* tries one change again every ``RETRY_S``, so that once an administrator grants the right
  the agent resumes without a restart.

Pure: the state asks it which of its actions to run (agent/state.py, agent/server.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

#: how often one change is tried again while Slurm refuses the agent the right
RETRY_S = 600.0
A = TypeVar("A")


#: how Slurm words a refusal for the right (22.05 to 26.05): ``Access/permission denied``
#: (a requeue, a comment, a change of one's own job), ``Invalid user id`` (a hold, a
#: release or a time limit of another user's job, which the agent's jobs all are)
REFUSALS = ("permission denied", "invalid user id")


def is_refused_right(why: str) -> bool:
    """Whether Slurm's error text refuses the agent the right (not this one job)."""
    text = why.lower()
    return any(r in text for r in REFUSALS)


class Rights:
    def __init__(self) -> None:
        #: Slurm's refusal while the agent lacks the right, else None
        self.refused: str | None = None
        self.since = 0.0
        self._retry_at = 0.0

    def shift(self, step: float) -> None:
        """The wall clock stepped by ``step`` seconds (slurm_colo/clock.py)."""
        if self.refused is not None:
            self.since += step
        if self._retry_at:
            self._retry_at += step

    def refuse(self, why: str, now: float) -> bool:
        """Slurm refused a change for the right; True the first time (log it then)."""
        first = self.refused is None
        if first:
            self.refused, self.since = why, now
        self._retry_at = now + RETRY_S
        return first

    def granted(self) -> bool:
        """A change went through; True when it had been refused (the agent resumes)."""
        was = self.refused is not None
        self.refused = None
        return was

    def holding_back(self, now: float) -> bool:
        """Whether the right is refused and no change is to be tried yet: then the agent
        does not even work out its re-aims and re-plans (each refused one would be undone
        at a cost)."""
        return self.refused is not None and now < self._retry_at

    def gate(self, actions: Sequence[A], now: float) -> tuple[list[A], list[A]]:
        """(to run, to skip) of ``actions``: all while the right is not refused; else only
        the first, once every ``RETRY_S``, to see whether it was granted since."""
        if self.refused is None:
            return list(actions), []
        if actions and now >= self._retry_at:
            self._retry_at = now + RETRY_S
            return [actions[0]], list(actions[1:])
        return [], list(actions)

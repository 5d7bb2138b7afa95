"""A script run as a user without the right to change other users' jobs (not root, not
SlurmUser, no Operator level): it makes each change the agent makes, with the agent's own
ScontrolControl, to the job given, and prints as JSON, per change, Slurm's refusal and
whether the agent takes it for a missing right (agent/rights.py); null where Slurm let the
change through. Used by the 22.05 lab and the version labs."""

from __future__ import annotations

REFUSALS_SCRIPT = """
import json, sys
from slurm_colo.agent.rights import is_refused_right
from slurm_colo.errors import SlurmError
from slurm_colo.slurm.control import ScontrolControl

job, c, out = int(sys.argv[1]), ScontrolControl(), {}
calls = {
    "hold": lambda: c.admin_hold(job),
    "time limit": lambda: c.extend_time_limit(job, 1),
    "requeue": lambda: c.requeue_hold(job, "slurm-colo[v=1 tok=x cls=a mode=auto]", "colo: x"),
}
for name, call in calls.items():
    try:
        call()
        out[name] = None
    except SlurmError as e:
        out[name] = [str(e), is_refused_right(str(e))]
print(json.dumps(out))
"""


def check_refusals(stdout: str) -> None:
    """Every change of :data:`REFUSALS_SCRIPT`'s output was refused, and each refusal reads
    as a missing right."""
    import json

    out = json.loads(stdout)
    assert set(out) == {"hold", "time limit", "requeue"}, out
    for name, refused in out.items():
        assert refused is not None, f"{name}: Slurm let the change through"
        text, is_right = refused
        assert is_right, f"{name}: refusal not taken for a missing right: {text}"

"""The README's first command, ``bash contrib/lab/demo.sh``: the demo on the multi-node lab runs,
shows jobs sharing GPUs of several nodes (read back from Slurm), a K80 job only on the K80
node, and a harmful pair on a GPU node undone by the agent on the head node."""

from __future__ import annotations

import os
import re
import subprocess

from .mntools import MN_DIR, REPO, agent_status, squeue
from .test_undo import fresh  # noqa: F401  (fixture: the agent without earlier probe results)


def test_the_readme_demo_runs_on_the_multinode_lab(fresh: None) -> None:  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run(
        ["bash", str(REPO / "contrib" / "lab" / "demo.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(env, DEMO_SECONDS="8"),
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    shared = re.findall(r"^GPU (\d) of (colo-gpu\d):   <- shared$", out, re.MULTILINE)
    assert shared, out[-3000:]  # at least one GPU runs two --colocate jobs
    # the K80 partition's jobs ran on the K80 node only (Slurm keeps ended jobs a while)
    k80 = [int(i) for i in re.findall(r"^  \w+ +(\d+) +sbatch .*-p k80", out, re.MULTILINE)]
    q = squeue()
    assert len(k80) == 2 and all(q[i]["nodes"] == "colo-gpu3" for i in k80), k80
    # the shared job ran as an MPS client: its node started the daemon (the lab's emulator
    # must be one the node sees, whatever directory the demo was started from)
    assert "did not start" not in out, out[-3000:]
    assert "CUDA_MPS_PIPE_DIRECTORY=/run/slurm-colo/mps/GPU-" in out, out[-3000:]
    assert "placed on GPU" in out and "own GPU" in out  # explain: shared and unshared jobs
    assert "multi-GPU/multi-node jobs are never shared" in out
    # the probe-and-undo act across the lab's network: requeued, run again, alone
    assert "colo: requeued after 15s together: harmful" in out
    assert "probes: 1 undone" in out
    assert "restarts=1  colo: requeued after a harmful pairing; now GPU" in out
    assert f"{MN_DIR}/nodes/colo-head/state/learned.json" in out
    assert "demo done" in out
    assert agent_status()["probes"].get("undone", 0) == 1

"""A fatal MPS fault on Slurm 24.11 and 26.05: the MPS emulator's fault injection on one shared
GPU kills every client there (and no other), the jobs' records carry the fault, and after the
retrain the pair is marked never and is not put together again."""

from __future__ import annotations

import json
import time

from .vlab import CLAB, VersionLab, wait_for

CTL = f"{CLAB}/libexec/nvidia-cuda-mps-control"
EMU = f"{CLAB}/venv/bin/slurm-colo-mps-emulator"
#: a CUDA program under MPS, as the lab has it: the emulator registers the process as a client
#: of its GPU's daemon (CUDA_MPS_PIPE_DIRECTORY from the TaskProlog), then execs the command.
#: The jobs run as root: the emulated daemon's control socket takes root's clients only.
CLIENT = f"env | grep -E '^CUDA_'; exec {EMU} run -- sleep 60"
OUT = f"{CLAB}/out"
#: a class no other version-lab test uses: the lab's history holds no shared run of the pair
PAIR = "--colocate-class=resnet18-bs16"
OTHER = "--colocate-class=transformer-bs256"  # harmful next to resnet18-bs16


def control(lab: VersionLab, pipe_dir: str, command: str) -> str:
    """One command to the MPS control daemon of ``pipe_dir`` (its control program reads
    commands on stdin), inside the lab; its reply."""
    p = lab.x("/bin/sh", "-c", f"echo '{command}' | CUDA_MPS_PIPE_DIRECTORY={pipe_dir} {CTL}")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_a_fatal_mps_fault_kills_that_gpus_clients_and_the_pair_is_never_shared_again(
    vclean: VersionLab,
) -> None:
    lab = vclean
    since = time.time()
    with lab.history_kept():  # the fault records and the retrained set are the test's own
        a = lab.sbatch("--colocate", PAIR, "--gres=gpu:1", script=CLIENT)
        b = lab.sbatch("--colocate", PAIR, "--gres=gpu:1", script=CLIENT)
        o = lab.sbatch("--colocate", OTHER, "--gres=gpu:1", script=CLIENT)
        q = lab.wait_running(a.job_id, b.job_id, o.job_id)
        (gpu,) = q[a.job_id]["gres"][0][3]
        assert q[b.job_id]["gres"][0][3] == [gpu] and q[o.job_id]["gres"][0][3] != [gpu]

        other = q[o.job_id]["gres"][0][3][0]
        wait_for(
            lambda: all("CUDA_MPS_PIPE" in lab.job_output(j) for j in (a.job_id, o.job_id)),
            20,
            0.3,
            "the jobs' MPS environment",
        )
        pipes = {
            g: lab.job_env(j)["CUDA_MPS_PIPE_DIRECTORY"]
            for j, g in ((a.job_id, gpu), (o.job_id, other))
        }

        def clients(g: int) -> list[int]:
            state = json.loads(control(lab, pipes[g], "emu_state"))
            return sorted(c for s in state["servers"].values() for c in s["clients"])

        wait_for(
            lambda: len(clients(gpu)) == 2 and len(clients(other)) == 1,
            20,
            0.5,
            "the three jobs connected as MPS clients",
        )
        control(lab, pipes[gpu], "emu_fault client_fatal")

        # both clients on that GPU are killed: their jobs fail; the other GPU's job runs on
        done = lab.wait_done(a.job_id, b.job_id, timeout=30)
        assert done[a.job_id]["state"] == done[b.job_id]["state"] == "FAILED", done
        assert lab.jobs()[o.job_id]["state"] == "RUNNING"

        # the Epilog recorded the fault in both jobs' records
        recs = wait_for(
            lambda: (r := lab.records(since)) and {a.job_id, b.job_id} <= set(r) and r,
            30,
            1,
            "the two records in the history",
        )
        for jid in (a.job_id, b.job_id):
            assert recs[jid]["mps_fault"] and recs[jid]["shared"], recs[jid]
            assert recs[jid]["mechanism"] == "mps" and recs[jid]["co_runners"] == 1, recs[jid]

        # the retrain marks the pair never; the agent reads the new set and keeps them apart
        p = lab.cli("retrain", "--force", timeout=300)
        assert p.returncode == 0 and "published" in p.stdout, p.stdout + p.stderr
        scores = json.loads(lab.host_path(f"{CLAB}/state/scores.json").read_text())
        cls = PAIR.split("=")[1]
        (pair,) = [s for s in scores["pairs"] if s["a"] == s["b"] == cls]
        # docs/model.md: a pair with a fatal MPS fault is never
        assert pair["never"], pair
        wait_for(
            lambda: lab.status()["scores"]["id"] == scores["id"], 10, 0.5, "the agent's new set"
        )
        lab.x("scancel", str(o.job_id), check=True)
        # the agent no longer counts the cancelled job on its GPU (else a job of the pair may
        # be placed next to it, and its explanation names that partner, not the never pair)
        wait_for(
            lambda: (
                not any(
                    x["job_id"] == o.job_id for g in lab.status()["gpus"] for x in g["occupants"]
                )
            ),
            20,
            0.5,
            "the cancelled job gone from the agent's view",
        )
        c = lab.sbatch("--colocate", PAIR, "--gres=gpu:1", script="sleep 20")
        d = lab.sbatch("--colocate", PAIR, "--gres=gpu:1", script="sleep 20")
        q = lab.wait_running(c.job_id, d.job_id)
        assert q[c.job_id]["gres"][0][3] != q[d.job_id]["gres"][0][3], q

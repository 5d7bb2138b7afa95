"""Our side failing must never cost a submission: each fault below still gets the job
accepted within 1 s, with the fallback logged by slurmctld (and the agent)."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fake_agent import FakeAgent

from slurm_colo.contracts.placement import Placement

from . import labtools as lt


def _submit_and_check(mark: int, name: str, reason: str | tuple[str, ...]) -> None:
    r = lt.sbatch(
        "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", "-J", name, sleep=1
    )
    assert r.rc == 0, r.stderr
    assert r.job_id is not None
    assert r.seconds < 1.0, f"submission took {r.seconds:.2f}s"
    q = lt.squeue()
    assert (
        q[r.job_id]["tres_per_node"] == "gres:gpu:1"
    )  # lab fallback: exclusive (job as submitted)
    assert "agent unavailable" in q[r.job_id]["comment"]
    log = lt.wait_for(
        lambda: (t := lt.ctld_log_since(mark)) and f"job {name} fallback=exclusive" in t and t,
        5,
        0.2,
        "fallback line in slurmctld.log",
    )
    reasons = (reason,) if isinstance(reason, str) else reason
    assert any(r in log for r in reasons), log


def test_agent_stopped_socket_gone(restore_agent: None) -> None:
    lt.stop_agent()  # a clean stop removes the socket
    assert not lt.SOCKET.exists()
    mark = lt.ctld_log_mark()
    _submit_and_check(mark, "f-stopped", "No such file")


def test_agent_killed_stale_socket_left(restore_agent: None) -> None:
    pid = lt.agent_pid()
    assert pid
    os.kill(pid, signal.SIGKILL)  # the socket file stays, nobody listens on it
    lt.wait_for(lambda: lt.agent_pid() is None, 10, 0.1, "agent gone")
    assert lt.SOCKET.exists()
    mark = lt.ctld_log_mark()
    # refused on connect, or the half-dead listener accepted and then closed
    _submit_and_check(mark, "f-killed", ("connect:", "receive: closed"))


@contextmanager
def _agent_stopped() -> Iterator[None]:
    """The agent stopped (SIGSTOP): its socket still accepts, nobody answers."""
    pid = lt.agent_pid()
    assert pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_agent_hung(restore_agent: None) -> None:
    with _agent_stopped():
        mark = lt.ctld_log_mark()
        _submit_and_check(mark, "f-hung", "timeout")
        # one timeout may be a pause: the next submission asks again and times out too ...
        mark2 = lt.ctld_log_mark()
        _submit_and_check(mark2, "f-hung2", "timeout")
        # ... and then the circuit breaker is open: the next one does not wait for the agent
        r = lt.sbatch("--colocate", "--gres=gpu:1", "-J", "f-hung3", sleep=1)
        assert r.rc == 0 and r.seconds < 1.0
        assert "job f-hung3 fallback=exclusive reason=agent skipped after failure" in lt.wait_for(
            lambda: (t := lt.ctld_log_since(mark)) and "f-hung3" in t and t, 5, 0.2, "breaker line"
        )


def test_agent_paused_once(restore_agent: None) -> None:
    """One pause of a working agent costs the job submitted during it, not the next ones."""
    with _agent_stopped():
        mark = lt.ctld_log_mark()
        _submit_and_check(mark, "f-paused", "timeout")
    r = lt.sbatch(
        "--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", "-J", "f-after", sleep=1
    )
    assert r.rc == 0 and r.job_id is not None, r.stderr
    job = lt.squeue()[r.job_id]
    assert "shard" in job["tres_per_node"] and "agent unavailable" not in job["comment"], (
        job["tres_per_node"],
        job["comment"],
        lt.ctld_log_since(mark)[-1500:],
    )
    assert "f-after fallback" not in lt.ctld_log_since(mark)


#: a job name that carries a placement tag of its own: its user writes the name, so the
#: Prolog must not take it for the AdminComment's
FORGED_NAME = "f-tag AdminComment=slurm-colo[v=1 tok=x cls=a mode=auto mech=mps gpu=vm:0 pct=7]"


def test_agent_down_when_a_placed_job_starts(restore_agent: None) -> None:
    """The Prolog cannot ask the agent: it reads the placement tag from the job's
    AdminComment in Slurm (its environment has the Comment only), not from a field its
    user writes, and the job still runs as an MPS client of its GPU."""
    r = lt.sbatch(
        "--colocate",
        "--colocate-class=resnet18-bs32",
        "--gres=gpu:1",
        "-H",
        "-J",
        FORGED_NAME,
        script="env | grep ^CUDA_MPS_ ; sleep 1",
    )
    assert r.rc == 0 and r.job_id is not None, r.stderr
    job = lt.squeue()[r.job_id]
    assert "slurm-colo[" in job["admin_comment"] and "shard" in job["tres_per_node"], job
    real = Placement.from_tag(job["admin_comment"])
    assert real is not None and real.thread_pct not in (None, 7), job["admin_comment"]
    lt.stop_agent()
    lt.run(["scontrol", "release", str(r.job_id)], check=True)
    lt.wait_done(r.job_id)
    out = (lt.OUT / f"{r.job_id}.out").read_text()
    assert "CUDA_MPS_PIPE_DIRECTORY=/run/slurm-colo/mps/GPU-" in out, out
    assert f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={real.thread_pct}\n" in out, out


@pytest.mark.parametrize(
    "reply,reason",
    [
        (b"HELLO there\n", "agent said"),
        (b"OK\taction=share\tgres=gres:gpu:99;rm -rf /\tnode=vm\n", "malformed placement"),
        (b"OK\taction=explode\n", "unknown action"),
        (b"\x00\xff\xfe garbage", "receive"),
    ],
)
def test_agent_answers_garbage(restore_agent: None, reply: bytes, reason: str) -> None:
    lt.stop_agent()
    fake = FakeAgent(lt.SOCKET, reply)
    try:
        mark = lt.ctld_log_mark()
        _submit_and_check(mark, "f-garbage", reason)
    finally:
        fake.close()


@pytest.mark.parametrize(
    "content",
    [None, b"{ this is not json", b'{"format": "slurm-colo-scores/1", "pairs": [{"a": 1}]}'],
)
def test_scores_missing_or_corrupt(restore_agent: None, content: bytes | None) -> None:
    backup = lt.SCORES.with_suffix(".bak")
    shutil.copy2(lt.SCORES, backup)
    try:
        lt.stop_agent()
        if content is None:
            lt.SCORES.unlink()
        else:
            lt.SCORES.write_bytes(content)
        log_size = (lt.LAB_DIR / "agent.log").stat().st_size
        lt.start_agent_only()
        a = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", sleep=1)
        b = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", sleep=1)
        assert a.rc == 0 and b.rc == 0 and a.seconds < 1.0 and b.seconds < 1.0
        with (lt.LAB_DIR / "agent.log").open() as f:
            f.seek(log_size)
            text = f.read()
        assert "scores:" in text and (
            "not found" in text or "corrupt" in text or "pairs[0] lacks 'b', 'n_a', 'n_b'" in text
        )
        st = lt.agent_cli("status", "--json").stdout
        assert '"error"' in st and "null" not in st.split('"error"')[1][:8]
        # without scores nothing is known to pair well: the second job is not put next to the first
        q = lt.squeue()
        assert "predicted delta" not in q[b.job_id]["comment"]
    finally:
        shutil.move(backup, lt.SCORES)
        lt.stop_agent()

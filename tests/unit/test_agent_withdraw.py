"""Pending jobs placed on a node the agent then closed (Slurm numbers its GPUs otherwise than
its devices): held, so none starts on another GPU than the one it was placed on, and
released once a GPU takes them (no I/O)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_colo.agent.state import AgentState
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.placement import Placement
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.model import SlurmJob, SlurmNode

SCORES = table_from_pairs(
    [("good", "good", 1.0, 1.0)], classes={"good": ClassInfo(memory_gib=4.0)}, created=""
)
#: the pool is the top two GPUs; Slurm lists them in device order, or (before the fix in
#: slurm.conf) pool first, when it numbers shared GPU 2 as 0
IN_ORDER = "gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1,shard:v100_s2:4,shard:v100_s3:4"
POOL_FIRST = "gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2,shard:v100_s2:4,shard:v100_s3:4"


def _state(nodes: tuple[str, ...] = ("n1",)) -> AgentState:
    layout = tuple(NodeGpus(n, 4, "v100", 32.0, (2, 3), 4) for n in nodes)
    s = AgentState(Config(gpus=layout, placement=PlacementConfig(explore_rate=0.0)), SCORES)
    s.apply_snapshot([], [SlurmNode(n, "IDLE", gres=IN_ORDER) for n in nodes], 0.0)
    return s


def _req() -> dict[str, str]:
    return {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": "good"}


def _pending(job_id: int, tag: str, comment: str = "", begin: float = 0.0) -> SlurmJob:
    return SlurmJob(
        job_id,
        "job",
        "alice",
        1000,
        "PENDING",
        admin_comment=tag,
        comment=comment,
        state_reason="BeginTime" if begin else "Resources",
    )


def _on_gpus(s: AgentState) -> set[int | None]:
    """The jobs on the shared GPUs of the agent's view."""
    return {o.job_id for g in s.view.gpus for o in g.occupants}


def test_a_job_pending_on_a_closed_node_is_held_until_its_gpu_opens_again() -> None:
    """Slurm 22.05 cannot change a pending job's GRES: the job waits, held, for a GPU of
    its own shard type, so for its node to be fixed; then it is released there, keeping
    its own start time. A job running there already is left alone."""
    s = _state()
    placed = s.place_request(_req(), 1.0)
    running = s.place_request(_req(), 1.1)
    assert placed["gres"] == "gres:shard:v100_s2:1" and placed["node"] == "n1"
    job = _pending(20, placed["tag"], placed["comment"], begin=3600.0)
    run = replace(_pending(21, running["tag"]), state="RUNNING", nodes="n1")
    s.apply_snapshot([job, run], [SlurmNode("n1", "IDLE", gres=IN_ORDER)], 2.0)
    assert s.withdraw() == []  # the node is in order: nothing to hold
    assert 20 in _on_gpus(s)

    s.apply_snapshot([job, run], [SlurmNode("n1", "IDLE", gres=POOL_FIRST)], 3.0)
    # held while the snapshot is taken in: the view built for it already lacks the job
    assert 20 in s.held and 20 not in _on_gpus(s) and 21 in _on_gpus(s)
    [a] = s.withdraw()
    assert a.kind == "withdraw" and a.job_id == 20
    assert a.restore == (placed["tag"], placed["comment"])
    tag = Placement.from_tag(a.admin_comment)
    assert tag is not None and tag.held == "v100_s2" and not tag.undone and not tag.shared
    assert a.comment.startswith("colo: held: node n1 is closed to placement")
    assert 20 in s.held and 21 not in s.held
    assert s.explain(20, a.admin_comment)["reason"] == "held: node n1 closed to placement"
    assert s.withdraw() == []  # once

    held = replace(
        job, admin_comment=a.admin_comment, comment=a.comment, state_reason="JobHeldAdmin"
    )
    s.apply_snapshot([held, run], [SlurmNode("n1", "IDLE", gres=POOL_FIRST)], 10.0)
    assert s.reaim(10.0) == [] and 20 in s.held  # its GPU is closed still
    s.apply_snapshot([held, run], [SlurmNode("n1", "IDLE", gres=IN_ORDER)], 20.0)
    [aim] = s.reaim(20.0)
    assert aim.kind == "aim" and aim.job_id == 20 and aim.node == "n1"
    assert not aim.start_now  # its --begin stands
    assert aim.gres == ""  # its shard request never changed
    back = Placement.from_tag(aim.admin_comment)
    assert back is not None and back.shared and back.gpu == 2 and not back.undone
    assert "held off a node closed to placement; now GPU 2 of n1" in aim.comment


def test_a_restarted_agent_finds_a_held_job_and_keeps_its_start_time() -> None:
    s = _state()
    placed = s.place_request(_req(), 1.0)
    job = _pending(20, placed["tag"], placed["comment"])
    s.apply_snapshot([job], [SlurmNode("n1", "IDLE", gres=POOL_FIRST)], 3.0)
    [a] = s.withdraw()
    held = replace(
        job, admin_comment=a.admin_comment, comment=a.comment, state_reason="JobHeldAdmin"
    )
    restarted = _state()
    restarted.apply_snapshot([held], [SlurmNode("n1", "IDLE", gres=POOL_FIRST)], 30.0)
    h = restarted.held[20]
    assert h.withdrawn and not h.undone and h.gres_type == "v100_s2"
    assert h.reason == "its node was closed to placement"
    assert restarted.withdraw() == []  # held already: not again
    restarted.apply_snapshot([held], [SlurmNode("n1", "IDLE", gres=IN_ORDER)], 40.0)
    [aim] = restarted.reaim(40.0)
    assert aim.node == "n1" and not aim.start_now


def test_where_slurm_changes_a_pending_jobs_gres_it_goes_to_an_open_node_at_once() -> None:
    """Slurm 23.11+: the held job may take any shared GPU of its model; n2 is in order."""
    s = _state(("n1", "n2"))
    s.holds.retype_after_undo = True
    placed = s.place_request(_req(), 1.0)
    node = placed["node"]
    other = "n2" if node == "n1" else "n1"
    job = _pending(20, placed["tag"], placed["comment"])
    nodes = [SlurmNode(node, "IDLE", gres=POOL_FIRST), SlurmNode(other, "IDLE", gres=IN_ORDER)]
    s.apply_snapshot([job], nodes, 3.0)
    [a] = s.withdraw()
    tag = Placement.from_tag(a.admin_comment)
    assert tag is not None and tag.held == "*" and tag.model == "v100" and not tag.undone
    held = replace(
        job, admin_comment=a.admin_comment, comment=a.comment, state_reason="JobHeldAdmin"
    )
    s.apply_snapshot([held], nodes, 4.0)
    [aim] = s.reaim(4.0)
    assert aim.node == other and aim.gres == "gres:shard:v100_s2:1" and not aim.start_now


@pytest.mark.parametrize("kind", ["refused", "skipped"])
def test_a_hold_slurm_refuses_leaves_the_job_to_be_held_at_the_next_look(kind: str) -> None:
    s = _state()
    placed = s.place_request(_req(), 1.0)
    job = _pending(20, placed["tag"], placed["comment"])
    s.apply_snapshot([job], [SlurmNode("n1", "IDLE", gres=POOL_FIRST)], 3.0)
    [a] = s.withdraw()
    if kind == "refused":  # the job started meanwhile: Slurm holds only pending jobs
        s.failed(a, 3.1, "scontrol hold 20 failed: Job is not pending")
    else:
        s.failed(a, 3.1, made=False)
    assert 20 not in s.held
    s.apply_snapshot([job], [SlurmNode("n1", "IDLE", gres=POOL_FIRST)], 10.0)
    [again] = s.withdraw()  # its comments were put back: still placed there, pending
    assert again.job_id == 20 and again.kind == "withdraw"

"""The starvation guard: shared GPUs drained for a job waiting too long for whole GPUs."""

from __future__ import annotations

from dataclasses import replace

from slurm_colo.agent.state import AgentState
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.enums import Unplaced
from slurm_colo.contracts.placement import Placement
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.placement import ClusterView, Decision, GpuView, Occupant
from slurm_colo.placement.guard import (
    HeldWait,
    plan,
    reserve,
    reserve_held,
    starving_jobs,
    whole_gpu_count,
)
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

HOUR = 3600.0
LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)
SCORES = table_from_pairs(
    [("good", "good", 1.0, 1.0), ("loner", "good", 0.0, 0.0), ("loner", "loner", 0.0, 0.0)],
    classes={"good": ClassInfo(memory_gib=4.0), "loner": ClassInfo(memory_gib=4.0)},
)


def waiting(
    job_id: int = 50,
    submit: float = 0.0,
    gres: str = "gres:gpu:1",
    reason: str = "Resources",
    partition: str = "gpu",
) -> SlurmJob:
    return SlurmJob(
        job_id,
        "train",
        "bob",
        1001,
        "PENDING",
        tres_per_node=gres,
        submit_time=submit,
        state_reason=reason,
        partition=partition,
    )


def shard_job(job_id: int, idx: int, end: float) -> SlurmJob:
    return SlurmJob(
        job_id,
        "good",
        "alice",
        1000,
        "RUNNING",
        nodes="n1",
        gres=(GresAlloc("shard", f"v100_s{idx}", 1, (idx,)),),
        start_time=1.0,
        end_time=end,
    )


def test_whole_gpu_requests_are_recognised() -> None:
    assert whole_gpu_count(waiting(gres="gres:gpu:2")) == 2
    assert whole_gpu_count(waiting(gres="gres/gpu:1")) == 1
    assert whole_gpu_count(SlurmJob(1, "j", "u", 1, "PENDING", tres_per_job="gres:gpu:1")) == 1
    for gres in (
        "gres:gpu:a100:1",
        "gres:shard:1",
        "gres:shard:v100_s0:1",
        "gres:gpu:1,gres:mps:50",
        "",
        "gres:gpu:x",
    ):
        assert whole_gpu_count(waiting(gres=gres)) is None, gres


def test_only_jobs_waiting_for_resources_long_enough_count() -> None:
    now = 10 * HOUR
    old, young = waiting(1, submit=1 * HOUR), waiting(2, submit=9.5 * HOUR)
    held = waiting(3, submit=0.5 * HOUR, reason="JobHeldUser")
    dep = waiting(4, submit=0.5 * HOUR, reason="Dependency")
    older = waiting(6, submit=0.5 * HOUR)
    assert starving_jobs([young, held, dep, old, older], now, 6 * HOUR) == [older, old]
    assert starving_jobs([young, held, dep], now, 6 * HOUR) == []
    assert starving_jobs([old], now, 0.0) == []  # 0 disables the guard
    multi = SlurmJob(
        5,
        "m",
        "u",
        1,
        "PENDING",
        node_count=2,
        tres_per_node="gres:gpu:1",
        submit_time=0.5 * HOUR,
        state_reason="Resources",
    )
    assert starving_jobs([multi], now, 6 * HOUR) == []


def test_the_oldest_job_that_draining_can_help_gets_the_reservation() -> None:
    # the oldest waits in a partition without shared GPUs: the next one is served
    other = waiting(1, submit=1 * HOUR, partition="cpu")
    next_ = waiting(2, submit=2 * HOUR)
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    view = _view((0, 10), (1, 11))
    r = reserve([*busy, other, next_], view, 10 * HOUR, 6 * HOUR, {"n1": ("gpu",)})
    assert r is not None and r.job_id == 2 and r.gpus == (1,)


def _view(*occupied: tuple[int, int | None]) -> ClusterView:
    """GPUs 0 and 1 of n1; (index, job id) pairs add a running occupant (None: a placement
    not started yet)."""
    gpus = [GpuView("n1", i, f"v100_s{i}", 32.0, 4) for i in (0, 1)]
    for i, jid in occupied:
        gpus[i].occupants.append(
            Occupant(str(jid), "alice", 1000, "good", 4.0, job_id=jid, pending=jid is None)
        )
    return ClusterView(gpus=gpus)


def test_the_gpu_expected_to_drain_first_is_closed() -> None:
    job = waiting()
    r = plan(job, _view((0, 10), (1, 11)), {10: 5 * HOUR, 11: 2 * HOUR}, {"n1": ("gpu",)})
    assert r is not None and (r.node, r.gpus, r.drained_by) == ("n1", (1,), 2 * HOUR)
    # a placement that has not started has no known end: the running one drains first
    r = plan(job, _view((0, 10), (1, None)), {10: 5 * HOUR}, {})
    assert r is not None and r.gpus == (0,)
    # two GPUs wanted, one idle: the idle one is held too, so no partner takes it meanwhile
    r = plan(waiting(gres="gres:gpu:2"), _view((0, 10)), {10: 5 * HOUR}, {})
    assert r is not None and r.gpus == (0, 1)


def test_no_reservation_when_it_cannot_help() -> None:
    # an idle shared GPU: the job waits for something else (CPUs, memory, a limit)
    assert plan(waiting(), _view((0, 10)), {10: HOUR}, {}) is None
    # more GPUs than the node has shared
    assert plan(waiting(gres="gres:gpu:3"), _view((0, 10), (1, 11)), {}, {}) is None
    # another partition
    assert plan(waiting(partition="cpu"), _view((0, 10), (1, 11)), {}, {"n1": ("gpu",)}) is None


def _state(after_h: float = 6.0, bypass_h: float = 0.0, unplaced: str = "auto") -> AgentState:
    cfg = Config(
        gpus=LAYOUT,
        placement=PlacementConfig(
            explore_rate=0.0,
            reserve_after_h=after_h,
            bypass_h=bypass_h,
            unplaced=Unplaced(unplaced),
        ),
    )
    s = AgentState(cfg, SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "MIXED", partitions=("gpu",))], 0.0)
    return s


def _req() -> dict[str, str]:
    return {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": "good"}


def test_agent_drains_for_a_starving_job_and_reopens_once_it_starts() -> None:
    s = _state()
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    s.apply_snapshot([*busy, waiting(submit=1 * HOUR)], node, 5 * HOUR)
    assert s.reservation is None  # waited 4 h so far
    assert s.place_request(_req(), 5 * HOUR)["gres"] == "gres:shard:v100_s0:1"
    s.apply_snapshot([*busy, waiting(submit=1 * HOUR)], node, 8 * HOUR)
    assert s.reservation is not None and s.reservation.gpus == (1,)  # GPU 1 ends first
    assert [g.closed_for for g in s.view.gpus] == [None, 50]
    st = s.status(8 * HOUR)
    assert st["reservation"]["job_id"] == 50 and st["reservation"]["waiting_s"] == 7 * HOUR
    for _ in range(2):  # new partners only go to GPU 0 now
        assert s.place_request(_req(), 8 * HOUR)["gres"] == "gres:shard:v100_s0:1"
    s.job_ended(11, 9 * HOUR)  # GPU 1 is idle now, and stays closed until job 50 has it
    assert not s.view.gpus[1].occupants and s.view.gpus[1].closed_for == 50
    assert s.place_request(_req(), 9 * HOUR)["gres"] == "gres:shard:v100_s0:1"
    full = s.place_request(_req(), 9 * HOUR)  # GPU 0 full, GPU 1 kept for job 50
    assert full["action"] == "exclusive" and "kept free for job 50" in full["comment"]
    # the waiting job starts on GPU 1 (the Prolog's report): GPU 1 is its own, no reservation
    s.job_started(50, None, 9 * HOUR, node="n1", gpus=[1])
    assert s.reservation is None
    assert s.view.gpus[1].closed_for is None and s.view.gpus[1].exclusive_job == 50


def test_guard_off_never_closes_a_gpu() -> None:
    s = _state(after_h=0.0)
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    s.apply_snapshot([*busy, waiting(submit=1.0 * HOUR)], [SlurmNode("n1", "MIXED")], 100 * HOUR)
    assert s.reservation is None and all(g.closed_for is None for g in s.view.gpus)
    on = _state()  # the same snapshot with the guard on
    on.apply_snapshot([*busy, waiting(submit=1.0 * HOUR)], [SlurmNode("n1", "MIXED")], 100 * HOUR)
    assert on.reservation is not None


def test_status_command_shows_the_reservation(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from slurm_colo.cli import app
    from slurm_colo.contracts import client

    s = _state()
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    s.apply_snapshot(
        [*busy, waiting(submit=0.5 * HOUR)],
        [SlurmNode("n1", "MIXED", partitions=("gpu",))],
        7.5 * HOUR,
    )
    monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: s.status(7.5 * HOUR))
    out = CliRunner().invoke(app, ["status"]).output
    assert "draining GPU(s) 1 of n1 for job 50, waiting 7.0 h" in out
    assert "n1:1 [v100_s1]  1/4 slot(s)  (kept free for job 50)" in out


def test_drained_gpus_wait_a_little_for_the_job_then_the_guard_gives_up() -> None:
    s = _state()
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    w = waiting(submit=1 * HOUR)
    s.apply_snapshot(
        [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR), w], node, 8 * HOUR
    )
    assert s.reservation is not None and s.reservation.gpus == (1,)
    # job 11 ends; Slurm has not started job 50 yet: GPU 1 stays kept for it
    t = 9 * HOUR
    s.apply_snapshot([shard_job(10, 0, end=20 * HOUR), w], node, t)
    assert s.reservation is not None and s.view.gpus[1].closed_for == 50
    s.apply_snapshot([shard_job(10, 0, end=20 * HOUR), w], node, t + 30)
    assert s.view.gpus[1].closed_for == 50
    assert s.place_request(_req(), t + 30)["gres"] == "gres:shard:v100_s0:1"
    # a minute later it still waits (for CPUs, say): the GPU takes partners again, and the
    # job is not drained for again at once
    s.apply_snapshot([shard_job(10, 0, end=20 * HOUR), w], node, t + 90)
    assert s.reservation is None and s.view.gpus[1].closed_for is None
    s.apply_snapshot(
        [shard_job(10, 0, end=20 * HOUR), shard_job(12, 1, end=30 * HOUR), w], node, t + 120
    )
    assert s.reservation is None


# ---- jobs held for one GPU type (agent/held.py) --------------------------------------


def held_job(job_id: int = 60, submit: float = 1 * HOUR, gres_type: str = "v100_s1") -> SlurmJob:
    tag = (
        Decision("exclusive", "no partner")
        .placement("tokheld", "loner", "auto", held=gres_type)
        .to_tag()
    )
    return SlurmJob(
        job_id,
        "loner",
        "carol",
        1002,
        "PENDING",
        submit_time=submit,
        state_reason="JobHeldUser",
        admin_comment=tag,
        partition="gpu",
    )


def carol_on_gpu1(job_id: int, name: str, tag: str) -> SlurmJob:
    """Carol's job, released by the agent with ``tag``, running on GPU 1 from 9 h to 30 h."""
    return SlurmJob(
        job_id,
        name,
        "carol",
        1002,
        "RUNNING",
        nodes="n1",
        start_time=9 * HOUR,
        end_time=30 * HOUR,
        gres=(GresAlloc("shard", "v100_s1", 1, (1,)),),
        admin_comment=tag,
    )


def test_a_held_job_gets_the_gpu_of_its_type_that_drains_first() -> None:
    view = _view((0, 10), (1, 11))
    ends = {10: 2 * HOUR, 11: 5 * HOUR}
    r = reserve_held(
        [HeldWait(60, "v100_s1", 1 * HOUR, ""), HeldWait(61, "v100_s0", 2 * HOUR, "")],
        view,
        8 * HOUR,
        6 * HOUR,
        ends,
    )
    # job 60 was held first; GPU 0 drains sooner but is of another type
    assert r is not None and (r.job_id, r.gpus, r.gres_type, r.drained_by) == (
        60,
        (1,),
        "v100_s1",
        5 * HOUR,
    )
    assert r.waits_for() == "a v100_s1 GPU"
    # passed over (the guard gave up on it): the next one
    r = reserve_held(
        [HeldWait(60, "v100_s1", 1 * HOUR, ""), HeldWait(61, "v100_s0", 2 * HOUR, "")],
        view,
        8 * HOUR,
        6 * HOUR,
        ends,
        skip={60},
    )
    assert r is not None and (r.job_id, r.gpus) == (61, (0,))
    # not held long enough, an idle GPU of its type, no GPU of its type, guard off
    assert (
        reserve_held([HeldWait(60, "v100_s1", 3 * HOUR, "")], view, 8 * HOUR, 6 * HOUR, ends)
        is None
    )
    assert (
        reserve_held(
            [HeldWait(60, "v100_s1", 1 * HOUR, "")], _view((0, 10)), 8 * HOUR, 6 * HOUR, ends
        )
        is None
    )
    assert (
        reserve_held([HeldWait(60, "a100_s0", 1 * HOUR, "")], view, 8 * HOUR, 6 * HOUR, ends)
        is None
    )
    assert reserve_held([HeldWait(60, "v100_s1", 1 * HOUR, "")], view, 8 * HOUR, 0.0, ends) is None
    # held without a GPU request: any shared GPU (of its model) that drains first
    r = reserve_held([HeldWait(62, "*", 1 * HOUR, "")], view, 8 * HOUR, 6 * HOUR, ends)
    assert r is not None and (r.gpus, r.gres_type, r.waits_for()) == ((0,), "*", "a shared GPU")
    assert (
        reserve_held([HeldWait(62, "*", 1 * HOUR, "a100")], view, 8 * HOUR, 6 * HOUR, ends) is None
    )
    # only nodes of its partitions
    debug = HeldWait(62, "*", 1 * HOUR, "", "debug")
    assert (
        reserve_held([debug], view, 8 * HOUR, 6 * HOUR, ends, partitions={"n1": ("gpu",)}) is None
    )
    r = reserve_held([debug], view, 8 * HOUR, 6 * HOUR, ends, partitions={"n1": ("gpu", "debug")})
    assert r is not None and r.job_id == 62


def test_agent_drains_a_gpu_of_its_type_for_a_long_held_job_and_releases_it_there() -> None:
    s = _state()
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    s.apply_snapshot([*busy, held_job()], node, 5 * HOUR)
    assert 60 in s.held and s.reservation is None  # held 4 h so far
    assert s.place_request(_req(), 5 * HOUR)["gres"] == "gres:shard:v100_s0:1"
    s.apply_snapshot([*busy, held_job()], node, 8 * HOUR)
    r = s.reservation
    assert r is not None and (r.job_id, r.gpus, r.gres_type) == (60, (1,), "v100_s1")
    assert s.view.gpus[1].closed_for == 60
    for _ in range(2):  # new partners only go to GPU 0 now
        assert s.place_request(_req(), 8 * HOUR)["gres"] == "gres:shard:v100_s0:1"
    assert s.status(8 * HOUR)["reservation"]["gres_type"] == "v100_s1"
    # job 11 ends: GPU 1 is idle, kept for job 60, and the re-aim releases it there
    s.job_ended(11, 9 * HOUR)
    assert s.place_request(_req(), 9 * HOUR)["gres"] == "gres:shard:v100_s0:1"
    full = s.place_request(_req(), 9 * HOUR)  # GPU 0 is full: nothing takes GPU 1 from it
    assert full["action"] == "exclusive" and "kept free for job 60" in full["comment"]
    s.apply_snapshot([shard_job(10, 0, end=20 * HOUR), held_job()], node, 9 * HOUR)
    [aim] = s.reaim(9 * HOUR)
    assert aim.job_id == 60 and aim.node == "n1" and Placement.from_tag(aim.admin_comment).gpu == 1  # type: ignore[union-attr]
    assert [o.job_id for o in s.view.gpus[1].occupants] == [60]
    # Slurm runs it: the reservation ends and GPU 1 takes partners again
    started = carol_on_gpu1(60, "loner", aim.admin_comment)
    s.apply_snapshot([shard_job(10, 0, end=20 * HOUR), started], node, 9 * HOUR + 10)
    assert s.reservation is None and s.view.gpus[1].closed_for is None


def test_the_status_command_says_what_a_held_job_waits_for(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from slurm_colo.cli import app
    from slurm_colo.contracts import client

    s = _state()
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    s.apply_snapshot([*busy, held_job()], [SlurmNode("n1", "MIXED", partitions=("gpu",))], 8 * HOUR)
    monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: s.status(8 * HOUR))
    out = CliRunner().invoke(app, ["status"]).output
    assert "draining GPU(s) 1 of n1 for job 60, waiting 7.0 h for a v100_s1 GPU" in out


def test_newer_jobs_wait_their_turn_behind_a_job_held_too_long() -> None:
    # job 60 (held since 1 h for any shared GPU) has waited 7 h: a request at 8 h, 7 h newer
    # than it, is held too instead of taking a slot (placement.bypass_h = 1.5). Held for any
    # shared GPU: a site that holds jobs no shared GPU takes (elsewhere such a job gets a
    # GPU of its own once it may start, and waits for no shared GPU)
    s = _state(bypass_h=1.5, unplaced="hold")
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    anywhere = held_job(gres_type="*")
    s.apply_snapshot([*busy, anywhere], node, 5 * HOUR)
    assert s.place_request(_req(), 5 * HOUR)["gres"] == "gres:shard:v100_s0:1"  # 4 h: passes
    s.apply_snapshot([*busy, anywhere], node, 8 * HOUR)
    reply = s.place_request(_req(), 8 * HOUR)
    assert reply["action"] in ("hold", "exclusive") and "waits its turn" in reply["comment"]
    # a job held no longer than bypass_h after it still passes; with bypass_h = 0 every job does
    s = _state(bypass_h=0.0)
    s.apply_snapshot([*busy, anywhere], node, 8 * HOUR)
    assert s.place_request(_req(), 8 * HOUR)["gres"] == "gres:shard:v100_s0:1"


def test_a_new_job_passes_a_held_job_that_wants_no_gpu_it_would_take() -> None:
    # job 60 has waited 7 h for a GPU of one shard type; the guard keeps that type's GPU
    # free for it. A request at 8 h goes to the GPU of the other type, which job 60 could
    # never take: it does not wait its turn (it would behind a job held for any GPU, above)
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    for held_for, other in (("v100_s0", "v100_s1"), ("v100_s1", "v100_s0")):
        s = _state(bypass_h=1.5)
        s.apply_snapshot([*busy, held_job(gres_type=held_for)], node, 8 * HOUR)
        reply = s.place_request(_req(), 8 * HOUR)
        assert reply["gres"] == f"gres:shard:{other}:1", (held_for, reply)


def test_the_view_counts_the_jobs_waiting_for_a_gpu_per_shared_gpu() -> None:
    s = _state()
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    busy = [shard_job(10, 0, end=20 * HOUR)]
    cpu_only = SlurmJob(70, "cpu", "bob", 1001, "PENDING", tres_per_node="cpu:4")
    snapshot = [
        *busy,
        waiting(50),  # gres:gpu:1
        waiting(51, gres="gres/shard:v100_s1:1"),
        held_job(60),  # held by the agent, no GPU request
        cpu_only,
    ]
    s.apply_snapshot(snapshot, node, 2 * HOUR)
    assert s.occupancy.queue == 3
    assert s.view.queue_per_gpu == 1.5  # two shared GPUs
    # a request's narrower view (one GPU model) keeps the site's figure
    assert s.occupancy.candidate_view({"req_nodes": "n9"}).queue_per_gpu == 1.5
    s.apply_snapshot(busy, node, 3 * HOUR)
    assert s.view.queue_per_gpu == 0.0


def test_status_says_how_many_wait_and_whether_the_throughput_path_is_open(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    from typer.testing import CliRunner

    from slurm_colo.cli import app
    from slurm_colo.contracts import client

    s = _state()
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    s.apply_snapshot([shard_job(10, 0, end=20 * HOUR), waiting(50)], node, 1 * HOUR)
    q = s.status(1 * HOUR)["queue"]
    assert q == {"waiting": 1, "per_gpu": 0.5, "drain_h": None, "throughput_path": False}
    monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: s.status(1 * HOUR))
    out = CliRunner().invoke(app, ["status"]).output
    assert "waiting for a GPU: 1 job(s), 0.50 per shared GPU" in out and "closed" in out
    s.apply_snapshot([waiting(50), waiting(51), held_job(60)], node, 2 * HOUR)
    assert s.status(2 * HOUR)["queue"]["throughput_path"] is True  # 1.5 per GPU


def test_a_queue_about_to_run_out_closes_the_throughput_path(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    from typer.testing import CliRunner

    from slurm_colo.cli import app
    from slurm_colo.contracts import client

    s = _state()
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    # 12 waiting jobs on two shared GPUs, one fewer every 1.5 h, a snapshot every 30 min
    t, q, last = 1 * HOUR, 0, 0
    for step in range(13):
        t = 1 * HOUR + step * 1800.0
        q = 12 - step // 3
        s.apply_snapshot([waiting(100 + k) for k in range(q)], node, t)
        st = s.status(t)["queue"]
        last = st["drain_h"]
        if step < 6:  # not yet half of the six hours seen: no forecast, the path is open
            assert last is None and st["throughput_path"] is True
    # 8 left (4 per GPU, above throughput_queue), 2/3 fewer an hour: gone in about 12 h,
    # under throughput_drain_h (24 h), so the path is closed
    assert q == 8 and last is not None and 10.0 < last < 14.0
    assert s.status(t)["queue"]["throughput_path"] is False
    monkeypatch.setattr(client, "status", lambda cfg, timeout_s=2.0: s.status(t))
    out = CliRunner().invoke(app, ["status"]).output
    assert "gone in about" in out and "closed" in out
    # a queue growing again opens it at once
    s.apply_snapshot([waiting(100 + k) for k in range(20)], node, t + 1800.0)
    s.apply_snapshot([waiting(100 + k) for k in range(24)], node, t + 3600.0)
    assert s.status(t + 3600.0)["queue"]["drain_h"] is None
    assert s.status(t + 3600.0)["queue"]["throughput_path"] is True


def test_a_job_held_too_long_holds_up_only_jobs_that_may_want_its_gpus() -> None:
    # job 60 (a loner, held since 1 h for a v100_s1 GPU) has waited 8 h; GPU 1 runs a job no
    # loner may join. Job 61, requeued at 5 h for a v100_s0 GPU, takes nothing of GPU 1: it
    # is released onto idle GPU 0. A job held at 5 h for any shared GPU may want GPU 1 too,
    # so it waits its turn behind job 60 (placement.bypass_h = 1.5) where jobs no shared GPU
    # takes are held. Elsewhere it waits for no shared GPU (it gets its own GPU where none
    # takes it) and is placed as a new job would be: on GPU 0, which job 60 cannot take.
    s = _state(bypass_h=1.5)
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    busy = [shard_job(10, 1, end=20 * HOUR)]
    old, typed = held_job(60), held_job(61, submit=5 * HOUR, gres_type="v100_s0")
    s.apply_snapshot([*busy, old, typed], node, 9 * HOUR)
    assert [a.job_id for a in s.reaim(9 * HOUR)] == [61]
    anywhere = held_job(62, submit=5 * HOUR, gres_type="*")
    for unplaced, aimed in (("hold", []), ("own-gpu", [(62, "gres:shard:v100_s0:1")])):
        s = _state(bypass_h=1.5, unplaced=unplaced)
        s.apply_snapshot([*busy, old, anywhere], node, 9 * HOUR)
        assert [(a.job_id, a.gres) for a in s.reaim(9 * HOUR) if a.kind == "aim"] == aimed
    # with the rule off both go
    s = _state(bypass_h=0.0, unplaced="hold")
    s.apply_snapshot([*busy, old, anywhere], node, 9 * HOUR)
    assert [a.job_id for a in s.reaim(9 * HOUR) if a.kind == "aim"] == [62]


def test_a_long_held_array_gets_the_gpus_as_they_drain_one_task_each() -> None:
    """Where every GPU is shared an array's tasks wait for shared GPUs only: past
    ``reserve_after_h`` the array, held longest, has a GPU drained for it; one task goes
    there, and the guard drains the next GPU for the tasks left (FIFO, as Slurm's queue
    would run an older array first), while a newer job that no GPU takes waits its turn."""
    cfg = Config(
        gpus=(NodeGpus("n1", 2, "v100", 32.0, (0, 1), 4),),
        placement=PlacementConfig(explore_rate=0.0, reserve_after_h=6.0),
    )
    s = AgentState(cfg, SCORES)
    node = [SlurmNode("n1", "MIXED", partitions=("gpu",))]
    s.apply_snapshot([], node, 0.0)
    sweep = {**_req(), "user": "carol", "uid": "1002", "class": "loner", "array": "1"}
    reply = s.place_request(sweep, 0.5)
    assert reply["action"] == "hold", reply
    array = SlurmJob(
        40,
        "sweep",
        "carol",
        1002,
        "PENDING",
        admin_comment=reply["tag"],
        submit_time=1 * HOUR,
        state_reason="JobHeldAdmin",
        array_tasks="0-5",
        partition="gpu",
    )
    busy = [shard_job(10, 0, end=20 * HOUR), shard_job(11, 1, end=9 * HOUR)]
    s.apply_snapshot([*busy, array], node, 8 * HOUR)  # loner takes no partner: all wait
    r = s.reservation
    assert r is not None and (r.job_id, r.gpus) == (40, (1,)) and s.reaim(8 * HOUR) == []
    s.apply_snapshot([busy[0], array], node, 9 * HOUR)  # GPU 1 drained: task 0 goes there
    [first] = s.reaim(9 * HOUR)
    assert (first.target, first.gres) == ("40_0", "gres:shard:v100_s1:1")
    task0 = carol_on_gpu1(100, "sweep", first.admin_comment)
    rest = replace(array, array_tasks="1-5")
    s.apply_snapshot([busy[0], task0, rest], node, 9 * HOUR + 10)
    r = s.reservation  # the tasks left: GPU 0 is drained next
    assert r is not None and (r.job_id, r.gpus) == (40, (0,))
    assert [g.closed_for for g in s.view.gpus] == [40, None] and s.reaim(9 * HOUR + 10) == []
    newer = s.place_request(_req(), 9 * HOUR + 20)  # good: not next to a loner, GPU 0 kept
    assert newer["action"] == "hold" and "kept free for job 40" in newer["comment"], newer
    s.apply_snapshot([task0, rest], node, 20 * HOUR)
    [second] = s.reaim(20 * HOUR)
    assert (second.target, second.gres) == ("40_1", "gres:shard:v100_s0:1")

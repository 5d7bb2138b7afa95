"""Re-planning --colocate jobs that wait in Slurm's queue for a whole GPU (agent/replan.py):
on Slurm 23.11+ the agent moves them onto a shared GPU that takes them."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from fake_slurm import FixedSlurm

from slurm_colo.agent.server import Agent
from slurm_colo.agent.state import AgentState
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.enums import Mode, Replan
from slurm_colo.contracts.placement import Placement
from slurm_colo.errors import SlurmError
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.control import ScontrolControl
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)
SCORES = table_from_pairs(
    [("a", "b", 1.0, 1.0), ("a", "a", 0.5, 0.5), ("b", "b", 0.5, 0.5)],
    classes={"a": ClassInfo(memory_gib=4.0), "b": ClassInfo(memory_gib=4.0)},
    created="",
)


def _state(replan: Replan = Replan.AUTO, newer_slurm: bool = True) -> AgentState:
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0, replan=replan))
    s = AgentState(cfg, SCORES)
    s.holds.retype_after_undo = newer_slurm
    return s


def _own_gpu_tag(cls: str, token: str, mode: Mode = Mode.AUTO) -> str:
    return Placement(token, cls, mode).to_tag()


def _running_a() -> SlurmJob:
    """Job 10, class a, on GPU 0's shards."""
    tag = Placement(token="ta", cls="a").to_tag()
    return SlurmJob(
        10,
        "a",
        "alice",
        1000,
        "RUNNING",
        nodes="n1",
        gres=(GresAlloc("shard", "v100_s0", 1, (0,)),),
        admin_comment=tag,
        submit_time=1.0,
    )


def _waiting(job_id: int, cls: str, **kw: object) -> SlurmJob:
    base = SlurmJob(
        job_id,
        cls,
        "alice",
        1000,
        "PENDING",
        tres_per_node="gres/gpu:1",
        admin_comment=_own_gpu_tag(cls, f"t{job_id}"),
        state_reason="Resources",
        submit_time=float(job_id),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _whole_gpus_busy() -> list[SlurmJob]:
    """GPUs 2 and 3 (whole) run jobs 20 and 21: a --colocate job with its own-GPU request waits."""
    return [
        SlurmJob(
            j,
            "x",
            "bob",
            1001,
            "RUNNING",
            nodes="n1",
            gres=(GresAlloc("gpu", "v100", 1, (i,)),),
            submit_time=0.5,
        )
        for j, i in ((20, 2), (21, 3))
    ]


NODES = [SlurmNode("n1", "MIXED")]


def test_a_job_waiting_for_a_whole_gpu_is_moved_onto_a_shared_gpu_that_takes_it() -> None:
    s = _state()
    b = _waiting(30, "b")
    s.apply_snapshot([_running_a(), b, *_whole_gpus_busy()], NODES, 5.0)
    [act] = s.replan(5.0)
    assert act.kind == "retarget" and act.job_id == 30 and act.node == "n1"
    assert act.gres == "gres:shard:v100_s0:1"  # next to a: the pair a+b is predicted to gain
    tag = Placement.from_tag(act.admin_comment)
    assert tag is not None and tag.shared and tag.gpu == 0 and tag.token == "t30"
    assert act.comment.startswith("colo: re-planned onto GPU 0 of n1")
    # counted on its GPU at once; not re-planned again before Slurm shows the change
    assert [o.key for o in s.view.gpus[0].occupants] == ["10", "30"]
    assert s.replan(5.5) == []
    moved = replace(
        b, admin_comment=act.admin_comment, tres_per_node="gres/shard:v100_s0:1", nodes=""
    )
    s.apply_snapshot([_running_a(), moved, *_whole_gpus_busy()], NODES, 7.0)
    assert s.replan(7.0) == [] and "30" in [o.key for o in s.view.gpus[0].occupants]
    ex = s.explain(30, act.admin_comment)
    assert ex["action"] == "share" and ex["reason"].startswith("waited for a whole GPU; then")


@pytest.mark.parametrize(
    "why, job",
    [
        ("waits for a dependency", _waiting(30, "b", state_reason="Dependency")),
        ("held", _waiting(30, "b", state_reason="JobHeldUser")),
        ("two GPUs", _waiting(30, "b", tres_per_node="gres/gpu:2")),
        ("--gpus (per job)", _waiting(30, "b", tres_per_job="gres/gpu:1")),
        ("two nodes", _waiting(30, "b", node_count=2)),
        ("a GPU model the cluster lacks", _waiting(30, "b", tres_per_node="gres/gpu:k80:1")),
        ("--colocate=off", _waiting(30, "b", admin_comment=_own_gpu_tag("b", "t", Mode.OFF))),
        ("no --colocate", _waiting(30, "b", admin_comment="")),
    ],
)
def test_jobs_that_are_not_single_gpu_colocate_jobs_waiting_for_gpus_stay_as_they_are(
    why: str, job: SlurmJob
) -> None:
    s = _state()
    s.apply_snapshot([_running_a(), job, *_whole_gpus_busy()], NODES, 5.0)
    assert s.replan(5.0) == [], why


@pytest.mark.parametrize("replan, newer", [(Replan.OFF, True), (Replan.AUTO, False)])
def test_off_or_on_slurm_22_05_nothing_is_re_planned(replan: Replan, newer: bool) -> None:
    s = _state(replan, newer)
    s.apply_snapshot([_running_a(), _waiting(30, "b"), *_whole_gpus_busy()], NODES, 5.0)
    assert s.replan(5.0) == []


def test_oldest_first_and_each_one_counted_before_the_next() -> None:
    """Two jobs of class a wait: a+a is harmful (0.5 each), so the first goes to the idle
    GPU 1 and the second, finding both GPUs with an a, stays waiting."""
    s = _state()
    waiting = [_waiting(31, "a"), _waiting(30, "a")]
    s.apply_snapshot([_running_a(), *waiting, *_whole_gpus_busy()], NODES, 5.0)
    [act] = s.replan(5.0)
    assert act.job_id == 30 and act.gres == "gres:shard:v100_s1:1"


def test_a_refused_retarget_forgets_the_new_placement() -> None:
    s = _state()
    s.apply_snapshot([_running_a(), _waiting(30, "b"), *_whole_gpus_busy()], NODES, 5.0)
    [act] = s.replan(5.0)
    s.failed(act, 5.2)  # the job started on a whole GPU meanwhile
    assert 30 not in s.ledger.by_job
    assert [o.key for o in s.view.gpus[0].occupants] == ["10"]


class Recording(ScontrolControl):
    def __init__(self, fail: bool = False) -> None:
        super().__init__(slurm_version="24.11.5")
        self.argvs: list[list[str]] = []
        self.fail = fail

    def run(self, argv: list[str]) -> None:
        self.argvs.append(argv)
        if self.fail:
            raise SlurmError("scontrol update failed: Job is no longer pending execution")


@pytest.mark.parametrize("fail", [False, True])
def test_the_agent_retargets_the_job_with_scontrol_in_the_installed_form(
    fail: bool, tmp_path: Path
) -> None:
    control = Recording(fail)
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    agent = Agent(
        cfg,
        FixedSlurm([_running_a(), _waiting(30, "b"), *_whole_gpus_busy()], NODES),
        control,
        learned_file=tmp_path / "learned.json",
    )
    agent.state.scores = SCORES
    assert agent.state.holds.retype_after_undo  # 24.11: pending jobs' GRES can change
    agent.refresh()
    deadline = time.monotonic() + 5
    while not control.argvs and time.monotonic() < deadline:
        time.sleep(0.01)
    [argv] = control.argvs
    assert argv[:4] == ["scontrol", "update", "JobId=30", "ReqNodeList=n1"]
    assert "TresPerNode=gres/shard:v100_s0:1" in argv
    assert any(a.startswith("AdminComment=slurm-colo[v=1 tok=t30") for a in argv)
    assert (30 in agent.state.ledger.by_job) is not fail


def test_a_waiting_job_does_not_pass_a_held_job_that_has_waited_too_long() -> None:
    """Bounded queue jumping (placement.bypass_h) holds for the re-plan too: a job submitted
    long after the held job waiting longest is not moved before that one has started, when
    that job may want the GPU it would take (b goes to GPU 0, shard type v100_s0)."""
    late = 3 * 3600.0

    def moved(held_for: str | None) -> list[int]:
        s = _state()
        s.cfg = Config(
            gpus=LAYOUT,
            placement=PlacementConfig(explore_rate=0.0, reserve_after_h=1.0, bypass_h=0.5),
        )
        jobs = [_running_a(), _waiting(30, "b", submit_time=late), *_whole_gpus_busy()]
        if held_for is not None:
            tag = Placement("th", "a", Mode.AUTO, undone=True, held=held_for).to_tag()
            jobs.append(replace(_waiting(40, "a", submit_time=1.0), admin_comment=tag))
        s.apply_snapshot(jobs, NODES, late)
        assert held_for is None or 40 in s.holds.jobs
        return [a.job_id for a in s.replan(late)]

    assert moved(None) == [30]  # nobody held: it is moved
    assert moved("v100_s0") == []  # b waits behind the job held for GPU 0's type
    assert moved("*") == []  # ... or for any shared GPU
    # a job held for GPU 1's type takes nothing of GPU 0: b passes it
    assert moved("v100_s1") == [30]


# ---- job arrays (agent/arrays.py) -----------------------------------------------------


def _array(job_id: int, cls: str, tasks: str) -> SlurmJob:
    """An array's record in Slurm: its tasks not started yet, its own-GPU request and the
    tag the agent gave it at submission."""
    return _waiting(job_id, cls, array_tasks=tasks)


def test_waiting_tasks_reads_slurms_lists_of_an_arrays_tasks() -> None:
    from slurm_colo.agent.arrays import waiting_tasks

    assert waiting_tasks("2-3,5", 10) == [2, 3, 5]
    assert waiting_tasks("1-9:2", 10) == [1, 3, 5, 7, 9]
    assert waiting_tasks("0-99%4", 3) == [0, 1, 2]  # a throttle is no task
    assert waiting_tasks("[7]", 10) == [7]
    assert waiting_tasks("", 10) == [] and waiting_tasks("0x3F", 10) == []


def test_the_waiting_tasks_of_an_array_are_moved_onto_shared_gpus_one_by_one() -> None:
    s = _state()
    arr = _array(40, "b", "2-5")
    s.apply_snapshot([_running_a(), arr, *_whole_gpus_busy()], NODES, 5.0)
    placed: list[str] = []
    s.live.placed = placed.append  # type: ignore[method-assign]
    acts = s.replan(5.0)
    assert [(a.kind, a.job_id, a.task, a.target) for a in acts] == [
        ("retarget", 40, 2, "40_2"),
        ("retarget", 40, 3, "40_3"),
    ]
    tags = [Placement.from_tag(a.admin_comment) for a in acts]
    assert [(t.token, t.gpu, t.cls) for t in tags if t] == [("t40-2", 0, "b"), ("t40-3", 1, "b")]
    # task 2 next to a (the pair gains), task 3 opened GPU 1; task 4 fits nowhere: none after
    assert [o.key for o in s.view.gpus[0].occupants] == ["10", "t40-2"]
    assert [o.key for o in s.view.gpus[1].occupants] == ["t40-3"]
    assert placed == ["b", "b"]  # each task a job of its class (the class recurs)
    # not moved again before Slurm shows them split from the array
    assert s.replan(5.5) == []
    # Slurm split them: jobs 41 and 42, each with its placement's tag
    split = [
        replace(
            _waiting(41 + i, "b"),
            admin_comment=a.admin_comment,
            tres_per_node="gres/shard:v100_s0:1",
            submit_time=40.0,
        )
        for i, a in enumerate(acts)
    ]
    s.apply_snapshot(
        [_running_a(), _array(40, "b", "4-5"), *split, *_whole_gpus_busy()], NODES, 7.0
    )
    assert s.ledger.by_job[41] == "t40-2" and s.ledger.by_job[42] == "t40-3"
    assert s.replan(7.0) == []
    ex = s.explain(41, acts[0].admin_comment)
    assert ex["action"] == "share" and ex["reason"].startswith("waited for a whole GPU; then")


def test_a_refused_retarget_of_a_task_forgets_its_placement() -> None:
    s = _state()
    s.apply_snapshot([_running_a(), _array(40, "b", "2"), *_whole_gpus_busy()], NODES, 5.0)
    [act] = s.replan(5.0)
    s.failed(act, 5.2)  # Slurm started the task from the array meanwhile
    assert "t40-2" not in s.ledger.placements
    assert [o.key for o in s.view.gpus[0].occupants] == ["10"]


@pytest.mark.parametrize("newer_slurm", [True, False])
def test_an_array_keeps_its_request_where_slurm_can_move_tasks_and_is_held_elsewhere(
    newer_slurm: bool,
) -> None:
    s = _state(newer_slurm=newer_slurm)
    s.apply_snapshot([], NODES, 0.5)
    req = {"user": "alice", "uid": "1000", "mode": "auto", "name": "sweep", "class": "b"}
    reply = s.place_request({**req, "array": "1"}, 1.0)
    assert reply["array"] == "1"
    assert s.ledger.placements == {}  # the array itself is never placed
    tag = Placement.from_tag(reply["tag"])
    assert tag is not None and not tag.shared and tag.cls == "b" and tag.mode == Mode.AUTO
    if newer_slurm:
        assert reply["action"] == "exclusive" and tag.held is None
        assert reply["comment"].startswith("colo: job array: each task waiting for a GPU")
        assert "user_msg" not in reply
        assert s.ledger.decisions["exclusive:job array"] == 1
    else:  # 22.05 cannot move a waiting task: held, each task released (agent/held_arrays.py)
        assert reply["action"] == "hold" and reply["gres"] == "none" and tag.held == "*"
        assert reply["comment"].endswith("else with its own GPU request")
        assert s.ledger.decisions["hold:job array"] == 1
    # placement.replan = "off": held the same way on any version
    off = _state(Replan.OFF)
    off.apply_snapshot([], NODES, 0.5)
    reply = off.place_request({**req, "array": "1"}, 1.0)
    assert reply["action"] == "hold" and reply["comment"].endswith("else with its own GPU request")


def test_an_array_with_no_shared_gpu_to_go_to_is_not_shared_and_sbatch_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from slurm_colo.agent.actions import Action

    req = {"user": "alice", "uid": "1000", "mode": "auto", "name": "sweep", "array": "1"}
    with caplog.at_level("INFO", logger="slurm_colo.agent"):
        # no node of the layout in Slurm's answer: no shared GPU the array may use
        lone = _state(newer_slurm=False).place_request(req, 1.0)
        refused = _state(newer_slurm=False)
        refused.apply_snapshot([], NODES, 0.5)
        refused.failed(
            Action("admin_hold", 12), 0.6, "scontrol hold 12 failed: Access/permission denied"
        )
        denied = refused.place_request(req, 1.0)
    assert (lone["action"], denied["action"]) == ("exclusive", "exclusive")
    assert "tag" not in lone and "tag" not in denied
    assert lone["user_msg"] == (
        "slurm-colo: this job array is not shared (no shared GPU it may use); each task keeps "
        "its GPU request"
    )
    why = "Slurm refuses the agent the right to release it"
    assert why in denied["user_msg"]
    said = [r.getMessage() for r in caplog.records]
    assert any("job array: not shared (no shared GPU it may use)" in m for m in said)
    assert any(f"job array: not shared ({why})" in m for m in said)


def test_the_agent_retargets_a_task_of_an_array_by_its_task_id(tmp_path: Path) -> None:
    control = Recording()
    cfg = Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0))
    agent = Agent(
        cfg,
        FixedSlurm([_running_a(), _array(40, "b", "7"), *_whole_gpus_busy()], NODES),
        control,
        learned_file=tmp_path / "learned.json",
    )
    agent.state.scores = SCORES
    agent.refresh()
    deadline = time.monotonic() + 5
    while not control.argvs and time.monotonic() < deadline:
        time.sleep(0.01)
    [argv] = control.argvs
    assert argv[:4] == ["scontrol", "update", "JobId=40_7", "ReqNodeList=n1"]
    assert any(a.startswith("AdminComment=slurm-colo[v=1 tok=t40-7") for a in argv)


def test_a_look_at_slurm_places_a_bounded_number_of_waiting_jobs_and_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At most MAX_PER_PASS waiting jobs are looked at per look (an array is one of them),
    and at most MAX_PER_PASS jobs or tasks moved: the look holds the agent's lock."""
    from slurm_colo.agent import replan

    calls: list[str] = []
    real = replan.place_by_model

    def counted(req, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(req.key)
        return real(req, *a, **kw)

    monkeypatch.setattr(replan, "place_by_model", counted)
    s = _state()
    # 40 jobs of a class no GPU next to a takes (b+b and a+a lose), GPU 1 taken by a too
    other_a = replace(_running_a(), job_id=11, gres=(GresAlloc("shard", "v100_s1", 1, (1,)),))
    full = [_running_a(), other_a, *_whole_gpus_busy()]
    s.apply_snapshot([*full, *(_waiting(100 + k, "a") for k in range(40))], NODES, 5.0)
    assert s.replan(5.0) == [] and len(calls) == replan.MAX_PER_PASS
    # an array of 100 tasks where every task fits: moved up to the cap in one look
    calls.clear()
    many = (NodeGpus("n1", 64, "v100", 32.0, tuple(range(64)), 4),)
    s = AgentState(Config(gpus=many, placement=PlacementConfig(explore_rate=0.0)), SCORES)
    s.holds.retype_after_undo = True
    s.apply_snapshot([_array(40, "b", "0-99")], NODES, 5.0)
    acts = s.replan(5.0)
    assert [a.task for a in acts] == list(range(replan.MAX_PER_PASS))
    assert len(calls) == replan.MAX_PER_PASS

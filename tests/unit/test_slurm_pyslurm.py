"""The pyslurm backend against what real pyslurm builds answered on the labs
(``tests/fixtures/slurm/pyslurm-22.5.3.json`` on the 22.05 lab, ``pyslurm-24.11.0.json`` on
the 24.11 one; written by ``pyslurm_capture.py`` beside them): the jobs and nodes it gives
must be those the JSON backend reads from Slurm's own JSON taken at the same moment, for
everything the agent reads of them. pyslurm 24.11.0 gives no job a resource layout, so
there a running job's GPU indices are not compared (the agent maps a shard type to its GPU
and takes an exclusive job's GPUs from the Prolog's report)."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from slurm_colo.errors import SlurmError
from slurm_colo.slurm.json_backend import parse_nodes, parse_squeue
from slurm_colo.slurm.model import SlurmJob
from slurm_colo.slurm.pyslurm_backend import PyslurmBackend, pyslurm_matches

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
CAPTURE = FIX / "pyslurm-22.5.3.json"
CAPTURE_24 = FIX / "pyslurm-24.11.0.json"
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")


class _Recorded:
    """A pyslurm object as captured: its attributes, and its resource layout."""

    def __init__(self, attrs: dict[str, Any]) -> None:
        for k, v in attrs.items():
            if k != "get_resource_layout_per_node" and v != {"missing": True}:
                setattr(self, k, v)
        self._layout = attrs.get("get_resource_layout_per_node")

    def get_resource_layout_per_node(self) -> Any:
        return self._layout


def _module(doc: dict[str, Any]) -> types.ModuleType:
    m = types.ModuleType("pyslurm")
    m.__version__ = doc["pyslurm_version"]  # type: ignore[attr-defined]
    jobs = {j["id"]: _Recorded(j) for j in doc["jobs"]}
    nodes = {n["name"]: _Recorded(n) for n in doc["nodes"]}
    m.Jobs = types.SimpleNamespace(load=lambda: jobs)  # type: ignore[attr-defined]
    m.Job = types.SimpleNamespace(load=lambda i: jobs[i])  # type: ignore[attr-defined]
    m.Nodes = types.SimpleNamespace(load=lambda: nodes)  # type: ignore[attr-defined]
    return m


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return json.loads(CAPTURE.read_text())


def _sorted_gres(j: SlurmJob) -> list[tuple[str, str, int, tuple[int, ...]]]:
    return sorted((g.name, g.type, g.count, g.indices) for g in j.gres)


def test_the_capture_is_of_a_matching_build_with_jobs_of_every_kind(doc: dict[str, Any]) -> None:
    assert pyslurm_matches(_module(doc), doc["slurm_version"])
    states = {j["state"] for j in doc["jobs"]}
    assert {"RUNNING", "PENDING"} <= states
    running = [j for j in doc["jobs"] if j["state"] == "RUNNING"]
    kinds = {k.split(":")[0] for j in running for k in j["gres_per_node"]}
    assert kinds == {"gpu", "shard"}  # exclusive and shared jobs running


#: job fields read from pyslurm attributes the captures were taken without (they came
#: later): their shapes are checked on stand-ins below
NOT_CAPTURED = ("dependency", "eligible_time")


def test_jobs_are_those_slurms_json_gives(doc: dict[str, Any]) -> None:
    """Every field of every job the agent may act on; a running job's GRES with their GPU
    indices (a job not started has none in Slurm's JSON; pyslurm gives its request)."""
    mine = {j.job_id: j for j in PyslurmBackend(_module(doc)).jobs()}
    theirs = {j.job_id: j for j in parse_squeue(doc["squeue"])}
    assert sorted(mine) == sorted(theirs)
    compared = 0
    for job_id, t in theirs.items():
        if t.state not in ACTIVE:
            continue
        m = mine[job_id]
        for field in SlurmJob.__dataclass_fields__:
            if field in ("gres", "tres_per_job", "requeue", *NOT_CAPTURED):
                continue
            assert getattr(m, field) == getattr(t, field), (job_id, field)
        if t.state == "RUNNING":
            assert _sorted_gres(m) == _sorted_gres(t), job_id
            assert any(g.indices for g in m.gres), job_id  # the agent sees which GPU
            compared += 1
    assert compared >= 4


def test_running_jobs_sit_where_slurm_says(doc: dict[str, Any]) -> None:
    """The GPU indices each running job holds, by kind: what the agent's occupancy reads."""
    held = {}
    for j in PyslurmBackend(_module(doc)).jobs():
        if j.state == "RUNNING":
            held[j.job_id] = (j.nodes, {g.name: g.indices for g in j.gres if g.count})
    expected = {}
    for j in parse_squeue(doc["squeue"]):
        if j.state == "RUNNING":
            expected[j.job_id] = (j.nodes, {g.name: g.indices for g in j.gres if g.count})
    assert held == expected
    assert all(node for node, _ in held.values())


@pytest.mark.parametrize("capture", [CAPTURE, CAPTURE_24], ids=["22.5.3", "24.11.0"])
def test_nodes_are_those_slurms_json_gives(capture: Path) -> None:
    doc = json.loads(capture.read_text())
    mine = {n.name: n for n in PyslurmBackend(_module(doc)).nodes()}
    theirs = {n.name: n for n in parse_nodes(doc["node_json"])}
    assert sorted(mine) == sorted(theirs)
    for name, t in theirs.items():
        m = mine[name]
        assert sorted(m.gres.split(",")) == sorted(t.gres.split(",")), name
        assert (m.partitions, m.features, m.usable) == (t.partitions, t.features, t.usable)


def test_a_layout_slurm_colo_cannot_read_is_an_error(doc: dict[str, Any]) -> None:
    m = _module(doc)
    job = next(j for j in m.Jobs.load().values() if j.state == "RUNNING")
    job._layout = {"vm": {"gres": {"gpu:v100": {"count": "2", "indexes": "0/4,1/4"}}}}
    with pytest.raises(SlurmError, match=f"job {job.id} holds GRES gpu:v100") as e:
        PyslurmBackend(m).jobs()
    assert "slurm_backend = json" in (e.value.hint or "")


@pytest.fixture(scope="module")
def doc24() -> dict[str, Any]:
    return json.loads(CAPTURE_24.read_text())


def test_on_24_11_jobs_are_those_slurms_json_gives_but_their_gpu_indices(
    doc24: dict[str, Any],
) -> None:
    """pyslurm 24.11 keeps Slurm's ``gres/`` prefix in its GRES keys (``gres/shard:v100_s0``):
    a job's GRES name is still ``shard``, its request text squeue's. Slurm 24.11's JSON leaves
    ended jobs out; pyslurm lists them."""
    assert pyslurm_matches(_module(doc24), doc24["slurm_version"])
    mine = {j.job_id: j for j in PyslurmBackend(_module(doc24)).jobs()}
    theirs = {j.job_id: j for j in parse_squeue(doc24["squeue"])}
    assert set(theirs) <= set(mine)
    running = 0
    for job_id, t in theirs.items():
        m = mine[job_id]
        for field in SlurmJob.__dataclass_fields__:
            if field not in ("gres", "tres_per_job", "requeue", *NOT_CAPTURED):
                assert getattr(m, field) == getattr(t, field), (job_id, field)
        assert all(g.name in ("gpu", "shard") for g in m.gres), m.gres
        if t.state == "RUNNING":
            running += 1
            held = {(g.name, g.count) for g in t.gres if g.count}
            assert {(g.name, g.count) for g in m.gres} == held, job_id
    assert running >= 4
    assert all(not j.active for i, j in mine.items() if i not in theirs)


def test_on_24_11_a_shard_jobs_type_names_the_gpu_slurm_gives_it(doc24: dict[str, Any]) -> None:
    from slurm_colo.gres_layout import NodeGpus

    (node,) = doc24["nodes"]
    layout = NodeGpus(nodes=node["name"], count=4, shared=(0, 1), model="v100")
    theirs = {j.job_id: j for j in parse_squeue(doc24["squeue"])}
    shard_jobs = 0
    for j in PyslurmBackend(_module(doc24)).jobs():
        for g in j.gres:
            if j.state == "RUNNING" and g.name == "shard":
                (t,) = [a for a in theirs[j.job_id].gres if a.name == "shard"]
                assert (layout.index_for_type(g.type),) == t.indices
                shard_jobs += 1
    assert shard_jobs >= 2


def test_an_arrays_record_gives_its_waiting_tasks() -> None:
    """pyslurm's ``Job.array_tasks_waiting`` (None for any job but an array's record)."""
    from slurm_colo.slurm.pyslurm_backend import job_from_pyslurm

    rec = types.SimpleNamespace(id=40, state="PENDING", array_tasks_waiting="2-3,5")
    task = types.SimpleNamespace(id=41, state="PENDING", array_tasks_waiting=None)
    assert job_from_pyslurm(rec).array_tasks == "2-3,5"
    assert job_from_pyslurm(task).array_tasks == ""


def test_an_arrays_record_names_the_task_it_stands_for() -> None:
    """pyslurm's ``array_id`` and ``array_task_id``: the record of an array whose last task
    it runs or waits as is named by that task; a task split off by its own id."""
    from slurm_colo.slurm.pyslurm_backend import job_from_pyslurm

    def job(job_id: int, array: int | None, task: int | None) -> object:
        return types.SimpleNamespace(id=job_id, state="PENDING", array_id=array, array_task_id=task)

    assert job_from_pyslurm(job(40, 40, 7)).record_task == 7
    assert job_from_pyslurm(job(41, 40, 6)).record_task is None
    assert job_from_pyslurm(job(42, None, None)).record_task is None
    assert job_from_pyslurm(job(43, 43, None)).record_task is None
    other_name = types.SimpleNamespace(id=44, state="PENDING", array_job_id=44, array_task_id=2)
    assert job_from_pyslurm(other_name).record_task == 2


def test_what_a_pending_job_waits_for_before_it_may_start() -> None:
    """pyslurm gives a job's dependency as a dict of kinds or as Slurm's text, by release."""
    from slurm_colo.slurm.pyslurm_backend import job_from_pyslurm

    def job(**attrs: object) -> object:
        return types.SimpleNamespace(id=50, state="PENDING", **attrs)

    deps = {"afterok": [12, 13], "afterany": [], "singleton": True, "satisfy": "all"}
    assert job_from_pyslurm(job(dependencies=deps)).dependency == "afterok:12:13,singleton"
    none = {"afterok": [], "singleton": False, "satisfy": "all"}
    assert job_from_pyslurm(job(dependencies=none)).waits_to_start(0.0) == ""
    assert job_from_pyslurm(job(dependency="afterok:12")).dependency == "afterok:12"
    later = job_from_pyslurm(job(dependencies=None, eligible_time=1500))
    assert later.waits_to_start(1000.0) == "its begin time" and later.waits_to_start(1600.0) == ""

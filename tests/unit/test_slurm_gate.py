"""The Slurm state gate: parsing recorded 22.05 JSON, and the pyslurm backend on a stand-in
module with pyslurm's attribute names (``test_slurm_pyslurm.py`` replays a real build's
answers)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from slurm_colo.errors import SlurmError
from slurm_colo.slurm import open_backend
from slurm_colo.slurm.json_backend import JsonBackend, parse_sinfo, parse_squeue
from slurm_colo.slurm.model import parse_gres_detail
from slurm_colo.slurm.pyslurm_backend import PyslurmBackend, pyslurm_matches

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def test_gres_detail_shapes() -> None:
    g = parse_gres_detail(
        ["gpu:v100_s0:1(IDX:0),gpu:v100_s1:0(IDX:),gpu:v100:2(IDX:2-3)", "shard:1(IDX:1)"]
    )
    assert [(x.name, x.type, x.count, x.indices) for x in g] == [
        ("gpu", "v100_s0", 1, (0,)),
        ("gpu", "v100_s1", 0, ()),
        ("gpu", "v100", 2, (2, 3)),
        ("shard", "", 1, (1,)),
    ]
    assert parse_gres_detail(["gpu:2(IDX:0-1)"])[0].indices == (0, 1)
    assert parse_gres_detail([]) == parse_gres_detail(None) == parse_gres_detail([""]) == []


def test_recorded_squeue() -> None:
    jobs = {j.job_id: j for j in parse_squeue(json.loads((FIX / "squeue-22.05.json").read_text()))}
    assert jobs[5].state == "RUNNING" and jobs[5].gpus("shard")[0].indices == (1,)
    assert jobs[3].gpus("gpu")[0].indices == (0,) and jobs[3].tres_per_node == "gres:gpu:1"
    assert jobs[4].state == "PENDING" and "slurm-colo[v=1" in jobs[4].admin_comment
    assert jobs[6].tres_per_job == "gres:gpu:2"
    assert not jobs[1].active and jobs[5].active
    assert jobs[4].state_reason == "Resources" and jobs[4].partition == "debug"
    assert jobs[3].end_time == 1826862126.0  # start + time limit
    assert jobs[4].required_nodes == "vm" and jobs[3].required_nodes == ""  # -w
    assert all(j.excluded_nodes == "" for j in jobs.values())  # -x


def test_recorded_sinfo() -> None:
    (n,) = parse_sinfo(json.loads((FIX / "sinfo-22.05.json").read_text()))
    assert (
        n.name == "vm" and n.usable and "shard:v100_s1:4" in n.gres and n.partitions == ("debug",)
    )


@pytest.mark.parametrize("doc", [[], {"jobs": "x"}, {"meta": {}}])
def test_bad_squeue_output(doc: object) -> None:
    with pytest.raises(SlurmError, match="unexpected output"):
        parse_squeue(doc)


def test_runner_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="not found"):
        JsonBackend(squeue=str(tmp_path / "nope")).jobs()
    fake = tmp_path / "squeue"
    fake.write_text("#!/bin/sh\necho not json\n")
    fake.chmod(0o755)
    with pytest.raises(SlurmError, match="not JSON"):
        JsonBackend(squeue=str(fake)).jobs()
    fake.write_text("#!/bin/sh\necho '{\"jobs\": [1%s]}'\n" % ("0" * 5000))
    with pytest.raises(SlurmError, match="not usable JSON"):  # past Python's 4,300 digits
        JsonBackend(squeue=str(fake)).jobs()
    fake.write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1\n"
    )
    with pytest.raises(SlurmError, match="Unable to contact"):
        JsonBackend(squeue=str(fake)).jobs()
    with pytest.raises(SlurmError, match="Unable to contact"):  # not "no such job"
        JsonBackend(squeue=str(fake)).job(5)


def test_slurm_errors_in_json_output_are_not_an_empty_cluster(tmp_path: Path) -> None:
    # Slurm 22.05 with slurmctld stopped (captured): exit 0, an error, no jobs and no nodes
    for name, fixture in (
        ("squeue", "squeue-22.05-controller-down.json"),
        ("sinfo", "sinfo-22.05-controller-down.json"),
    ):
        fake = tmp_path / name
        fake.write_text(f"#!/bin/sh\ncat {FIX / fixture}\n")
        fake.chmod(0o755)
    backend = JsonBackend(
        squeue=str(tmp_path / "squeue"), sinfo=str(tmp_path / "sinfo"), slurm_version="22.05.8"
    )
    with pytest.raises(SlurmError, match=r"Failed while looking for jobs \(slurm_load_jobs\)") as e:
        backend.jobs()
    assert "scontrol ping" in (e.value.hint or "")
    with pytest.raises(SlurmError, match="Slurm reported an error: Unspecified error"):
        backend.nodes()
    with pytest.raises(SlurmError, match="Failed while looking for jobs"):
        backend.job(5)  # Slurm could not be asked: not the same as "no such job"


def _fails_with(path: Path, fixture: str) -> str:
    """A stand-in command that prints a captured stderr and exits 1, as Slurm's did."""
    path.write_text(f"#!/bin/sh\ncat {FIX / fixture} >&2\nexit 1\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_a_job_slurm_does_not_know_is_none_and_slurm_down_is_an_error(
    tmp_path: Path, version: str
) -> None:
    # captured from the version labs: squeue --json --jobs=N for a purged job, and every
    # command with slurmctld stopped, exit 1 with these lines (no JSON)
    squeue = _fails_with(tmp_path / "squeue", f"squeue-{version}-unknown-job.stderr")
    assert JsonBackend(squeue=squeue, slurm_version=f"{version}.5").job(99999) is None
    squeue = _fails_with(tmp_path / "squeue", f"squeue-{version}-controller-down.stderr")
    scontrol = _fails_with(tmp_path / "scontrol", "scontrol-nodes-26.05-controller-down.stderr")
    sinfo = _fails_with(tmp_path / "sinfo", "sinfo-24.11-controller-down.stderr")
    backend = JsonBackend(
        squeue=squeue, sinfo=sinfo, scontrol=scontrol, slurm_version=f"{version}.5"
    )
    for look in (lambda: backend.job(5), backend.jobs, backend.nodes):
        with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
            look()


def test_an_empty_errors_list_is_no_error() -> None:
    from slurm_colo.slurm.json_backend import reported_error

    assert reported_error(json.loads((FIX / "squeue-22.05.json").read_text())) is None
    assert reported_error({"errors": [], "jobs": []}) is None
    assert reported_error({"jobs": []}) is None
    assert reported_error({"errors": ["plain text", {"error": "E", "source": "S"}]}) == (
        "plain text; E (S)"
    )


def _fake_pyslurm(version: str) -> types.ModuleType:
    m = types.ModuleType("pyslurm")
    m.__version__ = version  # type: ignore[attr-defined]
    job = types.SimpleNamespace(
        id=7,
        name="train",
        user_name="alice",
        user_id=1000,
        state="RUNNING",
        allocated_nodes="gpu01",
        num_nodes=1,
        gres_per_node={"shard:a100_s1": 1},
        comment="c",
        admin_comment="slurm-colo[v=1 tok=x]",
        start_time=10,
        submit_time=5,
        end_time=3610,
        state_reason="None",
        partition="gpu",
    )
    node = types.SimpleNamespace(
        name="gpu01",
        state="MIXED",
        configured_gres={"gpu:a100_s1": 1},
        allocated_gres={},
        active_features=["colo"],
    )
    m.Jobs = types.SimpleNamespace(load=lambda: {7: job})  # type: ignore[attr-defined]
    m.Job = types.SimpleNamespace(load=lambda i: job)  # type: ignore[attr-defined]
    m.Nodes = types.SimpleNamespace(load=lambda: {"gpu01": node})  # type: ignore[attr-defined]
    return m


def test_pyslurm_backend_maps_the_new_api() -> None:
    b = PyslurmBackend(_fake_pyslurm("25.11.2"))
    (j,) = b.jobs()
    assert (j.job_id, j.user, j.state, j.nodes) == (7, "alice", "RUNNING", "gpu01")
    assert j.gres[0].name == "shard" and j.gres[0].type == "a100_s1" and j.gres[0].indices == ()
    assert j.tres_per_node == "gres/shard:a100_s1:1"  # 25.11 writes the slash form
    assert (j.end_time, j.state_reason, j.partition) == (3610.0, "None", "gpu")
    assert b.job(7) == j
    (n,) = b.nodes()
    assert n.gres == "gpu:a100_s1:1" and n.features == ("colo",)


class _RPCError(Exception):
    """pyslurm's RPCError: Slurm's message and errno."""

    def __init__(self, msg: str, errno: int) -> None:
        super().__init__(msg)
        self.errno = errno


def test_pyslurm_job_unknown_is_none_and_slurm_down_is_an_error() -> None:
    m = _fake_pyslurm("25.11.2")
    b = PyslurmBackend(m)

    def load(errno: int, msg: str) -> None:
        def raise_it(i: int) -> None:
            raise _RPCError(msg, errno)

        m.Job = types.SimpleNamespace(load=raise_it)  # type: ignore[attr-defined]

    load(2017, "Invalid job id specified")
    assert b.job(99999) is None
    load(1007, "Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmError, match="loading job 5 failed: Unable to contact"):
        b.job(5)


def test_pyslurm_only_when_versions_match(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pyslurm_matches(_fake_pyslurm("25.11.2"), "25.11.0")
    assert not pyslurm_matches(_fake_pyslurm("25.11.2"), "22.05.8")
    monkeypatch.setitem(__import__("sys").modules, "pyslurm", _fake_pyslurm("25.11.2"))
    assert open_backend("auto", "22.05.8").name == "json"
    assert open_backend("auto", "25.11.1").name == "pyslurm"
    with pytest.raises(SlurmError, match="does not match"):
        open_backend("pyslurm", "22.05.8")


def test_an_arrays_record_names_the_task_it_stands_for() -> None:
    """As the labs showed a held ``--array=0-2%2`` once tasks 0 and 1 were split off: 22.05
    and 24.11 give the record the last task's ``array_task_id`` and no task string, 26.05
    keeps the task in the string (``2%2``) and leaves the id unset."""

    def job(job_id: int, array: object, task: object, waiting: str) -> dict[str, object]:
        return {
            "job_id": job_id,
            "job_state": "PENDING",
            "array_job_id": array,
            "array_task_id": task,
            "array_task_string": waiting,
        }

    def num(n: int, set_: bool = True) -> dict[str, object]:
        return {"set": set_, "infinite": False, "number": n}

    doc = {
        "jobs": [
            job(4369, 4369, None, "0-2%2"),  # the record while several tasks wait in it
            job(4370, 4369, 0, ""),  # a task split off: a job of its own
            job(4380, 4380, 2, ""),  # the record, its last task
            job(4390, 0, None, ""),  # no array
            job(4400, num(4400), num(0, set_=False), "2%2"),  # 26.05
            job(4410, num(4410), num(3), ""),  # 24.11
            job(4411, num(4410), num(1), ""),
        ]
    }
    got = {j.job_id: (j.array_task, j.record_task, j.scontrol_id) for j in parse_squeue(doc)}
    assert got == {
        4369: (None, None, "4369"),
        4370: (None, None, "4370"),
        4380: (2, 2, "4380_2"),
        4390: (None, None, "4390"),
        4400: (None, None, "4400"),
        4410: (3, 3, "4410_3"),
        4411: (None, None, "4411"),
    }

"""The Slurm gate on output recorded from Slurm 22.05.8, 24.11.5 and 26.05.5
(tests/fixtures/slurm, docs/slurm-versions.md): the same records from each version's
shapes, the command each version needs, and unknown shapes refused loudly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_colo.errors import SlurmError
from slurm_colo.gres_layout import NodeGpus, tres_gres
from slurm_colo.slurm import version as version_mod
from slurm_colo.slurm.control import ScontrolControl
from slurm_colo.slurm.json_backend import (
    JsonBackend,
    nodes_argv,
    parse_nodes,
    parse_squeue,
    squeue_argv,
)
from slurm_colo.slurm.model import GresAlloc, parse_gres_detail
from slurm_colo.slurm.version import (
    InstalledVersion,
    has_scontrol_json,
    parse_version,
    version_from_meta,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NEW = ["24.11", "26.05"]


def _load(name: str) -> object:
    return json.loads((FIX / name).read_text())


@pytest.mark.parametrize("v", NEW)
def test_squeue_of_newer_slurm(v: str) -> None:
    jobs = {j.job_id: j for j in parse_squeue(_load(f"squeue-{v}.json"))}
    shard, gpu, held = jobs[3], jobs[4], jobs[5]
    assert shard.state == "RUNNING" and shard.active
    assert shard.gres == (GresAlloc("shard", "", 1, (1,)),)  # shard:1(0/4,1/4,0/0,0/0): GPU 1
    assert (
        shard.tres_per_node == "gres/shard:v100_s1:1"
        and shard.nodes == f"colo-{'trixie' if v == '24.11' else 'sid'}"
    )
    assert (shard.comment, shard.admin_comment) == ("colo: shard job", "colo=shard gpu=1")
    assert (
        shard.start_time == 1795549807.0
        and shard.end_time == 1827085807.0
        and shard.node_count == 1
    )
    assert [(g.type, g.count, g.indices) for g in gpu.gpus()] == [
        ("v100_s0", 1, (0,)),
        ("v100_s1", 0, ()),
        ("v100", 0, ()),
    ]
    assert gpu.tres_per_node == "gres/gpu:1" and gpu.requeue
    assert held.state == "PENDING" and not held.active and held.gres == ()
    assert (held.state_reason, held.tres_per_node, held.start_time) == (
        "JobHeldUser",
        "gres/gpu:v100:1",
        0.0,
    )
    assert (
        held.submit_time > 0 and held.partition == "debug" and held.uid == 0 and held.user == "root"
    )


def test_the_same_jobs_read_the_same_on_both_newer_versions() -> None:
    a, b = (parse_squeue(_load(f"squeue-{v}.json")) for v in NEW)
    strip = lambda js: [(j.job_id, j.state, j.gres, j.tres_per_node, j.comment) for j in js]  # noqa: E731
    assert strip(a) == strip(b)


@pytest.mark.parametrize(
    "name",
    [
        "scontrol-nodes-24.11.json",
        "scontrol-nodes-26.05.json",
        "sinfo-24.11.json",
        "sinfo-26.05.json",
    ],
)
def test_nodes_of_newer_slurm(name: str) -> None:
    (n,) = parse_nodes(_load(name))
    assert n.name.startswith("colo-") and n.state == "MIXED" and n.usable
    assert (
        n.gres
        == "gpu:v100_s0:1,gpu:v100_s1:1,gpu:v100:2,shard:v100_s0:4,shard:v100_s1:4,shard:v100:0"
    )
    assert "shard:v100_s1:1(1/4)" in n.gres_used and n.features == ("colo", "fakegpu")
    assert n.partitions == ("debug",)
    # the agent's check of Slurm's GPU numbering reads this shape (gres_layout.gres_mismatch)
    assert NodeGpus(n.name, 4, "v100", 32, (0, 1), 4).gres_mismatch(n.gres) is None
    assert "gpu:v100:2,gpu:v100_s2:1" in (
        NodeGpus(n.name, 4, "v100", 32, (2, 3), 4).gres_mismatch(n.gres) or ""
    )


def test_grouped_sinfo_gives_every_host_of_a_group() -> None:
    doc = _load("sinfo-24.11.json")
    assert isinstance(doc, dict)
    group = doc["sinfo"][0]
    other = json.loads(json.dumps(group))
    other["partition"]["name"] = "long"
    group["nodes"]["nodes"] = ["gpu[01-02]", "gpu07"]
    other["nodes"]["nodes"] = ["gpu07"]
    doc["sinfo"] = [group, other]
    nodes = {n.name: n for n in parse_nodes(doc)}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu07"]
    assert nodes["gpu01"].partitions == ("debug",) and nodes["gpu07"].partitions == (
        "debug",
        "long",
    )
    assert nodes["gpu02"].gres == nodes["gpu07"].gres and nodes["gpu02"].state == "MIXED"


@pytest.mark.parametrize(
    "items,want",
    [
        (["shard:1(0/4,1/4,0/0,0/0)"], [("shard", "", 1, (1,))]),
        (["shard:2(2/4,0/4)"], [("shard", "", 2, (0,))]),
        (["shard:v100_s1:1(0/4,1/4)"], [("shard", "v100_s1", 1, (1,))]),
        (["shard:1(-/4,1/4)"], [("shard", "", 1, (1,))]),
        (
            ["mps:50(0/100,50/100),gpu:v100:0(IDX:)"],
            [("mps", "", 50, (1,)), ("gpu", "v100", 0, ())],
        ),
        (["shard:1(IDX:1)"], [("shard", "", 1, (1,))]),
        (["gpu:v100:2(IDX:N/A)"], [("gpu", "v100", 2, ())]),
        (["nic(CNT:2)"], [("nic", "", 2, ())]),
        (
            ["gpu:a100:1(IDX:0)", "gpu:a100:1(IDX:3)"],
            [("gpu", "a100", 1, (0,)), ("gpu", "a100", 1, (3,))],
        ),
    ],
)
def test_gres_detail_shapes_of_each_version(
    items: list[str], want: list[tuple[object, ...]]
) -> None:
    assert [(g.name, g.type, g.count, g.indices) for g in parse_gres_detail(items)] == want


@pytest.mark.parametrize(
    "item",
    [
        "nonsense",
        "shard:1(1 of 4)",
        "gpu:1(IDX:a-b)",
        "shard:1(0/4;1/4)",
        "gpu:v100:1",
        "shard:x(IDX:1)",
    ],
)
def test_an_unknown_gres_detail_is_an_error_not_no_gpu(item: str) -> None:
    with pytest.raises(SlurmError, match="format slurm-colo does not know"):
        parse_gres_detail([item])
    doc = _load("squeue-24.11.json")
    assert isinstance(doc, dict)
    doc["jobs"][0]["gres_detail"] = [item]
    with pytest.raises(SlurmError, match=r"squeue --json: job 3: gres_detail item"):
        parse_squeue(doc)


@pytest.mark.parametrize(
    "field,value",
    [
        ("job_state", {"current": "RUNNING"}),
        ("start_time", {"set": True}),
        ("node_count", [1]),
        ("comment", {"x": 1}),
    ],
)
def test_an_unknown_field_shape_is_an_error(field: str, value: object) -> None:
    doc = _load("squeue-26.05.json")
    assert isinstance(doc, dict)
    doc["jobs"][1][field] = value
    with pytest.raises(SlurmError, match="job 4: unexpected record"):
        parse_squeue(doc)


def test_state_lists_read_as_the_22_05_word() -> None:
    doc = _load("squeue-24.11.json")
    assert isinstance(doc, dict)
    doc["jobs"][0]["job_state"] = ["COMPLETED", "COMPLETING"]
    doc["jobs"][1]["job_state"] = ["RUNNING", "CONFIGURING"]
    doc["jobs"][2]["job_state"] = ["PENDING", "REQUEUED"]
    assert [j.state for j in parse_squeue(doc)] == ["COMPLETING", "CONFIGURING", "PENDING"]


def test_unset_and_infinite_numbers_read_as_unknown() -> None:
    doc = _load("squeue-24.11.json")
    assert isinstance(doc, dict)
    doc["jobs"][0]["end_time"] = {"set": False, "infinite": True, "number": 0}
    doc["jobs"][1]["end_time"] = {"set": True, "infinite": True, "number": 0}
    assert [j.end_time for j in parse_squeue(doc)][:2] == [0.0, 0.0]


def test_the_installed_version_is_read_once_and_a_given_one_is_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []

    def installed() -> str:
        reads.append(1)
        return "slurm-wlm 24.11.5"

    monkeypatch.setattr(version_mod, "installed_slurm_version", installed)
    v = InstalledVersion()
    assert (v.get(), v.get()) == ((24, 11), (24, 11)) and len(reads) == 1
    assert InstalledVersion("slurm 22.05.8").get() == (22, 5) and len(reads) == 1
    assert InstalledVersion("").get() is None and len(reads) == 1  # no Slurm: not asked again
    assert ScontrolControl(slurm_version="26.05.5").version == (26, 5)
    assert JsonBackend(slurm_version="22.05.8").version == (22, 5) and len(reads) == 1


def test_versions_from_commands_and_meta() -> None:
    assert parse_version("slurm-wlm 24.11.5") == (24, 11) and parse_version("slurm 22.05.8") == (
        22,
        5,
    )
    assert parse_version("slurm-wlm 26.05.5") == (26, 5) and parse_version("") is None
    assert version_from_meta(_load("squeue-22.05.json")) == (22, 5)
    assert version_from_meta(_load("squeue-24.11.json")) == (24, 11)
    assert version_from_meta(_load("scontrol-nodes-26.05.json")) == (26, 5)
    assert version_from_meta({"meta": {}}) is None


def test_each_version_gets_its_node_command() -> None:
    assert nodes_argv((22, 5)) == ["sinfo", "--json"]
    assert nodes_argv(None) == ["sinfo", "--json"]  # version unknown: the command every version has
    assert nodes_argv((24, 11)) == nodes_argv((26, 5)) == ["scontrol", "show", "nodes", "--json"]
    assert not has_scontrol_json((22, 5)) and has_scontrol_json((23, 2))
    assert squeue_argv() == ["squeue", "--json", "--all"]
    # a finished job too: 24.11+ drop it from --jobs ID without --states=all
    assert squeue_argv(job_id=7) == ["squeue", "--json", "--all", "--jobs", "7", "--states=all"]


def test_the_backend_runs_the_command_of_its_version(tmp_path: Path) -> None:
    fake = tmp_path / "scontrol"
    fake.write_text(
        f"#!/bin/sh\n[ \"$*\" = 'show nodes --json' ] || exit 3\ncat {FIX / 'scontrol-nodes-26.05.json'}\n"
    )
    fake.chmod(0o755)
    (n,) = JsonBackend(
        scontrol=str(fake), sinfo="/nonexistent/sinfo", slurm_version="26.05.5"
    ).nodes()
    assert n.name == "colo-sid"
    with pytest.raises(SlurmError, match="/nonexistent/sinfo not found"):
        JsonBackend(scontrol=str(fake), sinfo="/nonexistent/sinfo", slurm_version="22.05.8").nodes()


def test_gres_requests_in_the_form_of_each_version() -> None:
    assert tres_gres("gres:shard:v100_s1:1", (22, 5)) == "gres:shard:v100_s1:1"
    assert tres_gres("gres:shard:v100_s1:1", (24, 11)) == "gres/shard:v100_s1:1"
    assert tres_gres("gres/shard:1", (26, 5)) == "gres/shard:1"
    assert tres_gres("gres/gpu:a100:1,gres/nic:1", (22, 5)) == "gres:gpu:a100:1,gres:nic:1"
    assert tres_gres("gres/shard:1") == "gres:shard:1"  # unknown version: the agent's wire form
    ng = NodeGpus(nodes="n1", count=2, model="v100", shared=(0, 1))
    assert ng.shard_request(1) == "gres:shard:v100_s1:1"
    assert ng.shard_request(1, (24, 11)) == "gres/shard:v100_s1:1"


class Recording(ScontrolControl):
    def __init__(self, version: str) -> None:
        super().__init__(slurm_version=version)
        self.argvs: list[list[str]] = []

    def run(self, argv: list[str]) -> None:
        self.argvs.append(argv)


@pytest.mark.parametrize(
    "version,want",
    [
        ("22.05.8", "gres:shard:v100_s1:1"),
        ("24.11.5", "gres/shard:v100_s1:1"),
        ("26.05.5", "gres/shard:v100_s1:1"),
        ("", "gres:shard:v100_s1:1"),
    ],
)
def test_scontrol_update_writes_the_gres_of_the_installed_slurm(version: str, want: str) -> None:
    for given in ("gres:shard:v100_s1:1", "gres/shard:v100_s1:1"):
        c = Recording(version)
        c.aim_and_release(12, "n1", "tag", "comment", given)
        assert f"TresPerNode={want}" in c.argvs[0]


@pytest.mark.parametrize("name", ["squeue-22.05.json", "squeue-24.11.json", "squeue-26.05.json"])
def test_an_arrays_record_gives_its_waiting_tasks_and_no_other_job_does(name: str) -> None:
    doc = _load(name)
    assert isinstance(doc, dict)
    assert all(j.array_tasks == "" for j in parse_squeue(doc))  # no array in the capture
    doc["jobs"][-1]["array_task_string"] = "2-3,5"  # as 24.11 gives an array's record
    assert parse_squeue(doc)[-1].array_tasks == "2-3,5"


@pytest.mark.parametrize("name", ["squeue-22.05.json", "squeue-24.11.json", "squeue-26.05.json"])
def test_what_a_pending_job_waits_for_before_it_may_start(name: str) -> None:
    """``dependency`` (text on every version) and ``eligible_time`` (a number on 22.05, a
    number object from 24.11), as the lab showed them for held jobs: a dependency not met
    and no time yet; a begin time ahead as the eligible time; a plain hold with neither."""
    doc = _load(name)
    assert isinstance(doc, dict)
    assert all(j.waits_to_start(2e9) == "" for j in parse_squeue(doc))  # none in the capture
    newer = not name.endswith("22.05.json")
    job = doc["jobs"][-1]
    job["dependency"] = "afterok:15420(unfulfilled)"
    job["eligible_time"] = {"set": True, "infinite": False, "number": 0} if newer else 0
    j = parse_squeue(doc)[-1]
    assert j.dependency == "afterok:15420(unfulfilled)"
    assert j.waits_to_start(1000.0) == "its dependency (afterok:15420(unfulfilled))"
    job["dependency"] = ""
    job["eligible_time"] = {"set": True, "infinite": False, "number": 1500} if newer else 1500
    j = parse_squeue(doc)[-1]
    assert j.eligible_time == 1500.0
    assert j.waits_to_start(1000.0) == "its begin time" and j.waits_to_start(1500.0) == ""

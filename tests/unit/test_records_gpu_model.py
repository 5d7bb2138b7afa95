"""Records carry the GPU they ran on: built on the node, round-tripped, ingested (old
records too), migrated, and the episodes tagged with the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text
from test_node_lifecycle import node_config

from slurm_colo.contracts.enums import Mechanism, Mode
from slurm_colo.contracts.placement import Placement
from slurm_colo.contracts.records import RECORD_VERSION, CoRunner, JobRecord
from slurm_colo.emulators.nvml_scenario import ScenarioNvml
from slurm_colo.node.gpu.nvml import NvmlGate
from slurm_colo.node.layout import NodeLayout
from slurm_colo.node.lifecycle import JobInfo, job_end, job_start
from slurm_colo.node.sampler import Sampler
from slurm_colo.store import ingest_records, make_engine, upgrade
from slurm_colo.store.episode_read import read_window
from slurm_colo.store.episodes import load_episodes, update_episodes
from slurm_colo.store.gpu_models import fill_gpu_models, history_gpu_models
from slurm_colo.store.ingest import BadRecord, record_from_dict, record_from_json


def rec(job: int, **kw: object) -> JobRecord:
    base: dict = {
        "job_id": job,
        "node": "v1",
        "user": "u",
        "uid": 1,
        "cls": "a",
        "start": 1000.0,
        "end": 4600.0,
        "gpus": [1],
    }
    base.update(kw)
    return JobRecord(**base)  # type: ignore[arg-type]


def test_a_record_round_trips_with_its_gpu_and_an_old_one_reads_without() -> None:
    r = rec(1, gpu_model="v100", gres_type="v100_s1", gpu_name="Tesla V100-SXM2-16GB")
    assert r.version == RECORD_VERSION == 2
    back = record_from_json(json.dumps(r.to_dict()))
    assert back == r
    old = {k: v for k, v in r.to_dict().items() if k not in ("gpu_model", "gres_type", "gpu_name")}
    old["version"] = 1
    o = record_from_dict(old)
    assert (o.gpu_model, o.gres_type, o.gpu_name, o.version) == ("", "", "", 1)
    with pytest.raises(BadRecord, match="gpu_model"):
        record_from_dict(r.to_dict() | {"gpu_model": "x" * 40})
    with pytest.raises(BadRecord, match="gres_type"):
        record_from_dict(r.to_dict() | {"gres_type": 7})


def test_the_sampler_reads_the_gpu_name_and_the_record_carries_it(tmp_path: Path) -> None:
    cfg = node_config(
        tmp_path, scenario=[{"uuid": f"GPU-{i}", "name": f"Tesla K80 #{i}"} for i in range(2)]
    )
    toml = Path(cfg.source)
    toml.write_text(
        toml.read_text() + '[[gpus]]\nnodes = "n[1-2]"\ncount = 2\nmodel = "k80"\nshared = "1"\n'
    )
    from slurm_colo.config import load_config

    cfg = load_config(toml)
    lay = NodeLayout.of_config(cfg)
    p = Placement("t5", "a", Mode.AUTO, Mechanism.SHARD, "n1", 1)
    job_start(cfg, JobInfo(5, "u", 1000, "n1", [1], p), launch_sampler=False)
    nv = ScenarioNvml(json.loads(Path(cfg.node.nvml_scenario).read_text()))
    s = Sampler(NvmlGate(nv, "scenario"), [1], 5, lay, 1.0)
    s.tick()
    s.flush(final=True)
    r = job_end(cfg, 5, 0)
    assert r is not None
    assert (r.gpu_model, r.gres_type, r.gpu_name) == ("k80", "k80_s1", "Tesla K80 #1")
    # a node outside every [[gpus]] layout: model unknown, the record is still written
    job_start(cfg, JobInfo(6, "u", 1000, "x9", [0], p), launch_sampler=False)
    r = job_end(cfg, 6, 0)
    assert r is not None and (r.gpu_model, r.gres_type) == ("", "")


def test_old_schema_upgrades_and_old_records_get_their_nodes_model(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e, "0003")
    with e.begin() as c:  # a record stored by the previous version
        c.execute(
            text(
                "INSERT INTO jobs (record_id, cluster, job_id, node, user, uid, cls, start_time, "
                "end_time, mode, shared, gpus, gpu_uuids, exit_code, state, mps_fault, version, "
                "ingested_at) VALUES ('c:1:v1:0', 'c', 1, 'v1', 'u', 1, 'a', 0, 10, 'auto', 0, "
                "'0', '', 0, 'COMPLETED', 0, 1, 0)"
            )
        )
    upgrade(e)
    # a version-1 record from a node not upgraded yet still ingests
    v1 = {k: v for k, v in rec(2, node="k1").to_dict().items() if k != "gpu_model"}
    assert ingest_records(e, [record_from_dict(v1 | {"version": 1})]) == 1
    assert history_gpu_models(e) == {"": 2}
    assert fill_gpu_models(e, {"v1": "v100", "k1": "k80", "other": ""}) == 2
    assert history_gpu_models(e) == {"v100": 1, "k80": 1}
    assert fill_gpu_models(e, {"v1": "v100", "k1": "k80"}) == 0


def pair_on(node: str, model: str, first: int, t: float, rates: tuple[float, float]) -> list:
    return [
        rec(
            j,
            node=node,
            cls=c,
            start=t,
            end=t + 3600,
            shared=True,
            gpu_model=model,
            co_runners=[CoRunner(o, oc, "u", t, t + 3600)],
            progress={"rate": r},
        )
        for j, c, o, oc, r in (
            (first, "a", first + 1, "b", rates[0]),
            (first + 1, "b", first, "a", rates[1]),
        )
    ]


def solo_on(node: str, model: str, job: int, cls: str, rate: float) -> JobRecord:
    return rec(
        job, node=node, cls=cls, start=0.0, end=600.0, gpu_model=model, progress={"rate": rate}
    )


def test_episodes_carry_the_model_and_each_model_uses_its_own_solo_runs(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    ingest_records(
        e,
        [
            solo_on("v1", "v100", 1, "a", 10.0),
            solo_on("v1", "v100", 2, "b", 10.0),
            solo_on("k1", "k80", 3, "a", 4.0),
            solo_on("k1", "k80", 4, "b", 4.0),
            *pair_on("v1", "v100", 10, 5000.0, (8.0, 6.0)),
            *pair_on("k1", "k80", 20, 5000.0, (2.0, 3.0)),
        ],
    )
    update_episodes(e)
    n = {(m[1], ep.node): m[2] for ep in load_episodes(e) for m in ep.members}
    # n = rate shared / solo rate of the same GPU model (pooled, a K80 job would seem slow)
    assert n == pytest.approx(
        {("a", "v1"): 0.8, ("b", "v1"): 0.6, ("a", "k1"): 0.5, ("b", "k1"): 0.75}
    )
    assert read_window(e, None).models == {"v100": 1, "k80": 1}
    k80 = read_window(e, None, "k80")
    assert len(k80) == 1 and k80.models == {"k80": 1} and k80.ref.rate == {"a": 4.0, "b": 4.0}
    assert sorted(k80.n.tolist()) == pytest.approx([0.5, 0.75])
    assert len(read_window(e, None, "a100")) == 0


def test_an_episode_built_before_its_model_was_known_is_built_again_with_it(
    tmp_path: Path,
) -> None:
    e = make_engine(f"sqlite:///{tmp_path}/h.db")
    upgrade(e)
    ingest_records(e, pair_on("v1", "", 1, 5000.0, (5.0, 5.0)))
    update_episodes(e)
    assert read_window(e, None).models == {"": 1}
    assert fill_gpu_models(e, {"v1": "v100"}) == 2
    assert update_episodes(e).jobs == 2  # the two records, built again
    assert read_window(e, None).models == {"v100": 1}
    assert len(load_episodes(e)) == 1

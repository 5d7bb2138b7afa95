"""The agent on a site with two GPU models: it loads each model's score set next to the
site default, places with the set of the GPU it looks at, explains which set it used, and
keeps the last good set when a model's file is corrupt."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fake_slurm import QuietSlurm

from slurm_colo.agent.server import Agent
from slurm_colo.cli.spine import _fmt_explain
from slurm_colo.config import Config, PlacementConfig, ScoresConfig
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.scores import ClassInfo, ScoreTable, model_scores_path, publish_scores
from slurm_colo.scores import table_from_pairs as pairs
from slurm_colo.slurm.model import SlurmNode

LAYOUT = (NodeGpus("k1", 2, "k80", 12.0, (0, 1), 4), NodeGpus("v1", 2, "v100", 32.0, (0, 1), 4))
MEM = {"a": ClassInfo(memory_gib=4.0)}


def table(n: float, sid: str, model: str = "") -> ScoreTable:
    return pairs([("a", "a", n, n)], classes=MEM, id=sid, gpu_model=model)


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    cfg = Config(
        gpus=LAYOUT,
        placement=PlacementConfig(explore_rate=0.0),
        scores=ScoresConfig(path=str(tmp_path / "live.json")),
    )
    a = Agent(cfg, backend=QuietSlurm("k1"), learned_file=tmp_path / "learned.json")
    a.state.apply_snapshot([], [SlurmNode("k1", "IDLE"), SlurmNode("v1", "IDLE")], 0.0)
    return a


def publish(agent: Agent, model: str, t: ScoreTable) -> Path:
    return publish_scores(t, model_scores_path(agent.cfg.scores.path, model))


def place(agent: Agent, now: float) -> dict[str, str]:
    req = {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": "a"}
    return agent.state.place_request(req, now)


def test_each_model_is_placed_with_its_own_set_and_explained(agent: Agent) -> None:
    publish(agent, "", table(0.3, "site-1"))
    publish(agent, "v100", table(1.0, "v100-1", "v100"))
    publish(agent, "k80", table(0.3, "k80-1", "k80"))
    agent.reload_scores(force=True)
    book = agent.state.book
    assert book.default.id == "site-1"
    assert {m: t.id for m, t in book.by_model.items()} == {"k80": "k80-1", "v100": "v100-1"}
    where = [place(agent, 1.0 + k)["gres"] for k in range(4)]
    # k80: two idle GPUs, then no partner (a+a is predicted bad on K80s); the V100 set
    # accepts a second job of class a next to the first
    assert where == [
        "gres:shard:k80_s0:1",
        "gres:shard:k80_s1:1",
        "gres:shard:v100_s0:1",
        "gres:shard:v100_s0:1",
    ]
    ex = list(agent.state.ledger.explanations.values())
    assert [(e["scores"], e["scores_model"]) for e in ex] == [
        ("k80-1", "k80"),
        ("k80-1", "k80"),
        ("v100-1", "v100"),
        ("v100-1", "v100"),
    ]
    text = _fmt_explain(dict(ex[-1], known=True, job_id=5, partners=["x"]))
    assert "score set: v100-1 (GPU model v100's own set)" in text
    st = agent.state.status(5.0)["scores"]
    assert st["id"] == "site-1" and st["models"]["v100"]["id"] == "v100-1"


def test_a_model_without_a_set_of_its_own_uses_the_site_default(agent: Agent) -> None:
    publish(agent, "", table(1.0, "site-1"))
    publish(agent, "k80", table(0.3, "k80-1", "k80"))
    agent.reload_scores(force=True)
    assert set(agent.state.book.by_model) == {"k80"}
    where = [place(agent, 1.0 + k)["gres"] for k in range(4)]
    assert where[3] == "gres:shard:v100_s0:1"  # the V100s: the site default accepts a+a
    last = list(agent.state.ledger.explanations.values())[-1]
    assert (last["scores"], last["scores_model"]) == ("site-1", "")
    assert "(the site default: this GPU's model has no set of its own)" in _fmt_explain(
        dict(last, known=True, job_id=5, partners=["x"])
    )


def test_one_set_for_the_site_explains_as_before(agent: Agent) -> None:
    publish(agent, "", table(1.0, "site-1"))
    agent.reload_scores(force=True)
    assert agent.state.book.by_model == {}
    place(agent, 1.0)
    last = list(agent.state.ledger.explanations.values())[-1]
    assert last["scores_model"] is None
    assert _fmt_explain(dict(last, known=True, job_id=5)).endswith("score set: site-1")


def test_a_corrupt_model_file_keeps_the_last_good_set(
    agent: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    publish(agent, "", table(0.3, "site-1"))
    k80 = publish(agent, "k80", table(1.0, "k80-1", "k80"))
    agent.reload_scores(force=True)
    k80.write_text('{"format": "slurm-colo-scores/1", "pairs": [')  # cut short
    with caplog.at_level(logging.ERROR, logger="slurm_colo.agent"):
        agent.reload_scores()
    assert agent.state.book.by_model["k80"].id == "k80-1"
    err = agent.state.live.model_errors["k80"]
    assert str(k80) in err and "corrupt" in err
    assert "keeping set k80-1 for GPU model k80" in caplog.text
    assert agent.state.status(1.0)["scores"]["models"]["k80"]["error"] == err
    assert agent.state.live.error is None  # the site default is fine
    # a good file again: loaded, error cleared; the file removed: the site default
    publish(agent, "k80", table(0.9, "k80-2", "k80"))
    agent.reload_scores(force=True)
    assert agent.state.book.by_model["k80"].id == "k80-2"
    assert "k80" not in agent.state.live.model_errors
    k80.unlink()
    agent.reload_scores()
    assert agent.state.book.by_model == {}


def test_a_corrupt_model_file_at_start_leaves_the_default(agent: Agent) -> None:
    publish(agent, "", table(0.3, "site-1"))
    model_scores_path(agent.cfg.scores.path, "v100").write_text("not json")
    agent.reload_scores(force=True)
    assert agent.state.book.by_model == {} and agent.state.scores.id == "site-1"
    st = agent.state.status(1.0)["scores"]["models"]
    assert st["v100"]["id"] is None and "not JSON" in st["v100"]["error"]


def test_a_held_job_is_judged_with_the_set_of_the_model_it_is_bound_to() -> None:
    from slurm_colo.placement import ClusterView, GpuView, JobRequest
    from slurm_colo.placement.by_model import ScoreBook
    from slurm_colo.placement.held import HeldJob, _model_of

    view = ClusterView(
        [
            GpuView("k1", 0, "k80_s0", 12.0, 4, model="k80"),
            GpuView("v1", 0, "v100_s0", 32.0, 4, model="v100"),
        ]
    )
    book = ScoreBook(table(0.3, "site"), {"k80": table(1.0, "k80-1", "k80")})

    def held(gres_type: str = "", model: str = "") -> HeldJob:
        req = JobRequest(key="7", user="u", uid=1, cls="a", gres_type=gres_type)
        return HeldJob(7, "t7", req, 0.0, "", model=model)

    assert _model_of(held(gres_type="k80_s0"), view, book) == "k80"  # requeued: its type
    assert _model_of(held(gres_type="v100_s0"), view, book) == ""  # no V100 set: default
    assert _model_of(held(model="k80"), view, book) == "k80"  # held for a K80
    assert _model_of(held(), view, book) == ""  # any shared GPU: no one model
    # a job held for any shared GPU: each GPU judged with its own model's set
    from slurm_colo.placement import Occupant
    from slurm_colo.placement.held import place_held

    for g in view.gpus:
        g.occupants.append(Occupant(key=f"on{g.node}", user="u", uid=1, cls="a", memory_gib=4.0))
    view.invalidate()
    cfg = PlacementConfig(explore_rate=0.0)
    d = place_held(held(), view, book, cfg, None)
    assert d.shared and d.node == "k1" and d.partners == ("onk1",)  # the K80 set: a+a at 1.0
    assert not place_held(held(), view, book.default, cfg, None).shared  # default: 0.3


def test_a_filtered_request_leaves_the_kept_parts_alone(agent: Agent) -> None:
    publish(agent, "", table(0.3, "site-1"))
    publish(agent, "v100", table(1.0, "v100-1", "v100"))
    publish(agent, "k80", table(0.3, "k80-1", "k80"))
    agent.reload_scores(force=True)
    place(agent, 1.0)
    kept = agent.state._model_views.parts(agent.state.view, agent.state.book)
    req = {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": "a"}
    reply = agent.state.place_request(req | {"req_nodes": "v1"}, 2.0)
    assert reply["gres"] == "gres:shard:v100_s0:1"
    assert agent.state._model_views.parts(agent.state.view, agent.state.book) is kept


def test_a_set_put_in_place_with_an_older_file_time_is_read_at_the_next_look(
    agent: Agent, tmp_path: Path
) -> None:
    live = publish(agent, "k80", table(0.3, "k80-1", "k80"))
    agent.reload_scores()
    assert agent.state.book.by_model["k80"].id == "k80-1"
    st = live.stat()
    # an unchanged file is not read again
    agent.reload_scores()
    assert agent.state.book.by_model["k80"].id == "k80-1"
    # a new set copied with its old time (cp -p, rsync -t), renamed into place
    staged = publish_scores(table(1.0, "k80-2", "k80"), tmp_path / "staged.json")
    os.utime(staged, ns=(st.st_atime_ns, st.st_mtime_ns))
    staged.replace(live)
    assert live.stat().st_mtime_ns == st.st_mtime_ns
    agent.reload_scores()
    assert agent.state.book.by_model["k80"].id == "k80-2"
    # written over in place with its time kept: a SIGHUP (force) reads it whatever it looks like
    text = live.read_text().replace("k80-2", "k80-3")
    st = live.stat()
    live.write_text(text)
    os.utime(live, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert live.stat().st_size == st.st_size
    agent.reload_scores()
    assert agent.state.book.by_model["k80"].id == "k80-2"
    agent.reload_scores(force=True)
    assert agent.state.book.by_model["k80"].id == "k80-3"

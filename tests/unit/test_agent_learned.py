"""What the agent keeps of its probes' measurements (agent/learned.py) of classes no score
set knows: only those of classes that recur, and of at most MAX_NEW_CLASSES of them, so a
site of job names each used once keeps a placement index the size of its score sets."""

from __future__ import annotations

from slurm_colo.agent import learned
from slurm_colo.agent.learned import MAX_NEW_CLASSES, RECURRING, LiveScores
from slurm_colo.config import PlacementConfig
from slurm_colo.placement.index import PlacementIndex
from slurm_colo.placement.view import ClusterView
from slurm_colo.scores import PairScore, table_from_pairs

SCORES = table_from_pairs([("bert", "resnet", 0.9, 0.8), ("bert", "bert", 0.7, 0.7)])


def _seen(n_a: float) -> PairScore:
    return PairScore(n_a, 0.9, 0.02, observed=True)


def test_measurements_of_classes_no_score_set_knows_are_bounded_newest_first() -> None:
    live = LiveScores(SCORES)
    live.learn({("bert", "resnet"): _seen(0.5)}, 1.0)
    for k in range(MAX_NEW_CLASSES + 40):  # classes that recur, each measured next to bert
        for _ in range(RECURRING):
            live.placed(f"run-{k:05d}")
        live.learn({(f"run-{k:05d}", "bert"): _seen(0.6)}, 10.0 + k)
    live.learn({("resnet", "bert"): _seen(0.4)}, 999.0)
    new = {c for pair in live.learned for c in pair} - {"bert", "resnet"}
    assert len(new) == MAX_NEW_CLASSES
    assert "run-00039" not in new and "run-00040" in new  # the oldest went
    assert f"run-{MAX_NEW_CLASSES + 39:05d}" in new
    assert ("resnet", "bert") in live.learned  # known classes' measurements all stay
    live.apply()
    table = live.table
    assert table.pair("resnet", "bert").n_a == 0.4 and table.pair("run-00040", "bert").n_a == 0.6
    idx = PlacementIndex(ClusterView([]), table, PlacementConfig())
    assert len(idx.names) == 2 + MAX_NEW_CLASSES + 1  # known, kept new, the unknown column


def test_the_bound_holds_for_measurements_saved_before_a_restart(tmp_path) -> None:
    saved = {(f"run-{k:05d}", "bert"): (_seen(0.6), 10.0 + k) for k in range(MAX_NEW_CLASSES + 5)}
    path = tmp_path / "learned.json"
    learned.save(path, saved)
    live = LiveScores(SCORES)
    live.restore(learned.load(path))
    assert len(live.learned) == MAX_NEW_CLASSES
    assert min(at for _, at in live.learned.values()) == 15.0


def test_a_class_no_score_set_knows_is_learnt_only_once_a_second_job_of_it_came() -> None:
    live = LiveScores(SCORES)
    live.placed("run-00001")  # a name used once: its probe teaches nothing
    live.placed("bert")
    live.learn({("run-00001", "bert"): _seen(0.5)}, 1.0, at_once=True)
    assert live.learned == {} and live.changes == 0 and live.table is not None
    assert live.table.pair("run-00001", "bert").n_a == SCORES.prior_n
    live.placed("run-00001")  # it came again: it recurs
    live.learn({("run-00001", "bert"): _seen(0.5)}, 2.0, at_once=True)
    assert live.table.pair("run-00001", "bert").n_a == 0.5 and live.changes == 1
    live.learn({("resnet", "bert"): _seen(0.4)}, 3.0)  # known classes: always
    assert ("resnet", "bert") in live.learned
    # a new score set: the count starts again
    live.placed("run-00003")
    live.placed("run-00003")
    live.load(table_from_pairs([("bert", "bert", 0.7, 0.7)]))
    live.learn({("run-00003", "bert"): _seen(0.5)}, 4.0)
    assert ("run-00003", "bert") not in live.learned


def test_the_agents_placements_count_the_jobs_of_each_class() -> None:
    from slurm_colo.agent.state import AgentState
    from slurm_colo.config import Config
    from slurm_colo.gres_layout import NodeGpus

    s = AgentState(Config(gpus=(NodeGpus("n1", 2, "v100", 32.0, (0, 1), 4),)), SCORES)
    req = {"user": "alice", "uid": "1000", "mode": "auto"}
    s.place_request({**req, "name": "run-00007"}, 1.0)
    s.live.learn({("run-00007", "bert"): _seen(0.5)}, 2.0)
    assert s.live.learned == {}
    s.place_request({**req, "name": "run-00007"}, 3.0)  # derived from the name, as any class
    s.live.learn({("run-00007", "bert"): _seen(0.5)}, 4.0)
    assert ("run-00007", "bert") in s.live.learned


def test_with_numbers_stripped_the_runs_of_a_name_are_one_class_that_is_learnt() -> None:
    from slurm_colo.agent.state import AgentState
    from slurm_colo.config import Config
    from slurm_colo.contracts.enums import ClassNumbers
    from slurm_colo.gres_layout import NodeGpus

    gpus = (NodeGpus("n1", 2, "v100", 32.0, (0, 1), 4),)
    s = AgentState(
        Config(placement=PlacementConfig(class_name_numbers=ClassNumbers.STRIP), gpus=gpus),
        SCORES,
    )
    req = {"user": "alice", "uid": "1000", "mode": "auto"}
    s.place_request({**req, "name": "run-00007"}, 1.0)
    s.place_request({**req, "name": "run-00008"}, 2.0)  # another run: the same class
    assert {e["cls"] for e in s.ledger.explanations.values()} == {"run"}
    s.live.learn({("run", "bert"): _seen(0.5)}, 3.0)
    assert ("run", "bert") in s.live.learned
    # a --colocate-class is taken as given
    s.place_request({**req, "name": "run-00009", "class": "sweep-7"}, 4.0)
    assert "sweep-7" in {e["cls"] for e in s.ledger.explanations.values()}


def test_a_shard_job_the_agent_did_not_place_takes_its_class_by_the_same_rule() -> None:
    from slurm_colo.agent.ledger import Ledger
    from slurm_colo.config import Config
    from slurm_colo.contracts.enums import ClassNumbers
    from slurm_colo.slurm.model import SlurmJob

    job = SlurmJob(job_id=7, name="run-00042", user="alice", uid=1000, state="RUNNING")
    strip = Config(placement=PlacementConfig(class_name_numbers=ClassNumbers.STRIP))
    assert Ledger(strip).occupant_for_job(job, SCORES).cls == "run"
    assert Ledger(Config()).occupant_for_job(job, SCORES).cls == "run-00042"

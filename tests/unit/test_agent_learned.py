"""What the agent keeps of its probes' measurements (agent/learned.py): a bound on the
classes no score set knows, so a site of job names each used once keeps a placement index
the size of its score sets."""

from __future__ import annotations

from slurm_colo.agent import learned
from slurm_colo.agent.learned import MAX_NEW_CLASSES, LiveScores
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
    for k in range(MAX_NEW_CLASSES + 40):  # each probe: a job named afresh next to bert
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

"""The event engine: progress at true rates, rate changes, bookkeeping."""

from __future__ import annotations

import pytest

from slurm_colo.gavel import GavelData
from slurm_colo.sim.engine import Sim, SimConfig, SimError
from slurm_colo.sim.metrics import summarize
from slurm_colo.sim.policies import ExclusiveFifo, SlurmShard
from slurm_colo.sim.trace import SimJob
from slurm_colo.sim.truth import Truth, oracle_scores


def data() -> GavelData:
    d = GavelData(gpu="test", solo={"a": 1.0, "b": 1.0, "m": 1.0})
    d.pairs = {
        ("a", "b"): (0.8, 0.5),
        ("b", "a"): (0.5, 0.8),
        ("a", "a"): (0.6, 0.6),
        ("b", "b"): (0.9, 0.9),
    }
    d.never = {("a", "m"), ("m", "a")}
    return d


def jobs(*spec: tuple[float, float, str]) -> list[SimJob]:
    return [SimJob(i, t, w, c, "u", 1) for i, (t, w, c) in enumerate(spec)]


def test_exclusive_fifo_runs_jobs_one_per_gpu_in_order() -> None:
    tr = jobs((0, 100, "a"), (0, 50, "b"), (10, 30, "a"))
    sim = Sim(tr, Truth(data()), SimConfig(gpus=1), ExclusiveFifo()).run()
    assert [r.end for r in sim.runs] == [100, 150, 180]
    res = summarize(sim)
    assert res.gpu_hours == pytest.approx(180 / 3600)
    assert res.makespan_h == pytest.approx(180 / 3600)
    assert res.colocated_share == 0.0


def test_shared_jobs_progress_at_their_true_rates_and_speed_up_when_alone() -> None:
    # a (work 80) and b (work 100) share from t=0: rates 0.8 and 0.5
    # a finishes at 100 (80 / 0.8); b has done 50, runs alone the last 50 -> ends at 150
    tr = jobs((0, 80, "a"), (0, 100, "b"))
    sim = Sim(tr, Truth(data()), SimConfig(gpus=1, slots=2), SlurmShard()).run()
    assert sim.runs[0].end == pytest.approx(100)
    assert sim.runs[1].end == pytest.approx(150)
    res = summarize(sim)
    assert res.colocated_share == pytest.approx(100 / 150)
    assert res.harmful_share == 0.0  # 0.8 + 0.5 > 1
    assert res.max_stretch == pytest.approx(1.5)


def test_harmful_sets_are_measured() -> None:
    d = data()
    d.pairs[("a", "a")] = (0.4, 0.4)
    tr = jobs((0, 40, "a"), (0, 40, "a"))
    res = summarize(Sim(tr, Truth(d), SimConfig(gpus=1, slots=2), SlurmShard()).run())
    assert res.harmful_share == pytest.approx(1.0)
    assert res.makespan_h == pytest.approx(100 / 3600)


def test_out_of_memory_sets_cannot_start() -> None:
    tr = jobs((0, 10, "a"))
    sim = Sim(tr + [SimJob(1, 0, 10, "m", "u", 1)], Truth(data()), SimConfig(gpus=1), SlurmShard())
    sim.sched.attach(sim)
    sim.start_shared(0, 0)
    assert sim.start_shared(1, 0) is False
    assert sim.oom_starts == 1 and sim.gpus[0].jobs == [0]


def test_truth_composes_sets_multiplicatively() -> None:
    t = Truth(data())
    r = t.rates(["a", "b", "b"])
    assert r == {"a": pytest.approx(0.8 * 0.8), "b": pytest.approx(0.5 * 0.9)}
    assert t.rates(["a", "m"]) is None


def test_a_job_larger_than_the_cluster_is_an_error() -> None:
    with pytest.raises(SimError, match="asks for 4 GPUs"):
        Sim(
            [SimJob(0, 0, 1, "a", "u", 1, gpus=4)],
            Truth(data()),
            SimConfig(gpus=2),
            ExclusiveFifo(),
        )


def test_the_oracle_with_an_error_is_off_by_at_most_that_error_and_seeded() -> None:
    d = data()
    exact = oracle_scores(d)
    off = oracle_scores(d, error=0.01, seed=3)
    for k, p in exact.pairs.items():
        q = off.pairs[k]
        if p.never:
            assert q.never and (q.n_a, q.n_b) == (p.n_a, p.n_b)
        else:
            assert abs(q.n_a / p.n_a - 1) <= 0.01 and abs(q.n_b / p.n_b - 1) <= 0.01
    moved = [
        k for k, p in exact.pairs.items() if (p.n_a, p.n_b) != (off.pairs[k].n_a, off.pairs[k].n_b)
    ]
    assert len(moved) == 3  # the three measured pairs, each once
    assert oracle_scores(d, error=0.01, seed=3).pairs == off.pairs
    assert oracle_scores(d, error=0.01, seed=4).pairs != off.pairs
    assert oracle_scores(d, error=0.0, seed=3).pairs == exact.pairs


def test_an_oracle_error_of_one_or_more_is_refused() -> None:
    with pytest.raises(ValueError, match="oracle error 1"):
        oracle_scores(data(), error=1.0)


def test_the_simulator_refuses_an_oracle_error_of_one_or_more() -> None:
    from slurm_colo.config import PlacementConfig
    from slurm_colo.sim.run import Setup, make_scheduler

    setup = Setup(SimConfig(gpus=1), PlacementConfig(), oracle_error=1.0)
    with pytest.raises(SimError, match="oracle error 1: give a share from 0 to below 1"):
        make_scheduler("oracle-error", setup, data(), lambda: oracle_scores(data()))

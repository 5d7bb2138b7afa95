"""The event engine: progress at true rates, rate changes, bookkeeping."""

from __future__ import annotations

import pytest

from slurm_colo.gavel import GavelData
from slurm_colo.sim.engine import Sim, SimConfig, SimError
from slurm_colo.sim.metrics import summarize
from slurm_colo.sim.policies import ExclusiveFifo, SlurmShard
from slurm_colo.sim.trace import SimJob
from slurm_colo.sim.truth import Truth


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

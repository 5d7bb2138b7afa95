"""The simulator's campaigns (GPU memory per model, few gaining pairs), the campaign's GPU
name on the simulated GPUs, and requeued jobs aimed again as the agent does."""

from __future__ import annotations

import pytest

from slurm_colo.config import PlacementConfig
from slurm_colo.errors import ColoError
from slurm_colo.gavel import GavelData, bundled_path, load_gavel
from slurm_colo.model.evaluate import synthetic_like
from slurm_colo.placement import place
from slurm_colo.placement.held import requeued
from slurm_colo.sim.campaigns import gpu_memory_gib, low_gain
from slurm_colo.sim.engine import Sim, SimConfig
from slurm_colo.sim.ours import PolicyScheduler
from slurm_colo.sim.trace import SimJob
from slurm_colo.sim.truth import Truth, oracle_scores


def test_each_gpu_model_has_its_own_memory() -> None:
    assert gpu_memory_gib("k80") == 12.0
    assert gpu_memory_gib("v100") == 32.0
    assert gpu_memory_gib("v100-contention-2-gain20") == 32.0  # a campaign made from V100's
    assert gpu_memory_gib("A100") == 80.0
    assert gpu_memory_gib("mystery") == 16.0


def test_a_low_gain_campaign_has_the_share_of_gaining_pairs_asked_for() -> None:
    base = synthetic_like(load_gavel(bundled_path(), "v100"), 1, "contention")
    low = low_gain(base, 0.2)
    pairs = low.unordered_pairs()
    assert pairs == base.unordered_pairs() and low.never == base.never
    gaining = sum(sum(low.pairs[p]) > 1.0 for p in pairs) / len(pairs)
    assert gaining == pytest.approx(0.2, abs=1.5 / len(pairs))
    before = sum(sum(base.pairs[p]) > 1.0 for p in pairs) / len(pairs)
    assert before > 0.5  # the synthetic campaign itself gains on most pairs
    assert all(0.0 <= n <= 1.0 for p in pairs for n in low.pairs[p])
    assert low.gpu == f"{base.gpu}-gain20"
    with pytest.raises(ColoError, match="gain share"):
        low_gain(base, 1.0)


def data() -> GavelData:
    d = GavelData(gpu="k80", solo={"a": 1.0, "b": 1.0, "x": 1.0})
    for (p, q), n in {("a", "b"): 0.9, ("a", "x"): 0.3, ("b", "x"): 0.3, ("x", "x"): 0.3}.items():
        d.pairs[(p, q)] = d.pairs[(q, p)] = (n, n)
    for c in ("a", "b"):
        d.pairs[(c, c)] = (0.9, 0.9)
    return d


CFG = PlacementConfig(cross_user="shard", explore_rate=0.0)


def test_the_simulated_gpus_carry_the_campaigns_gpu_name() -> None:
    sched = PolicyScheduler("oracle", oracle_scores(data()), CFG, learn=False)
    tr = [SimJob(0, 0.0, 10.0, "a", "u", 1)]
    Sim(tr, Truth(data()), SimConfig(gpus=2, gpus_per_node=2, gpu_model="k80"), sched).run()
    assert [(g.model, g.gres_type) for g in sched.view.gpus] == [
        ("k80", "k80_s0"),
        ("k80", "k80_s1"),
    ]


def test_a_gpu_drained_for_a_requeued_job_stays_closed_to_others_until_it_runs() -> None:
    # a runs on the only GPU; x was requeued for its type and the guard drained the GPU for
    # it. b (which a would take) may not join, and once a ends the idle GPU is x's alone.
    d = data()
    sched = PolicyScheduler("ours-submit", oracle_scores(d), CFG, learn=False)
    tr = [SimJob(0, 0.0, 100.0, "a", "u", 1), SimJob(1, 0.0, 50.0, "x", "u", 1)]
    tr.append(SimJob(2, 1.0, 50.0, "b", "u", 1))
    sim = Sim(tr, Truth(d), SimConfig(gpus=1, gpu_model="k80"), sched)
    sched.attach(sim)
    assert sched._try(0, hold_idle=False) == "started"
    sched.reqs[1] = requeued(sched._req(1), "k80_s0", CFG)
    sched._wait_for_type(1, "k80_s0")
    sched._close([0], 1)
    assert sched._try(2, hold_idle=False) == "refused"  # closed to new partners
    sim.now = 100.0
    sim._finish(0)
    g = sched.view.gpus[0]
    assert not g.occupants and g.closed_for == 1  # idle, still kept for x
    assert not place(sched._req(2), sched.view, sched.scores, CFG).shared
    sched.schedule(sim)
    assert sim.gpus[0].jobs == [1] and sched.reserved == {} and sched.held_q == {}
    assert g.closed_for is None


def test_requeued_jobs_are_aimed_oldest_held_first() -> None:
    # two requeued x jobs wait for the same GPU type; the one requeued first goes first,
    # though it arrived later
    d = data()
    sched = PolicyScheduler("ours-submit", oracle_scores(d), CFG, learn=False)
    tr = [SimJob(0, 0.0, 100.0, "a", "u", 1), SimJob(1, 0.0, 50.0, "x", "u", 1)]
    tr.append(SimJob(2, 5.0, 50.0, "x", "u", 1))
    sim = Sim(tr, Truth(d), SimConfig(gpus=1, gpu_model="k80"), sched)
    sched.attach(sim)
    assert sched._try(0, hold_idle=False) == "started"
    for jid, t in ((2, 10.0), (1, 20.0)):
        sim.now = t
        sched.reqs[jid] = requeued(sched._req(jid), "k80_s0", CFG)
        sched._wait_for_type(jid, "k80_s0")
    sim.now = 100.0
    sim._finish(0)
    sched.schedule(sim)
    assert sim.gpus[0].jobs == [2] and sched.held_q == {"k80_s0": [1]}

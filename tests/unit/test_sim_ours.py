"""Our policy inside the simulator: submit-time decisions, learning, starvation guard."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run_cli
from typer.testing import CliRunner

from slurm_colo.cli import app
from slurm_colo.config import PlacementConfig
from slurm_colo.contracts.enums import LeftBehind, Undo
from slurm_colo.gavel import GavelData
from slurm_colo.scores import PairScore
from slurm_colo.sim.engine import Sim, SimConfig
from slurm_colo.sim.metrics import summarize, table
from slurm_colo.sim.ours import PolicyScheduler
from slurm_colo.sim.policies import ExclusiveFifo
from slurm_colo.sim.trace import SimJob
from slurm_colo.sim.truth import Truth, oracle_scores


def data() -> GavelData:
    d = GavelData(gpu="test", solo={"a": 1.0, "b": 1.0, "x": 1.0})
    pairs = {
        ("a", "b"): (0.9, 0.9),
        ("a", "a"): (0.9, 0.9),
        ("b", "b"): (0.9, 0.9),
        ("a", "x"): (0.3, 0.3),
        ("b", "x"): (0.3, 0.3),
        ("x", "x"): (0.3, 0.3),
    }
    for (p, q), (np_, nq) in pairs.items():
        d.pairs[(p, q)] = (np_, nq)
        d.pairs[(q, p)] = (nq, np_)
    return d


def with_class(d: GavelData, cls: str, rates: dict[str, float]) -> GavelData:
    """``d`` with class ``cls`` added: solo speed 1, each pair's normalised rates ``n, n``."""
    d.solo[cls] = 1.0
    for other, n in rates.items():
        d.pairs[(cls, other)] = d.pairs[(other, cls)] = (n, n)
    return d


CFG = PlacementConfig(cross_user="shard", explore_rate=0.0)


def job(i: int, t: float, work: float, cls: str, uid: int = 1) -> SimJob:
    return SimJob(i, t, work, cls, f"u{uid}", uid)


def run(trace: list[SimJob], sched: PolicyScheduler, **kw: float) -> Sim:
    return Sim(trace, Truth(data()), SimConfig(gpus=kw.pop("gpus", 1), **kw), sched).run()


def test_compatible_jobs_share_and_incompatible_ones_wait() -> None:
    tr = [job(0, 0, 100, "a"), job(1, 0, 100, "b"), job(2, 0, 100, "x")]
    sim = run(tr, PolicyScheduler("oracle", oracle_scores(data()), CFG, learn=False))
    assert sim.runs[0].end == pytest.approx(100 / 0.9)
    assert sim.runs[1].end == pytest.approx(100 / 0.9)
    assert sim.runs[2].first_start == pytest.approx(100 / 0.9)  # never next to a or b
    assert summarize(sim).harmful_share == 0.0


def test_submit_time_decisions_are_final() -> None:
    # x arrives while a runs: no partner, no idle GPU -> it keeps a whole GPU of its own and
    # waits; b, arriving later, is placed next to a at once
    tr = [job(0, 0, 100, "a"), job(1, 1, 50, "x"), job(2, 2, 50, "b")]
    sched = PolicyScheduler(
        "ours-submit", oracle_scores(data()), CFG, learn=False, submit_time=True
    )
    sim = run(tr, sched)
    assert sim.runs[2].first_start == pytest.approx(2)
    assert sim.runs[1].first_start == pytest.approx(sim.runs[0].end)
    assert sim.runs[1].end == pytest.approx(sim.runs[1].first_start + 50)  # ran alone


def test_a_wrong_prediction_is_retracted_and_learned() -> None:
    wrong = oracle_scores(data())
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    sched = PolicyScheduler("ours", wrong, replace(CFG, probe_s=60), learn=True)
    tr = [job(0, 0, 5000, "a"), job(1, 1, 5000, "x")]
    sim = run(tr, sched)
    assert sched.retractions == 1 and sim.runs[1].evictions == 1
    learned = sched.scores.pair("x", "a")
    assert learned.observed and learned.n_a == pytest.approx(0.3)
    # together from t=1 to the probe at t=61; then x is requeued, as the agent does: it
    # loses the work it did next to a, waits for the GPU instead of the same bad pair and
    # runs alone
    assert sim.runs[0].end == pytest.approx(61 + 5000 - 1 - 60 * 0.3)
    assert sim.runs[1].end == pytest.approx(sim.runs[0].end + 5000)


def test_a_class_the_score_set_does_not_know_is_learnt_only_once_it_recurs() -> None:
    # "x" is not in the score set (its pairs are the prior, predicted compatible): a job of
    # it that comes once teaches nothing, as in the agent; a second one makes it recur
    known = oracle_scores(data())
    known.pairs = {k: p for k, p in known.pairs.items() if "x" not in k}
    known.classes = {c: info for c, info in known.classes.items() if c != "x"}
    known.prior_n, known.prior_sd = 0.95, 0.01
    cfg = replace(CFG, probe_s=60, explore_rate=1.0)  # a pair with no data may be tried
    once = PolicyScheduler("ours", known, cfg, learn=True)
    run([job(0, 0, 5000, "a"), job(1, 1, 5000, "x")], once)
    assert once.retractions == 1 and not once.scores.pair("x", "a").observed
    twice = PolicyScheduler("ours", known, cfg, learn=True)
    run([job(0, 0, 5000, "a"), job(1, 1, 5000, "x"), job(2, 2, 100, "x")], twice)
    assert twice.retractions >= 1
    learned = twice.scores.pair("x", "a")
    assert learned.observed and learned.n_a == pytest.approx(0.3)


def test_without_undo_a_wrong_pair_runs_on_and_is_learned_from_its_probe() -> None:
    # placement.undo = "off": the bad pair runs to the end; what its probe measured teaches
    # the scores all the same
    wrong = oracle_scores(data())
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    sched = PolicyScheduler(
        "ours-submit",
        wrong,
        replace(CFG, probe_s=60, undo=Undo.OFF),
        learn=True,
        submit_time=True,
    )
    tr = [job(0, 0, 600, "a"), job(1, 1, 600, "x"), job(2, 5000, 100, "x")]
    sim = run(tr, sched)
    assert sched.retractions == 0 and sim.runs[1].evictions == 0
    # together at 0.3 each from t=1 until a ends (a had done 1 unit alone)
    assert sim.runs[0].end == pytest.approx(1 + 599 / 0.3)
    learned = sched.scores.pair("x", "a")
    assert learned.observed and learned.n_a == pytest.approx(0.3)
    assert summarize(sim).over_limit_jobs == 2


def test_jobs_run_past_their_time_limit_by_sharing_are_counted() -> None:
    # a and b run at 0.9 each together: 1000 s of work take 1111 s, past a's 1050 s limit
    # and within b's 2000 s; alone, one after the other, neither passes its limit
    tr = [
        replace(job(0, 0, 1000, "a"), limit_s=1050.0),
        replace(job(1, 0, 1000, "b"), limit_s=2000.0),
    ]
    shared = run(tr, PolicyScheduler("oracle", oracle_scores(data()), CFG, learn=False))
    assert shared.runs[0].end == pytest.approx(1000 / 0.9)
    together = summarize(shared)
    assert together.past_limit_jobs == 1
    alone = summarize(Sim(tr, Truth(data()), SimConfig(gpus=1), ExclusiveFifo()).run())
    assert alone.past_limit_jobs == 0
    # no limit in the trace: no figure, and no column in the table
    plain = summarize(
        run(
            [job(0, 0, 1000, "a"), job(1, 0, 1000, "b")],
            PolicyScheduler("oracle", oracle_scores(data()), CFG, learn=False),
        )
    )
    assert plain.past_limit_jobs is None
    assert "past time limit" in table([alone, together])
    assert "past time limit" not in table([plain])
    head, _, first, second = table([alone, together]).splitlines()
    cells = [c.strip() for c in head.split("|")]
    col = cells.index("past time limit")
    assert [r.split("|")[col].strip() for r in (first, second)] == ["0", "1"]


def test_a_job_that_ran_to_its_limit_alone_is_not_counted_past_it() -> None:
    # sacct's TIMEOUT jobs ran a little past their limit (Slurm ends a job some seconds
    # after it): alone, that is not counted; slowed down by sharing, it is
    tr = [replace(job(0, 0, 1030, "a"), limit_s=1000.0), job(1, 0, 1000, "b")]
    alone = summarize(Sim(tr, Truth(data()), SimConfig(gpus=2), ExclusiveFifo()).run())
    assert alone.past_limit_jobs == 0
    shared = run(tr, PolicyScheduler("oracle", oracle_scores(data()), CFG, learn=False))
    assert summarize(shared).past_limit_jobs == 1


def test_a_kept_sets_measurements_are_used_at_the_next_pass_as_the_agent_does() -> None:
    # a and b are predicted at 0.95 each and run at 0.9: the probe keeps the pair. The agent
    # lays what it measured over its scores at its next look at Slurm, not at the nightly
    # retrain; learn_interval_s (the agent's refresh_interval_s) is that delay in the simulator
    def hopeful() -> PolicyScheduler:
        wrong = oracle_scores(data())
        wrong.pairs[("a", "b")] = PairScore(0.95, 0.95, 0.01, observed=False)
        return PolicyScheduler("ours", wrong, replace(CFG, probe_s=60), learn=True)

    tr = [job(0, 0, 5000, "a"), job(1, 1, 5000, "b")]
    sched = hopeful()
    sim = run(tr, sched)
    assert sched.retractions == 0 and sim.runs[1].first_start == pytest.approx(1)
    learned = sched.scores.pair("a", "b")
    assert learned.observed and learned.n_a == pytest.approx(0.9) == learned.n_b
    assert sched.learn_folds == 1
    late = hopeful()
    run(tr, late, learn_interval_s=86400)  # a daily fold: the 1.5 h run ends before it
    assert not late.scores.pair("a", "b").observed and late.learn_folds == 0


def test_requeue_undo_loses_the_work_and_keeps_the_shard_type() -> None:
    # the live agent's undo: after the probe the newcomer is requeued by Slurm, loses what
    # it did on the GPU, and may only go to a GPU of its own shard type (GPU index 1 on
    # any node: v100_s1), where it waits, held, until one takes it
    wrong = oracle_scores(data())
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    sched = PolicyScheduler(
        "ours-submit", wrong, replace(CFG, probe_s=60), learn=True, submit_time=True
    )
    # two GPUs on one node: 0 (v100_s0) and 1 (v100_s1). x joins a on GPU 1 (b holds 0).
    tr = [job(0, 0, 5000, "b"), job(1, 1, 5000, "a"), job(2, 2, 1000, "x")]
    sim = run(tr, sched, gpus=2, gpus_per_node=2)
    x = sim.runs[2]
    assert sched.retractions == 1 and x.evictions == 1
    assert sched.view.gpus[1].gres_type == "v100_s1"
    learned = sched.scores.pair("x", "a")
    assert learned.observed and learned.n_a == pytest.approx(0.3)
    # x's 60 s at 0.3 are lost: it restarts with all 1000 s of work once GPU 1 is free
    # (a ends), although GPU 0 frees up no sooner and b-x is not a measured pair
    a_end = sim.runs[1].end
    assert x.end == pytest.approx(a_end + 1000)
    res = summarize(sim)
    # stretch counts time running: x ran 60 s together and 1000 s alone
    assert res.per_job["stretch"][2] == pytest.approx(1.06)
    assert res.over_limit_jobs == 0 and res.retractions == 1


def test_from_slurm_23_11_an_undone_job_may_go_to_a_gpu_of_another_shard_type() -> None:
    # the agent where Slurm can change a pending job's GRES (ours: retype_after_undo). b
    # opens GPU 0 (shard type v100_s0), a GPU 1 (v100_s1); x joins a (predicted 0.95, runs
    # at 0.3) and is undone at its probe. Held for any shared GPU, it starts on GPU 0 as
    # soon as b leaves it, long before a frees GPU 1, with all its work to do again
    wrong = oracle_scores(data())
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    tr = [job(0, 0, 500, "b"), job(1, 1, 5000, "a"), job(2, 2, 1000, "x")]
    sched = PolicyScheduler(
        "ours", wrong, replace(CFG, probe_s=60), learn=True, retype_after_undo=True
    )
    sim = run(tr, sched, gpus=2, gpus_per_node=2)
    x = sim.runs[2]
    assert sched.retractions == 1 and x.evictions == 1
    assert [g.gres_type for g in sched.view.gpus] == ["v100_s0", "v100_s1"]
    assert sim.runs[0].end == pytest.approx(500) and sim.runs[1].end > 5000
    assert x.end == pytest.approx(500 + 1000)
    # Slurm 22.05 (the shard type kept): x waits for GPU 1 until a ends
    kept = PolicyScheduler("ours", wrong, replace(CFG, probe_s=60), learn=True)
    sim22 = run(tr, kept, gpus=2, gpus_per_node=2)
    assert kept.retractions == 1
    assert sim22.runs[2].end == pytest.approx(sim22.runs[1].end + 1000)


def test_a_requeued_job_takes_no_new_partner_once_it_runs_again() -> None:
    # x's undo cost it its probe window, so once it runs again no job joins it, even a
    # compatible one: c (compatible with x only) arrives while x runs alone on GPU 1 and waits
    d = with_class(data(), "c", {"x": 0.9, "a": 0.3, "b": 0.3, "c": 0.3})
    wrong = oracle_scores(d)
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    sched = PolicyScheduler(
        "ours-submit",
        wrong,
        replace(CFG, probe_s=60),
        learn=True,
        submit_time=True,
        hold=True,
    )
    tr = [job(0, 0, 20000, "b"), job(1, 1, 5000, "a"), job(2, 2, 1000, "x"), job(3, 5100, 100, "c")]
    sim = Sim(tr, Truth(d), SimConfig(gpus=2, gpus_per_node=2), sched).run()
    x, c = sim.runs[2], sim.runs[3]
    assert x.evictions == 1 and x.first_start == 2
    assert x.end == pytest.approx(sim.runs[1].end + 1000)  # alone on GPU 1 after a
    assert c.first_start >= x.end  # not next to x while it ran
    assert summarize(sim).per_job["stretch"][2] == pytest.approx(1.06)


def test_a_job_is_requeued_at_most_once_as_the_agent_does() -> None:
    # x is undone next to a (the scores called the pair good) and held for GPU 1's type.
    # z joins a there; once a ends, x goes next to z, another pair the scores call good
    # but that is not. Its second probe finds the set harmful: the agent leaves a job
    # requeued once already running (placement.held.why_not_undone), and so does the
    # simulator, which used to requeue it again and lose its work a second time.
    d = with_class(data(), "z", {"a": 0.9, "b": 0.3, "x": 0.3, "z": 0.9})
    wrong = oracle_scores(d)
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    wrong.pairs[("x", "z")] = PairScore(0.95, 0.95, 0.01, observed=False)
    sched = PolicyScheduler(
        "ours-submit", wrong, replace(CFG, probe_s=60), learn=True, submit_time=True
    )
    tr = [job(0, 0, 20000, "b"), job(1, 1, 200, "a"), job(2, 2, 1000, "x"), job(3, 70, 5000, "z")]
    sim = Sim(tr, Truth(d), SimConfig(gpus=2, gpus_per_node=2), sched).run()
    x, z = sim.runs[2], sim.runs[3]
    assert sched.retractions == 1 and x.evictions == 1
    assert z.first_start == pytest.approx(70)  # next to a on GPU 1
    # next to z from the moment a ended, at 0.3, to its end: not undone a second time
    assert x.end == pytest.approx(sim.runs[1].end + 1000 / 0.3)


def test_a_held_job_goes_to_the_first_gpu_that_takes_it() -> None:
    # placement.unplaced = "hold": a and b find no GPU at arrival (an x, which fits nobody,
    # on each) and wait held, without a GPU type. GPU 1 frees up first: a goes there, and
    # b next to it. Without hold each waits for a whole idle GPU: b for x's end on GPU 0.
    tr = [job(0, 0, 1000, "x"), job(1, 1, 100, "x"), job(2, 2, 300, "a"), job(3, 3, 500, "b")]
    starts = {}
    for hold in (True, False):
        sched = PolicyScheduler(
            "ours-submit",
            oracle_scores(data()),
            replace(CFG, undo=Undo.OFF),
            learn=False,
            submit_time=True,
            hold=hold,
        )
        sim = run(tr, sched, gpus=2, gpus_per_node=2)
        assert sim.runs[1].first_start == 1 and sched.held_q == {}
        starts[hold] = [r.first_start for r in sim.runs]
    assert starts[True][2:] == [pytest.approx(101), pytest.approx(101)]
    assert starts[False][2] == pytest.approx(101) and starts[False][3] >= 400


def stream_and_loner() -> tuple[list[SimJob], int, float]:
    """A steady stream of a/b jobs that keeps one GPU busy, and x, which fits with nobody:
    the trace, x's id and the last arrival."""
    tr = [job(0, 0, 4000, "a"), job(1, 10, 1000, "x")]
    tr += [job(i, 500.0 * (i - 1), 3000, "a" if i % 2 else "b") for i in range(2, 40)]
    tr.sort(key=lambda j: j.arrival)
    tr = [SimJob(k, j.arrival, j.work_s, j.cls, j.user, j.uid) for k, j in enumerate(tr)]
    return tr, next(j.id for j in tr if j.cls == "x"), max(j.arrival for j in tr)


def test_oldest_waiting_job_gets_a_drained_gpu() -> None:
    # without the drain reservation x would wait for the whole stream
    tr, x, last = stream_and_loner()
    cfg = PlacementConfig(cross_user="shard", explore_rate=0.0, reserve_after_h=1.0)
    sched = PolicyScheduler("oracle", oracle_scores(data()), cfg, learn=False)
    sim = run(tr, sched)
    assert sched.reservations >= 1
    assert sim.runs[x].first_start < last
    # the guard switched off (reserve_after_h = 0): x waits for the whole stream
    off = PolicyScheduler(
        "oracle", oracle_scores(data()), replace(cfg, reserve_after_h=0.0), learn=False
    )
    sim = run(tr, off)
    assert off.reservations == 0
    assert sim.runs[x].first_start > last


def test_a_job_held_at_arrival_gets_a_drained_gpu() -> None:
    # the live agent (submit-time decisions, hold): x fits with nobody and waits held; the
    # stream keeps the GPU busy until the guard closes it to partners
    tr, x, last = stream_and_loner()
    cfg = PlacementConfig(cross_user="shard", explore_rate=0.0, reserve_after_h=1.0)
    starts = {}
    for after_h in (1.0, 0.0):
        sched = PolicyScheduler(
            "ours-submit",
            oracle_scores(data()),
            replace(cfg, reserve_after_h=after_h, undo=Undo.OFF),
            learn=False,
            submit_time=True,
            hold=True,
        )
        sim = run(tr, sched)
        assert sched.held_q == {}
        starts[after_h] = (sim.runs[x].first_start, sched.reservations)
    assert starts[1.0][0] < last and starts[1.0][1] >= 1
    assert starts[0.0][0] > last and starts[0.0][1] == 0  # guard off: it waits for the stream


def test_mps_never_puts_two_users_on_one_gpu() -> None:
    tr = [job(i, i, 1000, "a" if i % 2 else "b", uid=i % 3) for i in range(30)]
    sched = PolicyScheduler(
        "oracle",
        oracle_scores(data()),
        PlacementConfig(cross_user="never", explore_rate=0.0),
        learn=False,
    )
    sim = Sim(tr, Truth(data()), SimConfig(gpus=4), sched)
    start = sim.start_shared

    def checked(jid: int, gpu: int) -> bool:
        users = {sim.runs[j].job.uid for j in sim.gpus[gpu].jobs} | {sim.runs[jid].job.uid}
        assert len(users) == 1
        return start(jid, gpu)

    sim.start_shared = checked  # type: ignore[method-assign]
    sim.run()
    assert summarize(sim).colocated_share > 0


def write_sacct_export(f: Path, jobs: int, users: int) -> Path:
    """A `sacct --parsable2` export of ``jobs`` one-hour single-GPU jobs, a minute apart."""
    rows = ["JobID|User|JobName|Submit|Start|End|AllocTRES"]
    for i in range(jobs):
        m = 10 + i
        rows.append(
            f"{100 + i}|u{i % users}|lm-bs20|2026-01-01T10:{m:02d}:00|"
            f"2026-01-01T10:{m:02d}:30|2026-01-01T11:{m:02d}:30|gres/gpu=1"
        )
    f.write_text("\n".join(rows) + "\n")
    return f


def test_cli_replays_a_sacct_export(tmp_path: Path) -> None:
    f = write_sacct_export(tmp_path / "jobs.txt", jobs=40, users=3)
    r = CliRunner().invoke(
        app, ["simulate", "--sacct", str(f), "--gpus", "4", "--policies", "exclusive-fifo,oracle"]
    )
    assert r.exit_code == 0, r.output
    assert "oracle" in r.output


def test_cli_counts_the_jobs_a_policy_runs_past_their_time_limit(tmp_path: Path) -> None:
    # 8 one-hour jobs, each limited to 65 minutes, on 2 GPUs: alone they keep their
    # limits; two to a GPU (0.65 each in the bundled V100 data) an hour of work takes 92
    f = tmp_path / "jobs.txt"
    rows = ["JobID|User|JobName|Submit|Start|End|AllocTRES|Timelimit"]
    for i in range(8):
        rows.append(
            f"{100 + i}|u0|lm-bs20|2026-01-01T10:00:0{i}|2026-01-01T10:00:0{i}|"
            f"2026-01-01T11:00:0{i}|gres/gpu=1|01:05:00"
        )
    f.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        ["simulate", "--sacct", str(f), "--gpus", "2", "--policies", "exclusive-fifo,oracle"]
        + ["--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert "past time limit" in r.output
    got = {
        row["policy"]: row["past_limit_jobs"]
        for row in json.loads((out / "results.json").read_text())
    }
    assert got["exclusive-fifo"] == 0 and got["oracle"] > 0


def test_cli_gives_generated_jobs_time_limits_and_refuses_bad_factors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", "--jobs", "60", "--gpus", "4", "--policies", "exclusive-fifo,oracle"]
    r = CliRunner().invoke(app, [*base, "--time-limits", "1-1.2", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {row["policy"]: row["past_limit_jobs"] for row in rows}["exclusive-fifo"] == 0
    assert all(row["past_limit_jobs"] is not None for row in rows)
    assert "--time-limits 1-1.2" in (tmp_path / "results.md").read_text()
    for bad, why in [("0.8-2", "1 <= LOW <= HIGH"), ("3-2", "1 <= LOW <= HIGH"), ("x", "e.g. 1-3")]:
        code, _, err = run_cli([*base, "--time-limits", bad], capsys)
        assert code == 2 and f"--time-limits '{bad}': give" in err and why in err, err
    sacct = tmp_path / "jobs.txt"
    sacct.write_text("JobID|User|Submit|Start|End|AllocTRES\n")
    code, _, err = run_cli(["simulate", "--sacct", str(sacct), "--time-limits", "2"], capsys)
    assert code == 2 and "a --sacct export has its own" in err, err


def test_a_set_where_a_member_loses_is_started_only_while_jobs_queue() -> None:
    d = data()
    d.solo["y"] = 1.0
    for other in ("a", "b", "x", "y"):
        d.pairs[("y", other)] = d.pairs[(other, "y")] = (0.55, 0.52)  # throughput path only
    d.pairs[("y", "y")] = (0.55, 0.55)

    def first_starts(ys: int) -> list[float]:
        tr = [job(i, 0, 100, "a") for i in range(4)]
        tr += [job(4 + k, 1, 100, "y") for k in range(ys)]
        sched = PolicyScheduler("oracle", oracle_scores(d), CFG, learn=False)
        sim = Sim(tr, Truth(d), SimConfig(gpus=4), sched).run()
        return [r.first_start or 0.0 for r in sim.runs[4:]]

    # two jobs waiting on four GPUs (0.5 per GPU, below throughput_queue 0.75): they wait
    # for a GPU of their own instead of slowing a running job down to 0.55
    assert first_starts(2) == [pytest.approx(100.0)] * 2
    # three waiting (0.75 per GPU): the first shares at once, then the queue is short again
    assert first_starts(3) == [pytest.approx(1.0), pytest.approx(100.0), pytest.approx(100.0)]
    # the gate off: all share at once
    sched_cfg = replace(CFG, throughput_queue=0.0)
    tr = [job(i, 0, 100, "a") for i in range(4)] + [job(4 + k, 1, 100, "y") for k in range(2)]
    sched = PolicyScheduler("oracle", oracle_scores(d), sched_cfg, learn=False)
    sim = Sim(tr, Truth(d), SimConfig(gpus=4), sched).run()
    assert [r.first_start for r in sim.runs[4:]] == [pytest.approx(1.0)] * 2


def test_a_set_where_a_member_loses_is_not_started_when_the_queue_is_about_to_run_out() -> None:
    d = GavelData(gpu="test", solo={"y": 1.0}, pairs={("y", "y"): (0.55, 0.55)})
    # a backlog of 200 one-hour jobs on four GPUs, all there at the start: it only shrinks
    tr = [job(i, float(i), 3600.0, "y") for i in range(200)]

    def shared(cfg: PlacementConfig) -> tuple[list[int], float]:
        sched = PolicyScheduler("oracle", oracle_scores(d), cfg, learn=False)
        sim = Sim(tr, Truth(d), SimConfig(gpus=4), sched).run()
        return [r.joined for r in sim.runs], max(r.end or 0.0 for r in sim.runs)

    on, _ = shared(CFG)
    off, _ = shared(replace(CFG, throughput_drain_h=0.0))
    assert CFG.throughput_drain_h == 24.0
    # early on the queue would last days at the rate it shrinks (and for the first three
    # hours nothing is known): pairs at 0.55 each are started either way
    assert sum(on[:40]) >= 30 and sum(off[:40]) >= 30
    # once it is forecast to be gone within 24 h, the last jobs run alone; without the
    # forecast they pair up until fewer than 0.75 jobs per GPU wait
    assert sum(on[-60:]) == 0
    assert sum(off[-60:]) >= 40


def test_a_pair_left_behind_by_an_undone_third_job_is_judged_too() -> None:
    """x joins a, and b joins them at once: x's probe is overtaken, b's undoes b. The pair
    a + x (truly 0.3 each) is then judged by x's probe looking again, as the node's does."""
    wrong = oracle_scores(data())
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    wrong.pairs[("b", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    sched = PolicyScheduler("ours", wrong, replace(CFG, probe_s=60), learn=True)
    tr = [job(0, 0, 5000, "a"), job(1, 1, 5000, "x"), job(2, 1, 5000, "b")]
    sim = run(tr, sched)
    assert sim.runs[2].evictions == 1  # b, by its own probe at t=61
    assert sim.runs[1].evictions == 1  # x, by its probe looking again at t=121
    assert sched.retractions == 2
    learned = sched.scores.pair("x", "a")
    assert learned.observed and learned.n_a == pytest.approx(0.3)
    # harmful sets ran from t=1 to t=121 only (a+x+b, then a+x), not until a ended
    assert sum(g.harmful for g in sim.gpus) == pytest.approx(120)


def test_a_kept_set_is_judged_again_when_a_job_leaves_it() -> None:
    """x joins a and c; its probe keeps the three (combined 1.84). When c ends, the pair
    a + x (truly 0.45 each, worse than running one after the other) is judged again by x,
    the newest of those left, and x is undone: harmful for one probe window only."""
    d = with_class(data(), "c", {"a": 0.98, "b": 0.98, "x": 0.98, "c": 0.9})
    d.pairs[("a", "x")] = d.pairs[("x", "a")] = (0.45, 0.45)
    wrong = oracle_scores(d)
    wrong.pairs[("a", "x")] = PairScore(0.95, 0.95, 0.01, observed=False)
    wrong.pairs[("x", "a")] = PairScore(0.95, 0.95, 0.01, observed=False)
    tr = [
        SimJob(0, 0, 5000, "a", "u1", 1, mode="aggressive"),
        job(1, 1, 300, "c"),
        SimJob(2, 2, 5000, "x", "u1", 1, mode="aggressive"),
    ]

    sched = PolicyScheduler("ours", wrong, replace(CFG, probe_s=60), learn=True)
    sim = Sim(tr, Truth(d), SimConfig(gpus=1), sched).run()
    # x's own probe (t=62) kept the three; its second look, after c ended, undid it
    assert sim.runs[1].evictions == 0 and sim.runs[2].evictions == 1
    assert sched.retractions == 1 and sim.runs[1].end < 1000
    # harmful only from c's end to that look, not until a ended (5000 s of work at 0.45)
    assert sum(g.harmful for g in sim.gpus) == pytest.approx(60)
    assert sched.scores.pair("x", "a").observed
    # placement.left_behind = "learn": the pair is learnt from and runs on
    learn = replace(CFG, probe_s=60, left_behind=LeftBehind.LEARN)
    off = PolicyScheduler("ours", wrong, learn)
    sim = Sim(tr, Truth(d), SimConfig(gpus=1), off).run()
    assert sim.runs[2].evictions == 0 and off.retractions == 0
    assert sum(g.harmful for g in sim.gpus) > 1000


def test_a_requeued_job_waits_only_behind_jobs_that_may_want_its_gpu_type() -> None:
    # two GPUs, one of each shard type. Job 0 was requeued at 0 s for GPU 0's type, job 1 at
    # 2 h for GPU 1's type. At 3 h job 0 has waited past reserve_after_h: a job of its type
    # requeued more than bypass_h after it waits its turn, one of the other type does not
    cfg = replace(CFG, reserve_after_h=1.0, bypass_h=0.5)
    sched = PolicyScheduler("ours-submit", oracle_scores(data()), cfg, submit_time=True)
    tr = [job(0, 0, 100, "a"), job(1, 0, 100, "b")]
    sim = Sim(tr, Truth(data()), SimConfig(gpus=2, gpus_per_node=2), sched)
    sched.attach(sim)
    t0, t1 = (g.gres_type for g in sched.view.gpus)
    assert t0 != t1
    sched._wait_for_type(0, t0)
    sim.now = 7200.0
    sched._wait_for_type(1, t1)
    sim.now = 3 * 3600.0
    assert sched._behind(7200.0, t0) and not sched._behind(7200.0, t1)
    assert sched._behind(7200.0)  # a job that may take any GPU waits behind job 0


def test_a_new_job_waits_its_turn_only_for_a_held_job_that_may_want_the_gpu_it_takes() -> None:
    # GPU 0 runs a, GPU 1 runs b; job 3 has been held 3 h for one GPU's shard type. A job
    # submitted now that would join a on GPU 0 waits its turn when job 3 waits for GPU 0's
    # type, and is placed when job 3 waits for GPU 1's (it takes nothing job 3 could use)
    cfg = replace(CFG, reserve_after_h=1.0, bypass_h=0.5)
    for held_on, expect in ((0, "behind"), (1, "started")):
        sched = PolicyScheduler("ours-submit", oracle_scores(data()), cfg, submit_time=True)
        tr = [job(0, 0, 1e5, "a"), job(1, 0, 1e5, "b"), job(2, 0, 100, "a"), job(3, 0, 100, "a")]
        sim = Sim(tr, Truth(data()), SimConfig(gpus=2, gpus_per_node=2), sched)
        sched.attach(sim)
        assert sched._try(0, hold_idle=False) == sched._try(1, hold_idle=False) == "started"
        assert [g.jobs for g in sim.gpus] == [[0], [1]]
        sched._wait_for_type(3, sched.view.gpus[held_on].gres_type)
        sim.now = 3 * 3600.0
        assert sched._try(2, hold_idle=False, since=sim.now) == expect, held_on
        assert sim.gpus[0].jobs == ([0] if expect == "behind" else [0, 2])


def test_a_set_placed_while_the_throughput_path_was_closed_is_judged_by_the_slowdown_floor() -> (
    None
):
    # y is predicted to gain next to a (0.8 / 0.9, the path where every member gains); it
    # truly runs a at 0.55 (combined 1.45). On two GPUs (b holds the other) with only y
    # waiting the throughput path is closed, so a at 0.55 is below 1 / max_slowdown: the
    # set is undone. With the queue gate off (throughput_queue 0) the same set is kept.
    d = data()
    d.solo["y"] = 1.0
    for other in ("b", "x", "y"):
        d.pairs[("y", other)] = d.pairs[(other, "y")] = (0.3, 0.3)
    d.pairs[("a", "y")], d.pairs[("y", "a")] = (0.55, 0.9), (0.9, 0.55)
    wrong = oracle_scores(d)
    wrong.pairs[("a", "y")] = PairScore(0.8, 0.9, 0.01, observed=False)
    tr = [job(0, 0, 5000, "a"), job(1, 0, 5000, "b"), job(2, 10, 1000, "y")]
    for cfg, undone in ((CFG, 1), (replace(CFG, throughput_queue=0.0), 0)):
        sched = PolicyScheduler("ours", wrong, replace(cfg, probe_s=60), learn=True)
        sim = Sim(tr, Truth(d), SimConfig(gpus=2), sched).run()
        assert sched.retractions == undone
        assert sim.runs[2].evictions == undone and sim.runs[2].first_start == 10

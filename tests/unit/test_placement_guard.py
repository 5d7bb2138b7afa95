"""The starvation guard's shared pieces (placement/guard.py): the drain order the agent and
the simulator both choose GPUs by."""

from __future__ import annotations

from slurm_colo.placement import ClusterView, GpuView, Occupant
from slurm_colo.placement.guard import (
    UNKNOWN_END,
    HeldWait,
    by_end_times,
    drain_order,
    held_drain,
    usable,
)


def _gpu(node: str, i: int, *jobs: int | None, model: str = "v100") -> GpuView:
    g = GpuView(node, i, f"{model}_s{i}", 32.0, 4, model=model)
    for jid in jobs:
        g.occupants.append(
            Occupant(str(jid), "alice", 1000, "good", 4.0, job_id=jid, pending=jid is None)
        )
    return g


def test_drain_order_splits_idle_and_busy_soonest_first_ties_in_view_order() -> None:
    gpus = [_gpu("n1", 0, 10), _gpu("n1", 1), _gpu("n1", 2, 11), _gpu("n1", 3, 12)]
    d = drain_order(gpus, by_end_times({10: 5.0, 11: 2.0, 12: 5.0}))
    assert [g.index for g in d.idle] == [1]
    assert [(t, g.index) for t, g in d.busy] == [(2.0, 2), (5.0, 0), (5.0, 3)]


def test_end_times_unknown_or_not_started_drain_never() -> None:
    dt = by_end_times({10: 7.0})
    assert dt(_gpu("n1", 0, 10, 11)) == UNKNOWN_END  # job 11's end is unknown
    assert dt(_gpu("n1", 0, None)) == UNKNOWN_END  # a placement not started
    assert dt(_gpu("n1", 0, 10)) == 7.0
    assert dt(_gpu("n1", 0)) == 0.0


def test_usable_leaves_out_unavailable_and_whole_gpu_jobs() -> None:
    a, b, c = _gpu("n1", 0), _gpu("n1", 1), _gpu("n1", 2)
    b.available = False
    c.exclusive_job = 7
    assert usable([a, b, c]) == [a]


def test_held_drain_keeps_to_the_jobs_type_model_and_partitions() -> None:
    view = ClusterView([_gpu("n1", 0, 10), _gpu("n1", 1, 11), _gpu("n2", 0, 12, model="a100")])
    dt = by_end_times({10: 3.0, 11: 1.0, 12: 0.5})
    d = held_drain(HeldWait(60, "v100_s0", 0.0), view, dt)
    assert d.idle == [] and [(t, g.node, g.index) for t, g in d.busy] == [(3.0, "n1", 0)]
    d = held_drain(HeldWait(60, "*", 0.0), view, dt)  # any shared GPU
    assert [(g.node, g.index) for _, g in d.busy] == [("n2", 0), ("n1", 1), ("n1", 0)]
    d = held_drain(HeldWait(60, "*", 0.0, "v100"), view, dt)  # of its model
    assert [(g.node, g.index) for _, g in d.busy] == [("n1", 1), ("n1", 0)]
    d = held_drain(
        HeldWait(60, "*", 0.0, "", "debug"), view, dt, partitions={"n1": ("gpu",), "n2": ("debug",)}
    )
    assert [(g.node, g.index) for _, g in d.busy] == [("n2", 0)]
    view.gpus[1].occupants.clear()
    assert [g.index for g in held_drain(HeldWait(60, "*", 0.0, "v100"), view, dt).idle] == [1]

"""Steps of the wall clock (slurm_colo/clock.py): the times the agent keeps itself move with
them, so a step neither ends them at once nor stretches them."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_slurm import QuietSlurm

from slurm_colo.agent.rights import RETRY_S, Rights
from slurm_colo.agent.server import Agent
from slurm_colo.clock import STEP_S, WallClock, boot_id
from slurm_colo.config import Config, PlacementConfig
from slurm_colo.contracts.protocol import format_request, parse_reply
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.placement.trend import QueueTrend
from slurm_colo.scores import ClassInfo, table_from_pairs

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)
SCORES = table_from_pairs([("good", "good", 1.0, 1.0)], classes={"good": ClassInfo(memory_gib=4.0)})


def test_the_clock_tells_a_step_from_time_passing_and_from_slewing() -> None:
    wall, steady = [1000.0], [50.0]
    c = WallClock(wall=lambda: wall[0], steady=lambda: steady[0])
    assert c.read() == (1000.0, 0.0)  # the first reading has nothing to compare with
    wall[0], steady[0] = 1600.0, 650.0
    assert c.read() == (1600.0, 0.0)  # ten minutes passed on both
    wall[0], steady[0] = 1610.5, 660.0  # NTP slewing: half a second in ten
    assert c.read() == (1610.5, 0.0)
    wall[0], steady[0] = 5220.5, 670.0  # a date set an hour ahead
    assert c.read() == (5220.5, pytest.approx(3600.0))
    wall[0], steady[0] = 5230.5 - 2 * STEP_S, 680.0  # and back by just over the threshold
    assert c.read()[1] == pytest.approx(-2 * STEP_S)
    assert c.read()[1] == 0.0  # each step is told once


def test_the_real_clocks_do_not_step_between_two_readings() -> None:
    c = WallClock()
    c.read()
    assert c.read()[1] == 0.0


def _agent() -> tuple[Agent, list[float], list[float]]:
    """An agent on one idle node, its wall clock (``wall[0]``, a million seconds from the
    real one: a time read past the agent's clock would show) and the monotonic clock
    beside it (``steady[0]``), after its first look."""
    wall, steady = [1_000_000.0], [50.0]
    agent = Agent(
        Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0)),
        backend=QuietSlurm("n1"),
    )
    agent.state.scores = SCORES
    agent.clock = WallClock(wall=lambda: wall[0], steady=lambda: steady[0])
    agent.refresh()
    return agent, wall, steady


def _place(agent: Agent) -> None:
    fields = {"user": "alice", "uid": "1000", "name": "job", "mode": "auto", "class": "good"}
    assert agent.handle(format_request("PLACE", fields), peer_uid=0).startswith(b"OK\t")


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_placement_not_yet_in_slurm_keeps_its_lifetime_across_a_step(
    step: float, caplog: pytest.LogCaptureFixture
) -> None:
    agent, wall, steady = _agent()
    ttl = agent.cfg.agent.pending_ttl_s
    _place(agent)
    assert len(agent.state.ledger.placements) == 1
    wall[0] += step + 5.0
    steady[0] += 5.0
    with caplog.at_level("WARNING", logger="slurm_colo.agent"):
        agent.refresh()  # 5 s after the placement: Slurm has not shown the job yet
    assert len(agent.state.ledger.placements) == 1
    assert f"the wall clock stepped {step:+.1f} s" in caplog.text
    wall[0] += ttl
    steady[0] += ttl
    agent.refresh()  # never seen in Slurm within agent.pending_ttl_s: forgotten
    assert agent.state.ledger.placements == {}


def test_status_gives_the_age_of_the_last_look_in_seconds_that_passed() -> None:
    agent, wall, steady = _agent()
    wall[0] += 3600.0 + 7.0
    steady[0] += 7.0
    st = parse_reply("STATUS", agent.handle(b"STATUS\t{}\n", peer_uid=0))
    assert st["snapshot_age_s"] == pytest.approx(7.0)
    fresh = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    fresh.state.shift_clock(3600.0)  # before its first look: no age to give
    assert fresh.state.status(wall[0])["snapshot_age_s"] is None


def test_a_refused_right_is_tried_again_after_its_wait_across_a_step() -> None:
    r = Rights()
    r.refuse("Access/permission denied", 100.0)
    r.shift(-3600.0)
    assert r.holding_back(100.0 - 3600.0 + RETRY_S - 1.0)
    assert not r.holding_back(100.0 - 3600.0 + RETRY_S)
    assert r.since == 100.0 - 3600.0


def test_the_queue_trend_keeps_its_samples_across_a_step_back() -> None:
    t = QueueTrend(window_s=3600.0, step_s=300.0)
    for k in range(10):
        t.observe(k * 300.0, 100.0 - k)  # one job fewer every 5 minutes: -12 per hour
    assert t.slope_per_h() == pytest.approx(-12.0)
    t.shift(-7200.0)
    t.observe(10 * 300.0 - 7200.0, 90.0)  # the next sample, read from the stepped clock
    assert t.slope_per_h() == pytest.approx(-12.0)


def test_a_later_process_of_the_same_boot_finds_a_step_made_between_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wall, boot_clock = [1000.0], [50.0]
    first = WallClock(wall=lambda: wall[0], steady=lambda: boot_clock[0])
    first.read()
    saved = first.offset
    assert saved == 950.0
    wall[0], boot_clock[0] = 1000.0 + 600.0 - 3600.0, 650.0  # ten minutes on, set back an hour
    later = WallClock(wall=lambda: wall[0], steady=lambda: boot_clock[0])
    later.resume(saved)
    assert later.read()[1] == pytest.approx(-3600.0)
    later.resume(0.0)  # only before the first reading
    assert later.read()[1] == 0.0
    # the boot's id, to tell a later process of this boot from one after a reboot
    monkeypatch.setattr("slurm_colo.clock.BOOT_ID", tmp_path / "boot_id")
    assert boot_id() is None  # cannot be read: nothing is handed on
    (tmp_path / "boot_id").write_text("1f0e-77\n")
    assert boot_id() == "1f0e-77"

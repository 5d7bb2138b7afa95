"""The queue's trend (placement/trend.py): how soon the waiting jobs will be gone."""

from __future__ import annotations

import pytest

from slurm_colo.placement.trend import QueueTrend

H = 3600.0


def test_a_shrinking_queue_is_forecast_to_run_out() -> None:
    t = QueueTrend(window_s=6 * H, step_s=300.0)
    for k in range(6 * 12 + 1):  # every 5 min for 6 h, 10 fewer jobs an hour
        t.observe(k * 300.0, 200.0 - 10.0 * k / 12)
    assert t.slope_per_h() == pytest.approx(-10.0)
    assert t.hours_to_empty() == pytest.approx(14.0)  # 140 left at 10 an hour


def test_a_growing_or_steady_queue_has_no_forecast() -> None:
    t = QueueTrend(window_s=6 * H, step_s=300.0)
    for k in range(80):
        t.observe(k * 300.0, 50.0 + k)
    assert t.slope_per_h() is not None and t.slope_per_h() > 0  # type: ignore[operator]
    assert t.hours_to_empty() is None
    flat = QueueTrend(window_s=6 * H, step_s=300.0)
    for k in range(80):
        flat.observe(k * 300.0, 50.0)
    assert flat.slope_per_h() == pytest.approx(0.0)
    assert flat.hours_to_empty() is None


def test_too_short_a_history_tells_nothing() -> None:
    t = QueueTrend(window_s=6 * H, step_s=300.0)
    for k in range(30):  # 2.5 h: less than half the window
        t.observe(k * 300.0, 100.0 - k)
    assert t.slope_per_h() is None and t.hours_to_empty() is None
    for k in range(30, 40):  # past 3 h
        t.observe(k * 300.0, 100.0 - k)
    assert t.hours_to_empty() == pytest.approx((100.0 - 39) / 12.0)  # 61 left, 12 an hour


def test_samples_closer_than_a_step_replace_the_newest_and_old_ones_leave_the_window() -> None:
    t = QueueTrend(window_s=6 * H, step_s=300.0)
    t.observe(0.0, 100.0)
    for k in range(1, 13 * 360):  # every 10 s for 13 h, the queue shrinking by 6 an hour
        t.observe(k * 10.0, 100.0 - 6.0 * k * 10.0 / H)
    s = list(t._samples)
    assert len(s) <= 6 * 12 + 2
    assert s[0][0] >= s[-1][0] - 6 * H
    assert all(b[0] - a[0] >= 300.0 for a, b in zip(s[:-2], s[1:-1], strict=True))
    assert t.slope_per_h() == pytest.approx(-6.0)
    # the forecast uses the newest count, not the newest kept sample's
    assert t.hours_to_empty() == pytest.approx(t._last / 6.0)


def test_a_clock_step_back_starts_afresh() -> None:
    t = QueueTrend(window_s=6 * H, step_s=300.0)
    for k in range(80):
        t.observe(10 * H + k * 300.0, 500.0 - 5 * k)
    assert t.hours_to_empty() is not None
    t.observe(0.0, 10.0)
    assert t.slope_per_h() is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        QueueTrend(window_s=0.0)
    with pytest.raises(ValueError):
        QueueTrend(min_span=0.0)


def test_the_forecast_follows_every_change_and_only_those() -> None:
    t = QueueTrend(window_s=6 * H, step_s=300.0)
    for k in range(80):
        t.observe(k * 300.0, 500.0 - 5 * k)
    t.observe(79 * 300.0 + 100.0, 104.0)  # the newest sample, still moving
    first = t.hours_to_empty()
    t.observe(79 * 300.0 + 100.0, 104.0)  # counted again at the same moment: the same
    assert t.hours_to_empty() == first
    t.observe(79 * 300.0 + 100.0, 90.0)  # jobs started at that moment: a new forecast
    slope = t.slope_per_h()
    assert slope is not None and t.hours_to_empty() == 90.0 / -slope != first

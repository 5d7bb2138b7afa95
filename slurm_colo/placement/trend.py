"""How soon the queue will be gone: the trend of the count of jobs waiting for a GPU.

The throughput path (:func:`~.candidates.throughput_open`) slows a member of a set down for
more total work. That pays while the GPU would otherwise have been busy with waiting jobs;
a long job slowed down when the backlog is about to run out is the one the site's last work
waits for, while GPUs fall idle around it. :class:`QueueTrend` keeps the queue counts of the
last ``window_s`` (one sample per ``step_s``) and forecasts from their least-squares slope
how many hours remain until nothing waits: ``None`` when the queue is not shrinking, or
too little of the window has been seen to tell.

Pure: the caller passes the time and the count (the agent at each Slurm snapshot, the
simulator at each placement).
"""

from __future__ import annotations

from collections import deque

#: one sample per this many seconds (the agent's snapshots come every few seconds)
STEP_S = 300.0
#: the slope is fitted over this much history
WINDOW_S = 6 * 3600.0
#: a forecast needs samples spanning at least this share of the window
MIN_SPAN = 0.5
_STALE = object()


class QueueTrend:
    """The queue counts of the last ``window_s`` and the forecast they give."""

    def __init__(
        self, window_s: float = WINDOW_S, step_s: float = STEP_S, min_span: float = MIN_SPAN
    ) -> None:
        if window_s <= 0 or step_s <= 0 or not 0 < min_span <= 1:
            raise ValueError("window_s and step_s must be positive, min_span in (0, 1]")
        self.window_s = window_s
        self.step_s = step_s
        self.min_span = min_span
        self._samples: deque[tuple[float, float]] = deque()
        self._last = 0.0
        #: the forecast of the samples as they are; ``_STALE`` after a change
        self._forecast: float | None | object = _STALE

    def shift(self, step: float) -> None:
        """The clock the times were read from stepped by ``step`` seconds: the samples
        move with it, so the slope stays the one measured."""
        self._samples = deque((t + step, q) for t, q in self._samples)

    def observe(self, t: float, waiting: float) -> None:
        """Record ``waiting`` jobs at time ``t`` (s). The newest sample moves with each
        count until it is ``step_s`` past the one before, then stays; a time before it (a
        clock step back) starts afresh."""
        s = self._samples
        sample = (t, waiting)
        if s and t < s[-1][0]:
            s.clear()
        if len(s) > 1 and s[-1][0] - s[-2][0] < self.step_s:
            if s[-1] == sample and self._last == waiting:
                return  # the same count at the same moment (a simulator's many placements)
            s[-1] = sample
        else:
            s.append(sample)
        self._last = waiting
        self._forecast = _STALE
        while s and s[0][0] < t - self.window_s:
            s.popleft()

    def slope_per_h(self) -> float | None:
        """Least-squares change of the count per hour over the window; None when the
        samples span less than ``min_span`` of it."""
        s = self._samples
        if len(s) < 3 or s[-1][0] - s[0][0] < self.min_span * self.window_s:
            return None
        n = len(s)
        mt = sum(t for t, _ in s) / n
        mq = sum(q for _, q in s) / n
        var = sum((t - mt) ** 2 for t, _ in s)
        if var <= 0:
            return None
        cov = sum((t - mt) * (q - mq) for t, q in s)
        return cov / var * 3600.0

    def hours_to_empty(self) -> float | None:
        """Hours until no job waits if the queue keeps shrinking as it has over the window;
        None: it is not shrinking, or not known yet. Worked out once per change."""
        if self._forecast is _STALE:
            slope = self.slope_per_h()
            self._forecast = None if slope is None or slope >= 0 else self._last / -slope
        return self._forecast  # type: ignore[return-value]

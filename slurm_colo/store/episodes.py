"""Co-location episodes: intervals during which the set of jobs on one GPU is constant.

Built from the stored records: each record lists its co-runners with overlap intervals;
every record yields the segments of its own run, and segments seen from several records
(the same jobs on the same GPU) are merged, so each episode is stored once even when the
nodes' clocks disagree by a little. :func:`build_episodes` is pure
(:mod:`.episode_build`); :func:`update_episodes` builds the episodes of the records not
built yet, incrementally (:mod:`.episode_sync`), and :func:`rebuild_episodes` rebuilds
everything; :func:`load_episodes` and :func:`.episode_read.read_window` read them.

Each member is stored with the figures of its job's record (progress rate, own solo rate,
run and shared seconds); its normalised throughput while shared (``n``) and how it was
obtained (``source``) are computed when the episodes are read, against the current solo
reference of its class:

- ``progress``: from job-reported progress: ``n_job = rate / solo_rate`` (the job's own
  ``solo_rate`` when it reports one, else the median rate of solo runs of its class); the
  shared part is ``n = (n_job * T - t_solo) / t_shared`` (solo stretches count as 1).
- ``duration``: proxy without progress: ``n_job = median solo duration of the class /
  duration``, then the same split. Its error is the spread of solo durations within a
  class (coefficient of variation, reported per retrain); it gets a lower weight.
- ``null``: nothing usable (no solo reference, a co-runner whose record is missing, or a
  record whose node's clock stepped while the job ran: its duration is off by the step).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from .engine import db_errors
from .episode_build import (
    SKEW_TOLERANCE_S,
    BuildReport,
    EpisodeRow,
    EpisodeView,
    JobView,
    Member,
    SoloRef,
    build_episodes,
    build_groups,
    job_n,
    solo_reference,
)
from .episode_read import WindowEpisodes, db_solo_reference, load_episodes, read_window
from .episode_sync import clear_episodes, update_episodes

__all__ = [
    "SKEW_TOLERANCE_S",
    "BuildReport",
    "EpisodeRow",
    "EpisodeView",
    "JobView",
    "Member",
    "SoloRef",
    "WindowEpisodes",
    "build_episodes",
    "build_groups",
    "clear_episodes",
    "job_n",
    "load_episodes",
    "read_window",
    "rebuild_episodes",
    "solo_reference",
    "update_episodes",
]


def rebuild_episodes(engine: Engine) -> BuildReport:
    """Rebuild every episode from all the records (what :func:`update_episodes` keeps up
    to date incrementally); ``proxy_cv`` is that of all solo runs."""
    clear_episodes(engine)
    rep = update_episodes(engine)
    with db_errors(engine), engine.connect() as conn:
        rep.proxy_cv = dict(db_solo_reference(conn, None).cv)
    return rep

"""Tables of the history store (SQLAlchemy 2 declarative models).

The schema is created and changed only by the Alembic migrations in ``migrations/``
(``slurm-colo db upgrade``); these models describe the head revision.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Job(Base):
    """One per-job record (``slurm_colo.contracts.records.JobRecord``), keyed by its record id."""

    __tablename__ = "jobs"
    record_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    node: Mapped[str] = mapped_column(String(128), index=True)
    user: Mapped[str] = mapped_column(String(64), index=True)
    uid: Mapped[int] = mapped_column(BigInteger)
    cls: Mapped[str] = mapped_column(String(64), index=True)
    start_time: Mapped[float] = mapped_column(Float, index=True)
    end_time: Mapped[float] = mapped_column(Float)
    mode: Mapped[str] = mapped_column(String(16))
    shared: Mapped[bool] = mapped_column(Boolean)
    mechanism: Mapped[str | None] = mapped_column(String(16), nullable=True)
    thread_pct: Mapped[int | None] = mapped_column(Integer, nullable=True)
    mem_limit_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpus: Mapped[str] = mapped_column(String(200))  # comma-separated indexes
    gpu_uuids: Mapped[str] = mapped_column(Text)  # comma-separated
    exit_code: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    mps_fault: Mapped[bool] = mapped_column(Boolean)
    progress_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    progress_solo_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    progress_iterations: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    version: Mapped[int] = mapped_column(Integer)
    ingested_at: Mapped[float] = mapped_column(Float)
    #: the GPU's model (``v100``; "" = unknown: retrain takes its node's from the config)
    gpu_model: Mapped[str] = mapped_column(String(32), index=True, server_default="")
    #: the GPU's GRES type (``v100_s1``) and NVML product name, as the record gives them
    gres_type: Mapped[str] = mapped_column(String(64), server_default="")
    gpu_name: Mapped[str] = mapped_column(String(96), server_default="")


class Profile(Base):
    """The sampler summary of a job (utilisation, memory)."""

    __tablename__ = "profiles"
    record_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("jobs.record_id", ondelete="CASCADE"), primary_key=True
    )
    sm_util_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    sm_util_p95: Mapped[float | None] = mapped_column(Float, nullable=True)
    mem_used_mean_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    mem_peak_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    mem_bw_util_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    power_w_mean: Mapped[float | None] = mapped_column(Float, nullable=True)
    samples: Mapped[int | None] = mapped_column(Integer, nullable=True)
    solo_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    extra: Mapped[str] = mapped_column(Text, default="{}")  # other keys, JSON


class CoRunnerRow(Base):
    """Another job on the same GPU during [start_time, end_time], as the record lists it."""

    __tablename__ = "co_runners"
    __table_args__ = (UniqueConstraint("record_id", "co_job_id", "start_time"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    record_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("jobs.record_id", ondelete="CASCADE"), index=True
    )
    co_job_id: Mapped[int] = mapped_column(BigInteger)
    co_cls: Mapped[str] = mapped_column(String(64))
    co_user: Mapped[str] = mapped_column(String(64))
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float] = mapped_column(Float)


class Episode(Base):
    """An interval during which the set of jobs on one GPU was constant (2+ jobs).

    Built incrementally from the records (``episode_sources`` says which records are in);
    its members are rows of ``episode_members``."""

    __tablename__ = "episodes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(128), index=True)
    gpu: Mapped[str] = mapped_column(String(200))
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float] = mapped_column(Float, index=True)
    n_members: Mapped[int] = mapped_column(Integer)
    mps_fault: Mapped[bool] = mapped_column(Boolean, default=False)
    oom: Mapped[bool] = mapped_column(Boolean, default=False)
    #: the GPU's model, from the records of its members ("" = unknown)
    gpu_model: Mapped[str] = mapped_column(String(32), server_default="")


class EpisodeMember(Base):
    """One job of an episode with the figures of its record on that node (all None when the
    record is missing): the normalised throughput ``n`` is computed from them at read time,
    against the current solo reference of the class."""

    __tablename__ = "episode_members"
    episode_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("episodes.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, index=True)
    #: the episode's end, so that a window is read without a join
    end_time: Mapped[float] = mapped_column(Float)
    cls: Mapped[str] = mapped_column(String(64))
    rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    solo_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    total_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    shared_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class EpisodeSource(Base):
    """A job record the episodes were built from (the build's watermark), with the figures
    the retrain reads per record: solo run or not, duration, progress rate, peak memory,
    skewed intervals."""

    __tablename__ = "episode_sources"
    record_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    node: Mapped[str] = mapped_column(String(128), index=True)
    cls: Mapped[str] = mapped_column(String(64))
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float] = mapped_column(Float)
    rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    mem_peak_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: no co-runner listed at all and not out of memory: counts for the solo reference
    solo: Mapped[bool] = mapped_column(Boolean)
    skewed: Mapped[int] = mapped_column(Integer)
    #: the record's GPU model (solo references and class profiles are kept per model)
    gpu_model: Mapped[str] = mapped_column(String(32), server_default="")


class PairObservation(Base):
    """Aggregated evidence for one pair of classes from one source (history, gavel:v100...)."""

    __tablename__ = "pair_observations"
    __table_args__ = (UniqueConstraint("source", "gpu_model", "a", "b"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(64), index=True)
    gpu_model: Mapped[str] = mapped_column(String(32))
    a: Mapped[str] = mapped_column(String(64))
    b: Mapped[str] = mapped_column(String(64))
    n_a: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_b: Mapped[float | None] = mapped_column(Float, nullable=True)
    weight: Mapped[float] = mapped_column(Float)
    censored: Mapped[bool] = mapped_column(Boolean, default=False)
    never: Mapped[bool] = mapped_column(Boolean, default=False)
    faults: Mapped[float] = mapped_column(Float, default=0.0)
    observed_at: Mapped[float] = mapped_column(Float)


class ClassSolo(Base):
    """Solo figures of a class from one source (rate, memory, utilisation)."""

    __tablename__ = "class_solo"
    __table_args__ = (UniqueConstraint("source", "gpu_model", "cls"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(64), index=True)
    gpu_model: Mapped[str] = mapped_column(String(32))
    cls: Mapped[str] = mapped_column(String(64))
    solo_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    sm_util: Mapped[float | None] = mapped_column(Float, nullable=True)


class ScoreSet(Base):
    """One trained score set: its training window, metrics, verdict and the full table."""

    __tablename__ = "score_sets"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created: Mapped[float] = mapped_column(Float, index=True)
    gpu_model: Mapped[str] = mapped_column(String(32))
    window_start: Mapped[float | None] = mapped_column(Float, nullable=True)
    window_end: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_entries: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # live, retired, rejected
    message: Mapped[str] = mapped_column(Text, default="")
    metrics: Mapped[str] = mapped_column(Text, default="{}")
    table_json: Mapped[str] = mapped_column(Text)


class LiveScoreSet(Base):
    """Which score set is live (one row per GPU model; '' for the site default)."""

    __tablename__ = "live_score_set"
    gpu_model: Mapped[str] = mapped_column(String(32), primary_key=True)
    score_set_id: Mapped[str] = mapped_column(String(64), ForeignKey("score_sets.id"))
    since: Mapped[float] = mapped_column(Float)

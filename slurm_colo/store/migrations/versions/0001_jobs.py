"""Jobs, their profiles and co-runners (the raw per-job records).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("record_id", sa.String(200), primary_key=True),
        sa.Column("cluster", sa.String(64), nullable=False),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("uid", sa.Integer, nullable=False),
        sa.Column("cls", sa.String(64), nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("shared", sa.Boolean, nullable=False),
        sa.Column("mechanism", sa.String(16), nullable=True),
        sa.Column("thread_pct", sa.Integer, nullable=True),
        sa.Column("mem_limit_gib", sa.Float, nullable=True),
        sa.Column("gpus", sa.String(200), nullable=False),
        sa.Column("gpu_uuids", sa.Text, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("mps_fault", sa.Boolean, nullable=False),
        sa.Column("progress_rate", sa.Float, nullable=True),
        sa.Column("progress_solo_rate", sa.Float, nullable=True),
        sa.Column("progress_iterations", sa.BigInteger, nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("ingested_at", sa.Float, nullable=False),
    )
    for col in ("job_id", "node", "user", "cls", "start_time"):
        op.create_index(f"ix_jobs_{col}", "jobs", [col])
    op.create_table(
        "profiles",
        sa.Column(
            "record_id",
            sa.String(200),
            sa.ForeignKey("jobs.record_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("sm_util_mean", sa.Float, nullable=True),
        sa.Column("sm_util_p95", sa.Float, nullable=True),
        sa.Column("mem_used_mean_gib", sa.Float, nullable=True),
        sa.Column("mem_peak_gib", sa.Float, nullable=True),
        sa.Column("mem_bw_util_mean", sa.Float, nullable=True),
        sa.Column("power_w_mean", sa.Float, nullable=True),
        sa.Column("samples", sa.Integer, nullable=True),
        sa.Column("solo_s", sa.Float, nullable=True),
        sa.Column("extra", sa.Text, nullable=False),
    )
    op.create_table(
        "co_runners",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "record_id",
            sa.String(200),
            sa.ForeignKey("jobs.record_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("co_job_id", sa.BigInteger, nullable=False),
        sa.Column("co_cls", sa.String(64), nullable=False),
        sa.Column("co_user", sa.String(64), nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.UniqueConstraint("record_id", "co_job_id", "start_time"),
    )
    op.create_index("ix_co_runners_record_id", "co_runners", ["record_id"])


def downgrade() -> None:
    op.drop_table("co_runners")
    op.drop_table("profiles")
    op.drop_table("jobs")

"""Incremental episodes: members as rows with their records' figures, and the records the
episodes were built from.

The episodes table holds derived data only (rebuilt from the job records), so it is
replaced, not converted: the first retrain after the upgrade builds it again.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _old_episodes() -> None:
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("gpu", sa.String(200), nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("n_members", sa.Integer, nullable=False),
        sa.Column("members", sa.Text, nullable=False),
        sa.Column("mps_fault", sa.Boolean, nullable=False),
        sa.Column("oom", sa.Boolean, nullable=False),
    )
    op.create_index("ix_episodes_node", "episodes", ["node"])
    op.create_index("ix_episodes_start_time", "episodes", ["start_time"])


def upgrade() -> None:
    op.drop_table("episodes")
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("gpu", sa.String(200), nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("n_members", sa.Integer, nullable=False),
        sa.Column("mps_fault", sa.Boolean, nullable=False),
        sa.Column("oom", sa.Boolean, nullable=False),
    )
    op.create_index("ix_episodes_node", "episodes", ["node"])
    op.create_index("ix_episodes_end_time", "episodes", ["end_time"])
    op.create_table(
        "episode_members",
        sa.Column(
            "episode_id",
            sa.Integer,
            sa.ForeignKey("episodes.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("job_id", sa.BigInteger, primary_key=True),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("cls", sa.String(64), nullable=False),
        sa.Column("rate", sa.Float, nullable=True),
        sa.Column("solo_rate", sa.Float, nullable=True),
        sa.Column("total_s", sa.Float, nullable=True),
        sa.Column("shared_s", sa.Float, nullable=True),
    )
    op.create_index("ix_episode_members_job_id", "episode_members", ["job_id"])
    op.create_table(
        "episode_sources",
        sa.Column("record_id", sa.String(200), primary_key=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("cls", sa.String(64), nullable=False),
        sa.Column("start_time", sa.Float, nullable=False),
        sa.Column("end_time", sa.Float, nullable=False),
        sa.Column("rate", sa.Float, nullable=True),
        sa.Column("mem_peak_gib", sa.Float, nullable=True),
        sa.Column("solo", sa.Boolean, nullable=False),
        sa.Column("skewed", sa.Integer, nullable=False),
    )
    op.create_index("ix_episode_sources_node", "episode_sources", ["node"])


def downgrade() -> None:
    op.drop_table("episode_sources")
    op.drop_table("episode_members")
    op.drop_table("episodes")
    _old_episodes()

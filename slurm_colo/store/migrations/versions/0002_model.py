"""Co-location episodes, pair observations, class solo figures and score sets.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
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
    op.create_table(
        "pair_observations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(32), nullable=False),
        sa.Column("a", sa.String(64), nullable=False),
        sa.Column("b", sa.String(64), nullable=False),
        sa.Column("n_a", sa.Float, nullable=True),
        sa.Column("n_b", sa.Float, nullable=True),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("censored", sa.Boolean, nullable=False),
        sa.Column("never", sa.Boolean, nullable=False),
        sa.Column("faults", sa.Float, nullable=False),
        sa.Column("observed_at", sa.Float, nullable=False),
        sa.UniqueConstraint("source", "gpu_model", "a", "b"),
    )
    op.create_index("ix_pair_observations_source", "pair_observations", ["source"])
    op.create_table(
        "class_solo",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("gpu_model", sa.String(32), nullable=False),
        sa.Column("cls", sa.String(64), nullable=False),
        sa.Column("solo_rate", sa.Float, nullable=True),
        sa.Column("memory_gib", sa.Float, nullable=True),
        sa.Column("sm_util", sa.Float, nullable=True),
        sa.UniqueConstraint("source", "gpu_model", "cls"),
    )
    op.create_index("ix_class_solo_source", "class_solo", ["source"])
    op.create_table(
        "score_sets",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("created", sa.Float, nullable=False),
        sa.Column("gpu_model", sa.String(32), nullable=False),
        sa.Column("window_start", sa.Float, nullable=True),
        sa.Column("window_end", sa.Float, nullable=True),
        sa.Column("n_entries", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("metrics", sa.Text, nullable=False),
        sa.Column("table_json", sa.Text, nullable=False),
    )
    op.create_index("ix_score_sets_created", "score_sets", ["created"])
    op.create_table(
        "live_score_set",
        sa.Column("gpu_model", sa.String(32), primary_key=True),
        sa.Column("score_set_id", sa.String(64), sa.ForeignKey("score_sets.id"), nullable=False),
        sa.Column("since", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for t in ("live_score_set", "score_sets", "class_solo", "pair_observations", "episodes"):
        op.drop_table(t)

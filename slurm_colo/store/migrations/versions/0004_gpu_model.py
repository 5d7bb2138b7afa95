"""The GPU model of each record, episode and episode source (mixed-model sites train one
score set per model).

Records stored before have an empty model: ``retrain`` gives them the model their node
has in the configuration's ``[[gpus]]`` layouts. The episode tables hold derived data
only, so they are emptied (as revision 0003 did): the first retrain after the upgrade
builds them again, each episode tagged with its GPU's model.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _text(name: str, length: int) -> sa.Column:
    return sa.Column(name, sa.String(length), nullable=False, server_default="")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(_text("gpu_model", 32))
        b.add_column(_text("gres_type", 64))
        b.add_column(_text("gpu_name", 96))
    op.create_index("ix_jobs_gpu_model", "jobs", ["gpu_model"])
    op.execute("DELETE FROM episode_members")
    op.execute("DELETE FROM episodes")
    op.execute("DELETE FROM episode_sources")
    with op.batch_alter_table("episodes") as b:
        b.add_column(_text("gpu_model", 32))
    with op.batch_alter_table("episode_sources") as b:
        b.add_column(_text("gpu_model", 32))


def downgrade() -> None:
    with op.batch_alter_table("episode_sources") as b:
        b.drop_column("gpu_model")
    with op.batch_alter_table("episodes") as b:
        b.drop_column("gpu_model")
    op.drop_index("ix_jobs_gpu_model", "jobs")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("gpu_name")
        b.drop_column("gres_type")
        b.drop_column("gpu_model")

"""A job's uid as a 64-bit column: directory services (SSSD, Active Directory id mapping)
hand out uids above 2^31, which PostgreSQL's 32-bit ``integer`` cannot hold, so one such
record failed every ingest batch it was in. SQLite stores any integer either way; the
change there only rewrites the table.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.alter_column("uid", type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.alter_column("uid", type_=sa.Integer(), existing_type=sa.BigInteger())

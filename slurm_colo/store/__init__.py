"""History store: jobs, profiles, co-location episodes, pair observations, score sets.

SQLAlchemy 2 with Alembic migrations shipped in the package (``slurm-colo db upgrade``);
SQLite by default, PostgreSQL by URL. See docs/history.md.
"""

from .engine import current_revision, head_revision, make_engine, require_schema, upgrade
from .ingest import BadRecord, ingest_records, record_from_json

__all__ = [
    "BadRecord",
    "current_revision",
    "head_revision",
    "ingest_records",
    "make_engine",
    "record_from_json",
    "require_schema",
    "upgrade",
]

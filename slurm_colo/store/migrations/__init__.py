"""Alembic migrations of the history store, run by ``slurm-colo db upgrade``."""

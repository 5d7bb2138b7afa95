"""Alembic environment: always run programmatically with a connection in
``config.attributes["connection"]`` (see slurm_colo.store.engine.upgrade)."""

from __future__ import annotations

from alembic import context

from slurm_colo.store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `slurm-colo db upgrade`")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

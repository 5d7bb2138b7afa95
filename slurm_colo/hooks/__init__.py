"""Slurm hook entry points: ``python -m slurm_colo.hooks {prolog,epilog,taskprolog,taskepilog}``.

Run by the shims in ``prolog/``. Exit status: 0 for everything the hook can handle (a
Prolog failure would drain the node); 100 only for a deliberate refusal the shim passes on.
Imports stay light on the Prolog/TaskProlog path (no typer, SQLAlchemy, numpy).
"""

HOOKS = ("prolog", "epilog", "taskprolog", "taskepilog")
REFUSE = 100

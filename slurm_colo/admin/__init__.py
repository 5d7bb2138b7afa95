"""Admin tooling: install snippets, the `doctor` checks, man pages and config reference.

Everything here generates text or inspects files handed to it; the CLI module
``slurm_colo.cli.admin`` wires it to the real system.
"""

"""Dispatch ``python -m slurm_colo.hooks NAME`` to the hook module, importing only it."""

from __future__ import annotations

import importlib
import sys

from . import HOOKS


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in HOOKS:
        print(f"usage: python -m slurm_colo.hooks {{{','.join(HOOKS)}}}", file=sys.stderr)
        return 2
    mod = importlib.import_module(f"slurm_colo.hooks.{argv[0]}")
    return int(mod.run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The package ships identical copies of spank/ (SPANK plugin source) and prolog/ (hook
shims) under slurm_colo/data/, so `slurm-colo install` works from a pip install."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _sources(d: Path) -> set[str]:
    return {p.name for p in d.iterdir() if p.is_file() and p.suffix not in (".so", ".o")}


@pytest.mark.parametrize("canonical,copy", [("spank", "slurm_colo/data/spank"),
                                            ("prolog", "slurm_colo/data/prolog")])
def test_shipped_copy_is_identical(canonical, copy):
    a, b = REPO / canonical, REPO / copy
    assert b.is_dir(), f"{copy}/ missing: copy {canonical}/ there (the package ships it)"
    names = _sources(a)
    assert names, f"{canonical}/ has no source files"
    assert names == _sources(b), f"{copy}/ and {canonical}/ hold different files"
    for n in sorted(names):
        assert filecmp.cmp(a / n, b / n, shallow=False), \
            f"{copy}/{n} differs from {canonical}/{n}: copy it again (cp {canonical}/{n} {copy}/)"

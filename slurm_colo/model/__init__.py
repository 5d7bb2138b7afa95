"""Compatibility model: observations -> fitted pairwise model -> ScoreTable; evaluation.

Pure: no database, no files. See docs/model.md.
"""

from .data import ClassProfile, Observations, family_and_batch
from .fit import fit_gavel, fit_table, observations_from_gavel

__all__ = [
    "ClassProfile",
    "Observations",
    "family_and_batch",
    "fit_gavel",
    "fit_table",
    "observations_from_gavel",
]

"""Exact and near duplicates in a membership task: the attack's door to :mod:`dpaudit.corpus.near_duplicates`.

The similarity lives on the corpus floor so that ``dpaudit inject`` (its user split) and the attack's examples task
use one rule; see that module for the rule and its references (Lee et al. 2022; Duan et al. 2024).
"""

from __future__ import annotations

from dpaudit.corpus.near_duplicates import (
    BLOCK,
    DEFAULT_THRESHOLD,
    SHINGLE,
    CrossPairs,
    cross_pairs,
    first_of_each,
    normalize,
)

__all__ = ["BLOCK", "DEFAULT_THRESHOLD", "SHINGLE", "CrossPairs", "cross_pairs", "first_of_each", "normalize"]

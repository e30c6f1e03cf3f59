"""The inject run directory's names and reader, re-exported from the core for the writing side.

The contract (file names, schema, required files, the :class:`~dpaudit.inject_dir.reader.Canary` record and
the one hash-verified reader :func:`~dpaudit.inject_dir.reader.load_inject_run`) lives in
:mod:`dpaudit.inject_dir.reader`, so that trainers and attacks read inject directories without importing this
package; :mod:`canaries.pipeline` writes what that module reads.
"""

from __future__ import annotations

from dpaudit.inject_dir.reader import (
    CANARIES,
    HELDOUT,
    OUTPUT_FILES,
    PUBLIC,
    REQUIRED_FILES,
    SCHEMA,
    SCHEMA_PREFIX,
    SPLITS,
    TOKENIZER_NOTE,
    TRAIN,
    Canary,
    InjectRun,
    load_inject_run,
    read_canaries,
)

__all__ = [
    "CANARIES",
    "HELDOUT",
    "OUTPUT_FILES",
    "PUBLIC",
    "REQUIRED_FILES",
    "SCHEMA",
    "SCHEMA_PREFIX",
    "SPLITS",
    "TOKENIZER_NOTE",
    "TRAIN",
    "Canary",
    "InjectRun",
    "load_inject_run",
    "read_canaries",
]

"""The inject run directory: its file names, schema, and a verified loader for later stages.

Trainers and attacks call :func:`load_inject_run` instead of opening the files themselves: it
checks every output against the sha256 in ``manifest.json`` (so an edited ``train.jsonl`` is
refused, not silently audited), and returns the canaries as :class:`canaries.generate.Canary`
objects with the secret space rebuilt from the manifest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canaries.generate import Canary
from canaries.spaces import SecretSpace, space_from_manifest
from dpaudit.errors import UserInputError
from dpaudit.rundir import read_jsonl, verify_run_dir

SCHEMA = "dpaudit.inject/1"
SCHEMA_PREFIX = "dpaudit.inject/"
TRAIN, HELDOUT, PUBLIC, CANARIES = "train.jsonl", "heldout.jsonl", "public.jsonl", "canaries.jsonl"
OUTPUT_FILES = (TRAIN, HELDOUT, PUBLIC, CANARIES)
TOKENIZER_NOTE = (
    "Train tokenizers on public.jsonl only: a tokenizer trained on train.jsonl would learn the canaries' "
    "secrets as vocabulary and leak them regardless of how the model is trained."
)


@dataclass(frozen=True, kw_only=True)
class InjectRun:
    """A verified inject run directory."""

    path: Path
    manifest: dict[str, Any]
    canaries: list[Canary]
    space: SecretSpace | None

    @property
    def labelled(self) -> bool:
        return bool(self.manifest["corpus"]["labelled"])

    def file(self, name: str) -> Path:
        return self.path / name


def read_canaries(path: str | os.PathLike[str]) -> list[Canary]:
    """The rows of a ``canaries.jsonl`` as :class:`Canary` objects."""
    out = []
    for i, record in enumerate(read_jsonl(path), start=1):
        try:
            out.append(Canary.from_record(record))
        except (KeyError, TypeError, ValueError) as err:
            raise UserInputError(f"{path}:{i}: not a canary record ({err}); rerun dpaudit inject.") from None
    return out


def load_inject_run(path: str | os.PathLike[str]) -> InjectRun:
    """Verify an inject directory against its manifest and load its canaries.

    ``space`` is None for phrase spaces, which need their phrase corpus to be rebuilt.

    Raises:
        UserInputError: if the directory is not an inject run or a file changed since it was written.
    """
    path = Path(path)
    manifest = verify_run_dir(path, schema_prefix=SCHEMA_PREFIX)
    missing = [name for name in OUTPUT_FILES if name not in manifest.get("outputs", {})]
    if missing:
        raise UserInputError(f"{path}: manifest lists no {', '.join(missing)}; rerun dpaudit inject.")
    entry = manifest["secret_space"]
    space = space_from_manifest(entry) if entry["kind"] in ("digits", "words") else None
    return InjectRun(path=path, manifest=manifest, canaries=read_canaries(path / CANARIES), space=space)

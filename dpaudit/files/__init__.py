"""The directories stages hand each other, read and written safely.

- :mod:`.run_dirs`: every run directory's contract: manifests, atomic writes, hash verification, locks, what
  dpaudit wrote (docs/run-directories.md);
- :mod:`.model_dirs`: a Hugging Face model directory, checked once, up front, before a trainer or an attack
  loads it.
"""

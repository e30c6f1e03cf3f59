"""The ``jax-privacy`` trainer: JAX Privacy 2.0's DP-SGD on jax-bert's Flax BERT, audited through its own gradient path.

Modules: :mod:`.config` (the settings), :mod:`.loop` (one run composed of JAX Privacy's batch selection, clipped
gradient, privatizer and accountant), :mod:`.canary` (a canary table only canary inputs reach), :mod:`.privacy`
(``privacy.json``: the library's claim beside dpaudit's recomputation), :mod:`.setup_file` (``--setup FILE.py:build``),
:mod:`.trainer` (the plug-in).
"""

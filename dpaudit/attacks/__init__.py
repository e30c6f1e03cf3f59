"""Attacks on a trained model: one module per attack, a registry (the entry-point group ``dpaudit.attacks``), one
typed result.

Canary attacks (this package): exact exposure (:mod:`.exposure`, Carlini et al. 2019; its rank
mathematics in :mod:`.exposure_rank`) and
masked-secret reconstruction (:mod:`.reconstruction`, Anil et al. 2021). Membership inference:
:mod:`.mia` (the tasks and the audit), :mod:`.loss`, :mod:`.shokri` (Shokri et al. 2017), :mod:`.ref`,
:mod:`.lira`, :mod:`.rmia`, the shadow models they train in :mod:`.shadow_models`; :mod:`.canary`, the one-run
audit of designed coin-flip canaries with the score that fits their design (Panda et al. 2025). Each attack declares
its options as a frozen ``Config`` (the shared ones in :mod:`.options`) and its properties as class attributes
(:class:`.base.BaseAttack`). Statistics every attack
shares live in :mod:`dpaudit.audit`; results in :mod:`.results`; the composition of a whole run in
:mod:`.run`, which the attack stage (:mod:`dpaudit.stages.attack`, ``dpaudit.attack(...)``) calls with
the report page. Importing this package imports neither torch nor jax, and nothing here imports the
report or the command line.
"""

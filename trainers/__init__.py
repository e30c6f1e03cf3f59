"""Trainer plug-ins shipped with dpaudit (``jax_bert``; ``edp_sgd`` later).

Each subpackage implements the :class:`dpaudit.trainer_api.Trainer` protocol and is registered under
the ``dpaudit.trainers`` entry-point group. Nothing here is imported by :mod:`dpaudit` directly.
"""

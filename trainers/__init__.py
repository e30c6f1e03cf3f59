"""Trainer plug-ins shipped with dpaudit: ``jax_bert``, ``edp_sgd`` and ``rgp``.

Each of those subpackages implements the :class:`dpaudit.training.api.Trainer` protocol and is
registered under the ``dpaudit.trainers`` entry-point group; no trainer imports another.
``torch_common`` is not a trainer: it holds the torch machinery (data, model, sampling, noise,
processes, checkpoints, HF export and the training loop) that the two torch trainers share.
Nothing here is imported by :mod:`dpaudit` directly.
"""
